// RequestFuzzer: draws the requests of the daemons' fuzz test (fuzz_test.cc) - valid ones,
// checked against a model of the values the kvserver holds, and malformed ones that must be
// refused - for every method of the kvserver (Init, Push, Pull, PushPull, RowSparsePull,
// Command: raw frames as proto/kvstore.proto lays them out) and of the scheduler (its
// protobuf methods with bytes that do not parse).
//
// Each malformed request is malformed by construction: it carries one defect (a huge,
// negative or overflowing dimension, a wrong dtype, a payload longer or shorter than its
// headers, a bad offset, an unknown key or key group, another node's id, bytes that do not
// parse, ...) in an otherwise valid request, or is random bytes that cannot parse as a request
// of this worker; `kind` names it. Valid requests use the keys Setup initialised with random
// values; writes use the assign updater, so the model is exact (float64, values that every
// dtype holds exactly).
//
// Threading: one thread draws; a valid request's check updates the model, so valid requests
// are sent and checked in the order drawn.
#ifndef KVSTORE_TESTS_INTEGRATION_REQUEST_FUZZER_H_
#define KVSTORE_TESTS_INTEGRATION_REQUEST_FUZZER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/partitioner.h"
#include "common/server_methods.h"
#include "common/tensor.h"
#include "proto/kvstore.pb.h"
#include "tests/integration/daemon_job.h"

namespace kvstore::testing {

struct FuzzRequest {
  DaemonJob::Daemon daemon = DaemonJob::Daemon::kServer;
  std::string method;  // The full gRPC method path.
  grpc::ByteBuffer bytes;
  // What the request is: "Push: trailing payload bytes", "random bytes", ...
  std::string kind;
  // Valid requests: `check` says what is wrong with the answer ("" when it is right) and, when
  // it is right, applies the request to the model.
  bool valid = false;
  std::function<std::string(const absl::Status&, const grpc::ByteBuffer&)> check;
  // Malformed requests: the code expected when the defect decides it alone; otherwise any
  // refusal will do.
  std::optional<absl::StatusCode> code;
};

class RequestFuzzer {
 public:
  // The job's worker `node_id`, its chunk size and the kvserver's max_value_bytes.
  RequestFuzzer(uint64_t node_id, int64_t chunk_bytes, int64_t max_value_bytes, uint64_t seed);

  // Setup returns the valid requests that initialise every key and register the key group.
  std::vector<FuzzRequest> Setup();
  // Next draws a request: valid, malformed, or random bytes, to either daemon.
  FuzzRequest Next();
  // Final returns valid pulls of every key, checked against the model.
  std::vector<FuzzRequest> Final();
  // num_keys is the number of keys Setup initialises (and the kvserver must hold at the end).
  int num_keys() const { return static_cast<int>(keys_.size()); }

 private:
  struct KeyState {
    int64_t key;
    DType dtype;
    Shape shape;
    std::vector<Slice> chunks;
    std::vector<double> values;  // The model.
  };
  // Values: headers and the payload they describe, back to back.
  struct Values {
    std::vector<proto::TensorHeader> headers;
    std::string payload;
  };
  // Defect: what is wrong with a malformed request, and the code that refuses it when that
  // defect alone decides it.
  struct Defect {
    std::string kind;
    std::optional<absl::StatusCode> code = absl::StatusCode::kInvalidArgument;
  };
  // Drawn: a chunk of a key in a request, with the values pushed to it (none for a pull).
  struct Drawn {
    KeyState* key;
    Slice chunk;
    std::vector<double> data;
  };

  // Draws.
  int64_t Int(int64_t lo, int64_t hi);  // Inclusive.
  int64_t NonZero(int64_t bound);       // In [-bound, bound], not 0.
  size_t Index(size_t n);               // In [0, n).
  bool Chance(double p);
  template <typename T>
  const T& Pick(const std::vector<T>& from) {
    return from[static_cast<size_t>(Int(0, static_cast<int64_t>(from.size()) - 1))];
  }
  std::string RandomBytes(size_t n);
  std::vector<double> RandomValues(int64_t n);
  uint64_t ForeignNode();
  // AnotherNode names a node other than this worker and the scheduler in `request`: refused,
  // whatever else it holds.
  template <typename Request>
  Defect AnotherNode(Request* request);
  Defect AnotherNode(uint64_t* node);
  int64_t FreshKey();

  // Building blocks.
  static std::string Encode(DType dtype, const std::vector<double>& values);
  static proto::TensorHeader ChunkHeader(const KeyState& k, const Slice& chunk);
  static void Append(Values* values, proto::TensorHeader header, const std::string& bytes);
  // DenseValues draws 1 to `max_values` distinct chunks, with new values when `with_data`.
  std::vector<Drawn> DrawChunks(int max_values, bool with_data);
  static Values DenseValues(const std::vector<Drawn>& drawn);
  // RowSparseValues draws a valid row-sparse push of a key of rank >= 1: its ids and rows.
  Values RowSparseValues(KeyState** key, std::vector<int64_t>* ids, std::vector<double>* rows);
  // GroupPayload draws new values for the key group's members, packed in member order.
  std::string GroupPayload(std::vector<std::vector<double>>* drawn);
  // FreshValues returns one or two values of keys never initialised, of small random specs.
  Values FreshValues();

  // Valid requests.
  FuzzRequest ValidPush(bool push_pull);
  FuzzRequest ValidPull();
  FuzzRequest ValidRowSparsePush();
  FuzzRequest ValidRowSparsePull();
  FuzzRequest ValidGroupPush(bool list_members);
  FuzzRequest ValidGroupPull();
  FuzzRequest ValidSchedulerCall();

  // Malformed requests.
  FuzzRequest BadInit();
  FuzzRequest BadPush(bool push_pull);
  FuzzRequest BadGroupPush(bool push_pull);
  FuzzRequest BadPull();
  FuzzRequest BadRowSparsePull();
  FuzzRequest BadCommand();
  FuzzRequest BadFrame();
  FuzzRequest RandomRequest();
  using Check = std::function<std::string(const absl::Status&, const grpc::ByteBuffer&)>;
  static FuzzRequest Valid(ServerMethod method, grpc::ByteBuffer bytes, std::string kind,
                           Check check);
  static FuzzRequest Invalid(ServerMethod method, grpc::ByteBuffer bytes, std::string kind,
                             std::optional<absl::StatusCode> code);
  FuzzRequest BadSchedulerCall();
  // MutateValue gives header `t` of `values` one defect that makes a Push, PushPull, Pull or
  // (with `for_init`) Init of it invalid; returns its name and the code it decides.
  Defect MutateValue(Values* values, size_t t, bool for_init, bool pull);
  // MutatePayload moves, cuts or extends the payload against its headers.
  std::string MutatePayload(Values* values);

  // CheckPulled says how a Pull or PushPull reply differs from the model's `drawn` chunks.
  static std::string CheckPulled(const grpc::ByteBuffer& reply, const std::vector<Drawn>& drawn);

  const uint64_t node_id_;
  const int64_t chunk_bytes_;
  const int64_t max_value_bytes_;
  std::mt19937_64 rng_;
  std::vector<KeyState> keys_;
  std::vector<size_t> group_;  // Indexes into keys_ of the key group's members, in order.
  static constexpr uint64_t kGroupId = 77;
  uint64_t next_request_id_ = 1;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_INTEGRATION_REQUEST_FUZZER_H_
