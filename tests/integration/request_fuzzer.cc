#include "tests/integration/request_fuzzer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/compression.h"
#include "common/proto_convert.h"
#include "common/wire_frame.h"

namespace kvstore::testing {
namespace {

using Daemon = DaemonJob::Daemon;
using Code = absl::StatusCode;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr uint64_t kSchedulerNode = 1;

template <typename Request>
void SetHeaders(Request* request, const std::vector<proto::TensorHeader>& headers) {
  for (const proto::TensorHeader& h : headers) *request->add_tensors() = h;
}

template <typename Request>
grpc::ByteBuffer PushFrameOf(uint64_t node, uint64_t request_id, uint64_t group,
                             const std::vector<proto::TensorHeader>& headers,
                             const std::string& payload) {
  Request push;
  push.set_node_id(node);
  push.set_request_id(request_id);
  push.set_group_id(group);
  SetHeaders(&push, headers);
  return RawFrame(push, payload);
}

// PushFrame frames a Push (or a PushPull) of `headers` and `payload`.
grpc::ByteBuffer PushFrame(bool push_pull, uint64_t node, uint64_t request_id, uint64_t group,
                           const std::vector<proto::TensorHeader>& headers,
                           const std::string& payload) {
  return push_pull ? PushFrameOf<proto::PushPullRequest>(node, request_id, group, headers, payload)
                   : PushFrameOf<proto::PushRequest>(node, request_id, group, headers, payload);
}

std::string Int64Bytes(const std::vector<int64_t>& ids) {
  std::string bytes(ids.size() * sizeof(int64_t), '\0');
  if (!ids.empty()) std::memcpy(bytes.data(), ids.data(), bytes.size());
  return bytes;
}

// Payload returns the payload of a framed reply (after its header), or nothing when the reply
// is not a frame.
std::optional<std::string> ReplyPayload(const grpc::ByteBuffer& reply,
                                        proto::PullResponse* header) {
  absl::StatusOr<Payload> payload = DecodeFrame(reply, header);
  if (!payload.ok()) return std::nullopt;
  std::string bytes(payload->size(), '\0');
  if (!payload->CopyTo(0, bytes.size(), bytes.data()).ok()) return std::nullopt;
  return bytes;
}

// RequestMessage returns an empty request of a kvserver method, to parse bytes with.
std::unique_ptr<google::protobuf::MessageLite> RequestMessage(ServerMethod method) {
  switch (method) {
    case ServerMethod::kInit:
      return std::make_unique<proto::InitRequest>();
    case ServerMethod::kPush:
      return std::make_unique<proto::PushRequest>();
    case ServerMethod::kPushPull:
      return std::make_unique<proto::PushPullRequest>();
    case ServerMethod::kPull:
    case ServerMethod::kRowSparsePull:
      return std::make_unique<proto::PullRequest>();
    case ServerMethod::kTableInit:
      return std::make_unique<proto::TableInitRequest>();
    case ServerMethod::kTablePush:
      return std::make_unique<proto::TablePushRequest>();
    case ServerMethod::kTablePull:
      return std::make_unique<proto::TablePullRequest>();
    case ServerMethod::kCommand:
      break;
  }
  return std::make_unique<proto::ServerCommandRequest>();
}

// NodeOf returns the node id a parsed kvserver request names (field 1 of each).
uint64_t NodeOf(const google::protobuf::MessageLite& request) {
  proto::FinishRequest node;  // Field 1: the node id, as in every kvserver request.
  node.ParseFromString(request.SerializeAsString());
  return node.node_id();
}

// The scheduler's methods and the messages they take.
struct SchedulerMethod {
  const char* path;
  std::unique_ptr<google::protobuf::MessageLite> (*make)();
};
template <typename Message>
std::unique_ptr<google::protobuf::MessageLite> Make() {
  return std::make_unique<Message>();
}
const SchedulerMethod kSchedulerMethods[] = {
    {"/kvstore.proto.Scheduler/Register", &Make<proto::RegisterRequest>},
    {"/kvstore.proto.Scheduler/Heartbeat", &Make<proto::HeartbeatRequest>},
    {"/kvstore.proto.Scheduler/Barrier", &Make<proto::BarrierRequest>},
    {"/kvstore.proto.Scheduler/Command", &Make<proto::CommandRequest>},
    {"/kvstore.proto.Scheduler/ClusterStatus", &Make<proto::ClusterStatusRequest>},
    {"/kvstore.proto.Scheduler/Finish", &Make<proto::FinishRequest>},
    {"/kvstore.proto.Scheduler/Shutdown", &Make<proto::ShutdownRequest>},
};

}  // namespace

RequestFuzzer::RequestFuzzer(uint64_t node_id, int64_t chunk_bytes, int64_t max_value_bytes,
                             uint64_t seed)
    : node_id_(node_id), chunk_bytes_(chunk_bytes), max_value_bytes_(max_value_bytes), rng_(seed) {
  // Keys 0-7 of every dtype and rank, several of them in more than one chunk; 8-11 the key
  // group's members (one chunk each).
  const std::vector<std::pair<DType, Shape>> specs = {
      {DType::kFloat32, {}},         {DType::kFloat32, {300}},    {DType::kFloat16, {7, 5}},
      {DType::kBFloat16, {3, 4, 2}}, {DType::kFloat64, {40, 3}},  {DType::kInt32, {600}},
      {DType::kInt64, {10, 20}},     {DType::kFloat32, {64, 16}}, {DType::kFloat32, {4}},
      {DType::kInt32, {3}},          {DType::kFloat64, {2}},      {DType::kFloat16, {6}},
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    KeyState k{static_cast<int64_t>(i), specs[i].first, specs[i].second, {}, {}};
    const int64_t n = NumElements(k.shape);
    k.chunks = ChunkSlice(Slice{0, 0, n}, DTypeSize(k.dtype), chunk_bytes_);
    k.values = RandomValues(n);
    keys_.push_back(std::move(k));
  }
  group_ = {8, 9, 10, 11};
}

int64_t RequestFuzzer::Int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
}

int64_t RequestFuzzer::NonZero(int64_t bound) {
  const int64_t magnitude = Int(1, bound);
  return Chance(0.5) ? magnitude : -magnitude;
}

size_t RequestFuzzer::Index(size_t n) {
  return static_cast<size_t>(Int(0, static_cast<int64_t>(n) - 1));
}

bool RequestFuzzer::Chance(double p) { return std::uniform_real_distribution<>(0, 1)(rng_) < p; }

std::string RequestFuzzer::RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(Int(0, 255));
  return bytes;
}

std::vector<double> RequestFuzzer::RandomValues(int64_t n) {
  // Integers of at most 40: every dtype holds them and their sums of a few exactly.
  std::vector<double> values(static_cast<size_t>(n));
  for (double& v : values) v = static_cast<double>(Int(-40, 40));
  return values;
}

uint64_t RequestFuzzer::ForeignNode() {
  for (;;) {
    const uint64_t node = Chance(0.5) ? static_cast<uint64_t>(Int(0, 64))
                                      : static_cast<uint64_t>(Int(0, kMax)) * 2 + Int(0, 1);
    if (node != node_id_ && node != kSchedulerNode) return node;
  }
}

template <typename Request>
RequestFuzzer::Defect RequestFuzzer::AnotherNode(Request* request) {
  request->set_node_id(ForeignNode());
  return {"another node's id", Code::kPermissionDenied};
}

RequestFuzzer::Defect RequestFuzzer::AnotherNode(uint64_t* node) {
  *node = ForeignNode();
  return {"another node's id", Code::kPermissionDenied};
}

int64_t RequestFuzzer::FreshKey() {
  return Int(100000, int64_t{1} << 40);  // Never one of keys_.
}

std::string RequestFuzzer::Encode(DType dtype, const std::vector<double>& values) {
  const Tensor t = Tensor::FromValues(dtype, {static_cast<int64_t>(values.size())}, values).value();
  return std::string(static_cast<const char*>(t.data()), t.byte_size());
}

proto::TensorHeader RequestFuzzer::ChunkHeader(const KeyState& k, const Slice& chunk) {
  proto::TensorHeader h;
  KeyToProto(k.key, h.mutable_key());
  h.set_dtype(DTypeToProto(k.dtype));
  for (int64_t d : k.shape) h.add_shape(d);
  h.set_element_offset(chunk.offset);
  h.set_element_count(chunk.count);
  return h;
}

void RequestFuzzer::Append(Values* values, proto::TensorHeader header, const std::string& bytes) {
  header.set_payload_offset(values->payload.size());
  header.set_payload_bytes(bytes.size());
  values->headers.push_back(std::move(header));
  values->payload += bytes;
}

std::vector<RequestFuzzer::Drawn> RequestFuzzer::DrawChunks(int max_values, bool with_data) {
  std::vector<Drawn> drawn;
  const int n = static_cast<int>(Int(1, max_values));
  for (int tries = 0; static_cast<int>(drawn.size()) < n && tries < 20; ++tries) {
    KeyState& k = keys_[Index(keys_.size())];
    const Slice& chunk = Pick(k.chunks);
    bool repeated = false;
    for (const Drawn& d : drawn) repeated |= d.key == &k && d.chunk.offset == chunk.offset;
    if (repeated) continue;
    drawn.push_back(
        Drawn{&k, chunk, with_data ? RandomValues(chunk.count) : std::vector<double>()});
  }
  return drawn;
}

RequestFuzzer::Values RequestFuzzer::DenseValues(const std::vector<Drawn>& drawn) {
  Values values;
  for (const Drawn& d : drawn) {
    proto::TensorHeader h = ChunkHeader(*d.key, d.chunk);
    if (d.data.empty()) {
      values.headers.push_back(std::move(h));
    } else {
      Append(&values, std::move(h), Encode(d.key->dtype, d.data));
    }
  }
  return values;
}

RequestFuzzer::Values RequestFuzzer::RowSparseValues(KeyState** key, std::vector<int64_t>* ids,
                                                     std::vector<double>* rows) {
  KeyState& k = keys_[static_cast<size_t>(Pick(std::vector<int>{1, 4, 6, 7}))];
  *key = &k;
  const int64_t num_rows = k.shape[0];
  const int64_t row = NumElements(k.shape) / num_rows;
  ids->clear();
  for (int64_t i = Int(1, 4); i > 0; --i) ids->push_back(Int(0, num_rows - 1));
  *rows = RandomValues(static_cast<int64_t>(ids->size()) * row);
  proto::TensorHeader h = ChunkHeader(k, Slice{0, 0, NumElements(k.shape)});
  h.set_row_sparse(true);
  h.set_num_rows(static_cast<int64_t>(ids->size()));
  Values values;
  Append(&values, std::move(h), Int64Bytes(*ids) + Encode(k.dtype, *rows));
  return values;
}

std::string RequestFuzzer::GroupPayload(std::vector<std::vector<double>>* drawn) {
  std::string packed;
  drawn->clear();
  for (size_t m : group_) {
    drawn->push_back(RandomValues(NumElements(keys_[m].shape)));
    packed += Encode(keys_[m].dtype, drawn->back());
  }
  return packed;
}

RequestFuzzer::Values RequestFuzzer::FreshValues() {
  Values values;
  const int64_t first = FreshKey();
  for (int64_t i = Int(1, 2); i > 0; --i) {
    KeyState k{first + i, kAllDTypes[Int(0, 5)], {}, {}, {}};
    for (int64_t r = Int(0, 2); r > 0; --r) k.shape.push_back(Int(1, 6));
    const std::vector<double> data = RandomValues(NumElements(k.shape));
    Append(&values, ChunkHeader(k, Slice{0, 0, NumElements(k.shape)}), Encode(k.dtype, data));
  }
  return values;
}

std::string RequestFuzzer::CheckPulled(const grpc::ByteBuffer& reply,
                                       const std::vector<Drawn>& drawn) {
  proto::PullResponse header;
  const std::optional<std::string> payload = ReplyPayload(reply, &header);
  if (!payload) return "the reply is not a frame";
  if (header.tensors_size() != static_cast<int>(drawn.size())) {
    return absl::StrCat("the reply holds ", header.tensors_size(), " values, not ", drawn.size());
  }
  for (size_t i = 0; i < drawn.size(); ++i) {
    const Drawn& d = drawn[i];
    const proto::TensorHeader& h = header.tensors(static_cast<int>(i));
    const auto begin = d.key->values.begin() + d.chunk.offset;
    const std::string expected =
        Encode(d.key->dtype, std::vector<double>(begin, begin + d.chunk.count));
    if (h.payload_offset() > payload->size() ||
        payload->compare(h.payload_offset(), h.payload_bytes(), expected) != 0) {
      return absl::StrCat("key ", d.key->key, " elements [", d.chunk.offset, ", ",
                          d.chunk.offset + d.chunk.count, ") differ from the model");
    }
  }
  return "";
}

FuzzRequest RequestFuzzer::Valid(ServerMethod method, grpc::ByteBuffer bytes, std::string kind,
                                 Check check) {
  FuzzRequest r;
  r.valid = true;
  r.method = GrpcMethodPath(method);
  r.bytes = std::move(bytes);
  r.kind = std::move(kind);
  r.check = std::move(check);
  return r;
}

FuzzRequest RequestFuzzer::Invalid(ServerMethod method, grpc::ByteBuffer bytes, std::string kind,
                                   std::optional<absl::StatusCode> code) {
  FuzzRequest r;
  r.method = GrpcMethodPath(method);
  r.bytes = std::move(bytes);
  r.kind = std::move(kind);
  r.code = code;
  return r;
}

std::vector<FuzzRequest> RequestFuzzer::Setup() {
  proto::InitRequest init;
  init.set_node_id(node_id_);
  Values values;
  for (const KeyState& k : keys_) {
    Append(&values, ChunkHeader(k, Slice{0, 0, NumElements(k.shape)}), Encode(k.dtype, k.values));
  }
  SetHeaders(&init, values.headers);
  FuzzRequest init_all =
      Valid(ServerMethod::kInit, RawFrame(init, values.payload), "Init of every key",
            [](const absl::Status& status, const grpc::ByteBuffer&) {
              return status.ok() ? "" : status.ToString();
            });
  return {std::move(init_all), ValidGroupPush(true)};
}

std::vector<FuzzRequest> RequestFuzzer::Final() {
  std::vector<FuzzRequest> pulls;
  for (KeyState& k : keys_) {
    std::vector<Drawn> drawn;
    for (const Slice& chunk : k.chunks) drawn.push_back(Drawn{&k, chunk, {}});
    proto::PullRequest pull;
    pull.set_node_id(node_id_);
    SetHeaders(&pull, DenseValues(drawn).headers);
    pulls.push_back(Valid(ServerMethod::kPull, RawBytes(pull.SerializeAsString()),
                          absl::StrCat("final Pull of key ", k.key),
                          [drawn](const absl::Status& status, const grpc::ByteBuffer& reply) {
                            return status.ok() ? CheckPulled(reply, drawn) : status.ToString();
                          }));
  }
  return pulls;
}

FuzzRequest RequestFuzzer::Next() {
  const int64_t roll = Int(0, 999);
  if (roll < 80) {
    switch (Int(0, 7)) {
      case 0:
        return ValidPush(false);
      case 1:
        return ValidPush(true);
      case 2:
        return ValidPull();
      case 3:
        return ValidRowSparsePush();
      case 4:
        return ValidRowSparsePull();
      case 5:
        return ValidGroupPush(Chance(0.2));
      case 6:
        return ValidGroupPull();
      default:
        return ValidSchedulerCall();
    }
  }
  if (roll < 160) return RandomRequest();
  if (roll < 240) return BadSchedulerCall();
  if (roll < 280) return BadFrame();
  if (roll < 420) return BadInit();
  if (roll < 600) return BadPush(false);
  if (roll < 680) return BadPush(true);
  if (roll < 760) return BadGroupPush(Chance(0.3));
  if (roll < 870) return BadPull();
  if (roll < 970) return BadRowSparsePull();
  return BadCommand();
}

// ---------------------------------------------------------------------------------------------
// Valid requests

FuzzRequest RequestFuzzer::ValidPush(bool push_pull) {
  const std::vector<Drawn> drawn = DrawChunks(3, true);
  const Values values = DenseValues(drawn);
  return Valid(
      push_pull ? ServerMethod::kPushPull : ServerMethod::kPush,
      PushFrame(push_pull, node_id_, next_request_id_++, 0, values.headers, values.payload),
      push_pull ? "valid PushPull" : "valid Push",
      [drawn, push_pull](const absl::Status& status, const grpc::ByteBuffer& reply) {
        if (!status.ok()) return status.ToString();
        for (const Drawn& d : drawn) {
          std::copy(d.data.begin(), d.data.end(), d.key->values.begin() + d.chunk.offset);
        }
        return push_pull ? CheckPulled(reply, drawn) : std::string();
      });
}

FuzzRequest RequestFuzzer::ValidPull() {
  const std::vector<Drawn> drawn = DrawChunks(3, false);
  proto::PullRequest pull;
  pull.set_node_id(node_id_);
  SetHeaders(&pull, DenseValues(drawn).headers);
  return Valid(ServerMethod::kPull, RawBytes(pull.SerializeAsString()), "valid Pull",
               [drawn](const absl::Status& status, const grpc::ByteBuffer& reply) {
                 return status.ok() ? CheckPulled(reply, drawn) : status.ToString();
               });
}

FuzzRequest RequestFuzzer::ValidRowSparsePush() {
  KeyState* key;
  std::vector<int64_t> ids;
  std::vector<double> rows;
  const Values values = RowSparseValues(&key, &ids, &rows);
  return Valid(ServerMethod::kPush,
               PushFrame(false, node_id_, next_request_id_++, 0, values.headers, values.payload),
               "valid row-sparse Push",
               [key, ids, rows](const absl::Status& status, const grpc::ByteBuffer&) {
                 if (!status.ok()) return status.ToString();
                 // Assigned: the pushed rows (repeated ones summed), zeros elsewhere.
                 const size_t row = key->values.size() / static_cast<size_t>(key->shape[0]);
                 std::fill(key->values.begin(), key->values.end(), 0.0);
                 for (size_t i = 0; i < ids.size(); ++i) {
                   for (size_t e = 0; e < row; ++e) {
                     key->values[static_cast<size_t>(ids[i]) * row + e] += rows[i * row + e];
                   }
                 }
                 return std::string();
               });
}

FuzzRequest RequestFuzzer::ValidRowSparsePull() {
  KeyState& k = keys_[static_cast<size_t>(Int(1, 7))];
  const int64_t num_rows = k.shape[0];
  std::vector<int64_t> ids;
  for (int64_t i = Int(1, 6); i > 0; --i) ids.push_back(Int(0, num_rows - 1));
  proto::PullRequest pull;
  pull.set_node_id(node_id_);
  *pull.add_tensors() = ChunkHeader(k, Slice{0, 0, NumElements(k.shape)});
  proto::RowIds* list = pull.add_row_ids();
  for (int64_t id : ids) list->add_ids(id);
  const KeyState* key = &k;
  return Valid(ServerMethod::kRowSparsePull, RawBytes(pull.SerializeAsString()),
               "valid RowSparsePull",
               [key, ids](const absl::Status& status, const grpc::ByteBuffer& reply) {
                 if (!status.ok()) return status.ToString();
                 proto::PullResponse header;
                 const std::optional<std::string> payload = ReplyPayload(reply, &header);
                 const size_t row = key->values.size() / static_cast<size_t>(key->shape[0]);
                 std::vector<double> rows;
                 for (int64_t id : ids) {
                   const auto begin =
                       key->values.begin() + static_cast<int64_t>(static_cast<size_t>(id) * row);
                   rows.insert(rows.end(), begin, begin + static_cast<int64_t>(row));
                 }
                 if (!payload || *payload != Encode(key->dtype, rows)) {
                   return absl::StrCat("rows of key ", key->key, " differ from the model");
                 }
                 return std::string();
               });
}

FuzzRequest RequestFuzzer::ValidGroupPush(bool list_members) {
  std::vector<std::vector<double>> drawn;
  const std::string packed = GroupPayload(&drawn);
  std::vector<proto::TensorHeader> members;
  for (size_t m : list_members ? group_ : std::vector<size_t>()) {
    members.push_back(ChunkHeader(keys_[m], Slice{0, 0, NumElements(keys_[m].shape)}));
  }
  return Valid(ServerMethod::kPush,
               PushFrame(false, node_id_, next_request_id_++, kGroupId, members, packed),
               list_members ? "valid key group registration and Push" : "valid key group Push",
               [this, drawn](const absl::Status& status, const grpc::ByteBuffer&) {
                 if (!status.ok()) return status.ToString();
                 for (size_t i = 0; i < group_.size(); ++i) keys_[group_[i]].values = drawn[i];
                 return std::string();
               });
}

FuzzRequest RequestFuzzer::ValidGroupPull() {
  proto::PullRequest pull;
  pull.set_node_id(node_id_);
  pull.set_group_id(kGroupId);
  return Valid(ServerMethod::kPull, RawBytes(pull.SerializeAsString()), "valid key group Pull",
               [this](const absl::Status& status, const grpc::ByteBuffer& reply) {
                 if (!status.ok()) return status.ToString();
                 std::string expected;
                 for (size_t m : group_) expected += Encode(keys_[m].dtype, keys_[m].values);
                 proto::PullResponse header;
                 const std::optional<std::string> payload = ReplyPayload(reply, &header);
                 return payload && *payload == expected ? std::string()
                                                        : "the key group differs from the model";
               });
}

FuzzRequest RequestFuzzer::ValidSchedulerCall() {
  FuzzRequest r;
  r.valid = true;
  r.daemon = Daemon::kScheduler;
  if (Chance(0.5)) {
    proto::HeartbeatRequest beat;
    beat.set_node_id(node_id_);
    r.method = kSchedulerMethods[1].path;
    r.bytes = RawBytes(beat.SerializeAsString());
    r.kind = "valid Heartbeat";
  } else {
    proto::ClusterStatusRequest status;
    status.set_node_id(node_id_);
    r.method = kSchedulerMethods[4].path;
    r.bytes = RawBytes(status.SerializeAsString());
    r.kind = "valid ClusterStatus";
  }
  r.check = [](const absl::Status& status, const grpc::ByteBuffer&) {
    return status.ok() ? "" : status.ToString();
  };
  return r;
}

// ---------------------------------------------------------------------------------------------
// Malformed requests

RequestFuzzer::Defect RequestFuzzer::MutateValue(Values* values, size_t t, bool for_init,
                                                 bool pull) {
  proto::TensorHeader& h = values->headers[t];
  const int64_t total = [&] {
    int64_t n = 1;
    for (int64_t d : h.shape()) n *= d;
    return n;
  }();
  for (;;) {
    switch (Int(0, 15)) {
      case 0:
        if (for_init) continue;  // A new key is what an Init makes.
        KeyToProto(Int(1000000, int64_t{1} << 62), h.mutable_key());
        return {"an unknown key", Code::kNotFound};
      case 1: {
        std::string name;
        for (int64_t i = Int(1, 100); i > 0; --i) name += static_cast<char>('a' + Int(0, 25));
        KeyToProto(Key(name), h.mutable_key());
        // The kvserver holds int keys: an Init may not mix in a string key.
        return {"a string key", for_init ? Code::kInvalidArgument : Code::kNotFound};
      }
      case 2: {
        if (for_init) continue;  // A new key may have any dtype.
        int other;
        do {
          other = static_cast<int>(Int(1, 6));
        } while (other == h.dtype());
        h.set_dtype(static_cast<proto::DType>(other));
        return {"another dtype", Code::kInvalidArgument};
      }
      case 3:
        h.set_dtype(
            static_cast<proto::DType>(Pick(std::vector<int64_t>{0, 7, 8, 100, -1, 1 << 30})));
        return {"a dtype out of range", Code::kInvalidArgument};
      case 4: {
        if (for_init) continue;  // A new key may have any shape.
        if (h.shape_size() > 0 && Chance(0.5)) {
          const int d = static_cast<int>(Int(0, h.shape_size() - 1));
          h.set_shape(d, h.shape(d) + (h.shape(d) > 1 && Chance(0.5) ? -1 : 1));
        } else if (h.shape_size() > 0 && Chance(0.5)) {
          h.mutable_shape()->RemoveLast();
        } else {
          h.add_shape(1);
        }
        return {"another shape", Code::kInvalidArgument};
      }
      case 5:
        if (h.shape_size() > 0 && Chance(0.5)) {
          h.set_shape(static_cast<int>(Int(0, h.shape_size() - 1)),
                      Pick(std::vector<int64_t>{-1, -Int(2, 1000), kMin}));
        } else {
          h.add_shape(-Int(1, 1 << 20));
        }
        return {"a negative dimension", Code::kInvalidArgument};
      case 6: {
        // 2^31 to 2^40 elements, in one dimension or two.
        const int bits = static_cast<int>(Int(31, 40));
        h.clear_shape();
        if (Chance(0.5)) {
          h.add_shape(int64_t{1} << bits);
        } else {
          h.add_shape(int64_t{1} << (bits / 2));
          h.add_shape(int64_t{1} << (bits - bits / 2));
        }
        return {"2^31 to 2^40 elements", pull ? Code::kInvalidArgument : Code::kResourceExhausted};
      }
      case 7: {
        h.clear_shape();
        switch (Int(0, 3)) {
          case 0:
            h.add_shape(int64_t{1} << 62);
            h.add_shape(4);
            break;
          case 1:
            h.add_shape(3);
            h.add_shape(6148914691236517206);
            break;
          case 2:
            h.add_shape(kMax);
            h.add_shape(Int(2, 1000));
            break;
          default:
            h.add_shape(0);
            h.add_shape(Int(int64_t{1} << 32, kMax));
            h.add_shape(Int(int64_t{1} << 32, kMax));
        }
        return {"an element count past int64", Code::kInvalidArgument};
      }
      case 8: {
        if (for_init) continue;  // An Init may name any part of its value.
        const int64_t offset = h.element_offset() + (Chance(0.5) ? Int(-3, 3) : 0);
        const int64_t count = h.element_count() + (Chance(0.5) ? Int(-3, 3) : 0);
        const int64_t key = h.key().int_key();
        bool chunk = offset == h.element_offset() && count == h.element_count();
        for (const KeyState& k : keys_) {
          if (!h.key().has_int_key() || k.key != key) continue;
          for (const Slice& c : k.chunks) chunk |= c.offset == offset && c.count == count;
        }
        if (chunk) continue;
        h.set_element_offset(offset);
        h.set_element_count(count);
        return {"a slice that is not a chunk", Code::kInvalidArgument};
      }
      case 9:
        if (Chance(0.5)) {
          h.set_element_offset(Pick(std::vector<int64_t>{-1, kMin, kMax, total + 1, kMax - 1}));
        } else {
          h.set_element_count(Pick(std::vector<int64_t>{-1, kMin, kMax, total + 1}));
        }
        return {"a slice outside the value", Code::kInvalidArgument};
      case 10: {
        const int type = static_cast<int>(Int(1, 2));
        const size_t coded = CompressedBytes(static_cast<CompressionType>(type), h.element_count());
        // A float32 value whose bytes happen to be its codes' size would be a valid push.
        if (!for_init && !pull && h.dtype() == proto::FLOAT32 && coded == h.payload_bytes())
          continue;
        h.set_compression(static_cast<proto::Compression>(type));
        h.set_compression_threshold(0.5);
        return {"a compressed value that cannot be", Code::kInvalidArgument};
      }
      case 11:
        if (Chance(0.5)) {
          h.set_compression(
              static_cast<proto::Compression>(Pick(std::vector<int64_t>{3, 4, 100, -1})));
        } else {
          h.set_compression(proto::COMPRESSION_2BIT);
          h.set_compression_threshold(
              Pick(std::vector<float>{0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                                      std::numeric_limits<float>::infinity()}));
        }
        return {"a bad compression", Code::kInvalidArgument};
      case 12:
        h.set_num_rows(Pick(std::vector<int64_t>{1, -1, kMax, Int(2, 1000)}));
        return {"row count on a dense value", Code::kInvalidArgument};
      case 13:
        if (!for_init && !pull) continue;  // Push takes row-sparse values (BadPush tries them).
        h.set_row_sparse(true);
        return {"a row-sparse value where none is taken", Code::kInvalidArgument};
      case 14:
        if (!pull) continue;
        h.set_payload_offset(static_cast<uint64_t>(Int(0, 1 << 20)));
        h.set_payload_bytes(static_cast<uint64_t>(Int(1, kMax)));
        return {"payload fields on a pulled value", Code::kInvalidArgument};
      default:
        if (!for_init) continue;
        KeyToProto(static_cast<int64_t>(Index(keys_.size())), h.mutable_key());
        return {"a key already initialised", Code::kAlreadyExists};
    }
  }
}

std::string RequestFuzzer::MutatePayload(Values* values) {
  std::string& payload = values->payload;
  proto::TensorHeader& h = values->headers[Index(values->headers.size())];
  switch (Int(0, 4)) {
    case 0:
      payload += RandomBytes(static_cast<size_t>(Int(1, Chance(0.1) ? 1 << 16 : 64)));
      return "bytes after the last value";
    case 1:
      payload.resize(payload.size() -
                     static_cast<size_t>(Int(1, static_cast<int64_t>(payload.size()))));
      return "a payload cut short";
    case 2: {
      const int64_t shift = NonZero(8);
      h.set_payload_offset(h.payload_offset() + static_cast<uint64_t>(shift));
      return "a value's bytes moved";
    }
    case 3: {
      const int64_t change = NonZero(8);
      h.set_payload_bytes(h.payload_bytes() + static_cast<uint64_t>(change));
      return "a value's byte count changed";
    }
    default:
      h.set_payload_bytes(std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(Int(0, 64)));
      return "a byte count past the payload";
  }
}

FuzzRequest RequestFuzzer::BadInit() {
  proto::InitRequest init;
  init.set_node_id(node_id_);
  Values values = FreshValues();
  Defect defect;
  const int64_t roll = Int(0, 99);
  if (roll < 10) {
    defect = AnotherNode(&init);
  } else if (roll < 18) {
    init.set_deferred(true);
    init.set_fill(true);
    defect.kind = "deferred and a fill";
  } else if (roll < 26) {
    // A stretch of a key initialised whole: no fill is awaited.
    const KeyState& k = Pick(keys_);
    values = Values();
    Append(&values, ChunkHeader(k, k.chunks[0]),
           Encode(k.dtype,
                  std::vector<double>(k.values.begin(), k.values.begin() + k.chunks[0].count)));
    init.set_fill(true);
    defect.kind = "a fill of a key initialised whole";
    defect.code = Code::kFailedPrecondition;
  } else if (roll < 34) {
    init.set_deferred(true);
    defect.kind = "a deferred Init with bytes";
  } else if (roll < 40) {
    const proto::TensorHeader first = values.headers[0];
    Append(&values, first, values.payload.substr(0, first.payload_bytes()));
    defect.kind = "a key twice";
    defect.code = Code::kAlreadyExists;
  } else if (roll < 46) {
    // Just over the largest value, declared deferred: nothing to send, everything to allocate.
    values = Values();
    const int64_t elements = max_value_bytes_ / 4 + Int(1, 1000);
    proto::TensorHeader h = ChunkHeader(KeyState{FreshKey(), DType::kFloat32, {elements}, {}, {}},
                                        Slice{0, 0, elements});
    values.headers.push_back(std::move(h));
    init.set_deferred(true);
    defect.kind = "a value just over max_value_bytes";
    defect.code = Code::kResourceExhausted;
  } else if (roll < 70) {
    defect.kind = MutatePayload(&values);
  } else {
    defect = MutateValue(&values, Index(values.headers.size()),
                         /*for_init=*/true, /*pull=*/false);
    if (Chance(0.5)) {
      // The same values deferred: headers alone, their zeros to be allocated by the server.
      init.set_deferred(true);
      values.payload.clear();
      for (proto::TensorHeader& h : values.headers) {
        h.clear_payload_offset();
        h.clear_payload_bytes();
      }
    }
  }
  SetHeaders(&init, values.headers);
  return Invalid(ServerMethod::kInit, RawFrame(init, values.payload), "Init: " + defect.kind,
                 defect.code);
}

FuzzRequest RequestFuzzer::BadPush(bool push_pull) {
  Values values = DenseValues(DrawChunks(3, true));
  uint64_t node = node_id_;
  Defect defect;
  const int64_t roll = Int(0, 99);
  if (roll < 8) {
    defect = AnotherNode(&node);
  } else if (roll < 16) {
    const size_t t = Index(values.headers.size());
    const proto::TensorHeader h = values.headers[t];
    Append(&values, h, values.payload.substr(h.payload_offset(), h.payload_bytes()));
    defect.kind = "a chunk twice";
  } else if (roll < 40) {
    KeyState* key;
    std::vector<int64_t> ids;
    std::vector<double> rows;
    Values sparse = RowSparseValues(&key, &ids, &rows);
    proto::TensorHeader& h = sparse.headers[0];
    std::string& payload = sparse.payload;
    const int64_t num_rows = key->shape[0];
    if (push_pull) {
      defect.kind = "a row-sparse value";
    } else {
      switch (Int(0, 5)) {
        case 0: {
          const int64_t change = NonZero(3);
          h.set_num_rows(h.num_rows() + change);
          defect.kind = "a row count that does not match the bytes";
          break;
        }
        case 1:
          // Counts whose product with the bytes per row wraps in 64 bits.
          h.set_num_rows(Pick(std::vector<int64_t>{(int64_t{1} << 60) + h.num_rows(),
                                                   int64_t{1} << 61, kMax, kMin}));
          defect.kind = "a row count past int64";
          break;
        case 2: {
          const int64_t bad =
              Pick(std::vector<int64_t>{-1, num_rows, num_rows + Int(1, 1000), kMax, kMin});
          std::memcpy(payload.data() + 8 * Index(ids.size()), &bad, 8);
          defect.kind = "a row id outside the value";
          break;
        }
        case 3:
          h.set_element_count(h.element_count() - Int(1, num_rows));
          defect.kind = "a row-sparse value that is not the whole part";
          break;
        case 4:
          h = ChunkHeader(keys_[0], keys_[0].chunks[0]);
          h.set_row_sparse(true);
          h.set_num_rows(1);
          h.set_payload_bytes(payload.size());
          defect.kind = "a row-sparse scalar";
          break;
        default:
          h.set_compression(proto::COMPRESSION_2BIT);
          h.set_compression_threshold(0.5);
          defect.kind = "a compressed row-sparse value";
      }
    }
    // Behind the dense values, with its bytes after theirs.
    h.set_payload_offset(h.payload_offset() + values.payload.size());
    values.headers.push_back(h);
    values.payload += payload;
  } else if (roll < 65) {
    defect.kind = MutatePayload(&values);
  } else {
    defect = MutateValue(&values, Index(values.headers.size()),
                         /*for_init=*/false, /*pull=*/false);
  }
  return Invalid(push_pull ? ServerMethod::kPushPull : ServerMethod::kPush,
                 PushFrame(push_pull, node, next_request_id_++, 0, values.headers, values.payload),
                 (push_pull ? "PushPull: " : "Push: ") + defect.kind, defect.code);
}

FuzzRequest RequestFuzzer::BadGroupPush(bool push_pull) {
  std::vector<std::vector<double>> drawn;
  std::string packed = GroupPayload(&drawn);
  uint64_t group = kGroupId;
  std::vector<proto::TensorHeader> members;
  Defect defect;
  switch (Int(0, 3)) {
    case 0:
      group = static_cast<uint64_t>(Int(1000, kMax));
      defect.kind = "an unknown key group";
      defect.code = Code::kFailedPrecondition;
      break;
    case 1: {
      const int64_t change = NonZero(16);
      packed.resize(
          static_cast<size_t>(std::max<int64_t>(0, static_cast<int64_t>(packed.size()) + change)),
          'g');
      defect.kind = "a key group payload of another size";
      break;
    }
    default: {
      Values listed;
      for (size_t m : group_) {
        listed.headers.push_back(ChunkHeader(keys_[m], Slice{0, 0, NumElements(keys_[m].shape)}));
      }
      group = static_cast<uint64_t>(Int(1000, kMax));
      if (Chance(0.4)) {
        const size_t m = Index(group_.size());
        listed.headers.push_back(listed.headers[m]);
        packed += Encode(keys_[group_[m]].dtype, drawn[m]);
        defect.kind = "a key group listing a member twice";
      } else {
        defect = MutateValue(&listed, Index(group_.size()),
                             /*for_init=*/false, /*pull=*/true);
        defect.kind = "a key group member with " + defect.kind;
      }
      members = std::move(listed.headers);
    }
  }
  return Invalid(push_pull ? ServerMethod::kPushPull : ServerMethod::kPush,
                 PushFrame(push_pull, node_id_, next_request_id_++, group, members, packed),
                 (push_pull ? "PushPull: " : "Push: ") + defect.kind, defect.code);
}

FuzzRequest RequestFuzzer::BadPull() {
  Values values = DenseValues(DrawChunks(3, false));
  proto::PullRequest pull;
  pull.set_node_id(node_id_);
  Defect defect;
  const int64_t roll = Int(0, 99);
  if (roll < 10) {
    defect = AnotherNode(&pull);
  } else if (roll < 20) {
    pull.set_group_id(static_cast<uint64_t>(Int(1000, kMax)));
    values.headers.clear();
    defect.kind = "an unknown key group";
    defect.code = Code::kFailedPrecondition;
  } else {
    defect = MutateValue(&values, Index(values.headers.size()),
                         /*for_init=*/false, /*pull=*/true);
  }
  SetHeaders(&pull, values.headers);
  return Invalid(ServerMethod::kPull, RawBytes(pull.SerializeAsString()), "Pull: " + defect.kind,
                 defect.code);
}

FuzzRequest RequestFuzzer::BadRowSparsePull() {
  KeyState& k = keys_[static_cast<size_t>(Int(1, 7))];
  const int64_t num_rows = k.shape[0];
  proto::PullRequest pull;
  pull.set_node_id(node_id_);
  Values values;
  values.headers.push_back(ChunkHeader(k, Slice{0, 0, NumElements(k.shape)}));
  std::vector<int64_t> ids;
  for (int64_t i = Int(1, 6); i > 0; --i) ids.push_back(Int(0, num_rows - 1));
  Defect defect;
  int lists = 1;  // Lists of ids: one per value.
  switch (Int(0, 6)) {
    case 0:
      defect = AnotherNode(&pull);
      break;
    case 1:
      ids[Index(ids.size())] =
          Pick(std::vector<int64_t>{-1, num_rows, num_rows + Int(1, 1 << 20), kMax, kMin});
      defect.kind = "a row id outside the value";
      break;
    case 2:
      values.headers[0].set_element_count(values.headers[0].element_count() - 1);
      defect.kind = "rows of a value that is not the whole part";
      break;
    case 3:
      values.headers[0] = ChunkHeader(keys_[0], keys_[0].chunks[0]);
      ids = {0};
      defect.kind = "rows of a scalar";
      break;
    case 4:
      lists = Chance(0.5) ? 0 : 2;
      defect.kind = "a list of row ids per value, not";
      break;
    case 5:
      if (Chance(0.2)) {
        // More rows than the largest value holds: ids may repeat, so a short request can ask
        // for a huge reply. Keys 6 and 7 have the longest rows.
        const KeyState& wide = keys_[static_cast<size_t>(Int(6, 7))];
        values.headers[0] = ChunkHeader(wide, Slice{0, 0, NumElements(wide.shape)});
        const int64_t row_bytes =
            NumElements(wide.shape) / wide.shape[0] * static_cast<int64_t>(DTypeSize(wide.dtype));
        ids.assign(static_cast<size_t>(max_value_bytes_ / row_bytes + Int(1, 100)), 0);
        defect.kind = "a reply bigger than max_value_bytes";
        defect.code = Code::kResourceExhausted;
        break;
      }
      [[fallthrough]];
    default:
      defect = MutateValue(&values, 0, /*for_init=*/false, /*pull=*/true);
  }
  SetHeaders(&pull, values.headers);
  for (int i = 0; i < lists; ++i) {
    proto::RowIds* list = pull.add_row_ids();
    for (int64_t id : ids) list->add_ids(id);
  }
  return Invalid(ServerMethod::kRowSparsePull, RawBytes(pull.SerializeAsString()),
                 "RowSparsePull: " + defect.kind, defect.code);
}

FuzzRequest RequestFuzzer::BadCommand() {
  proto::ServerCommandRequest command;
  command.set_node_id(node_id_);
  Defect defect{"", std::nullopt};
  switch (Int(0, 2)) {
    case 0:
      // Whatever the head: checkpoint (4) included, which would write files.
      defect = AnotherNode(&command);
      command.set_head(static_cast<int>(Int(0, 20)));
      command.set_body(RandomBytes(static_cast<size_t>(Int(0, 64))));
      break;
    case 1:
      command.set_head(static_cast<int>(
          Pick(std::vector<int64_t>{Int(7, 15), Int(16, 1 << 30), -Int(1, 1 << 30)})));
      defect.kind = "a command head without a controller";
      break;
    default:
      command.set_head(0);
      command.set_body("no_such_updater lr=1");
      defect.kind = "an unknown updater";
  }
  return Invalid(ServerMethod::kCommand, RawBytes(command.SerializeAsString()),
                 "Command: " + defect.kind, defect.code);
}

FuzzRequest RequestFuzzer::BadFrame() {
  const ServerMethod method = Pick(
      std::vector<ServerMethod>{ServerMethod::kInit, ServerMethod::kPush, ServerMethod::kPushPull});
  const Values values = DenseValues(DrawChunks(2, true));
  proto::PushRequest push;  // Init, Push and PushPull headers share their first fields.
  push.set_node_id(node_id_);
  push.set_request_id(next_request_id_++);
  SetHeaders(&push, values.headers);
  const std::string head = push.SerializeAsString();
  Defect defect;
  grpc::ByteBuffer bytes;
  switch (Int(0, 2)) {
    case 0:
      bytes = RawFrame(push, values.payload,
                       static_cast<uint32_t>(head.size() + values.payload.size() +
                                             static_cast<size_t>(Int(1, 1 << 30))));
      defect.kind = "a length prefix past the frame";
      break;
    case 1:
      bytes = RawBytes(RandomBytes(static_cast<size_t>(Int(0, 3))));
      defect.kind = "a frame shorter than its prefix";
      break;
    default: {
      // The header cut anywhere and followed by a tag of field 0, drawn again in the rare case
      // that the tag ends up as a field's value and the result parses.
      std::string corrupt;
      do {
        corrupt =
            head.substr(0, static_cast<size_t>(Int(0, static_cast<int64_t>(head.size())))) + "\x07";
      } while (RequestMessage(method)->ParseFromString(corrupt));
      const auto n = static_cast<uint32_t>(corrupt.size());
      const std::string prefix = {static_cast<char>(n), static_cast<char>(n >> 8),
                                  static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
      bytes = RawBytes(prefix + corrupt + values.payload);
      defect.kind = "a header that does not parse";
    }
  }
  return Invalid(method, std::move(bytes), "frame: " + defect.kind, defect.code);
}

FuzzRequest RequestFuzzer::RandomRequest() {
  const auto method = static_cast<ServerMethod>(Int(0, kNumServerMethods - 1));
  const bool framed = Framed(method);
  // Random bytes, unless they would parse as a request of this worker (or of the scheduler,
  // whose requests the kvserver also runs): those are drawn again.
  for (;;) {
    const std::string bytes = RandomBytes(static_cast<size_t>(Int(0, Chance(0.1) ? 4096 : 256)));
    const std::unique_ptr<google::protobuf::MessageLite> request = RequestMessage(method);
    const bool parsed =
        framed ? DecodeFrame(RawBytes(bytes), request.get()).ok() : request->ParseFromString(bytes);
    const uint64_t node = parsed ? NodeOf(*request) : 0;
    if (parsed && (node == node_id_ || node == kSchedulerNode)) continue;
    return Invalid(method, RawBytes(bytes), "random bytes", std::nullopt);
  }
}

FuzzRequest RequestFuzzer::BadSchedulerCall() {
  const SchedulerMethod& method = kSchedulerMethods[Index(std::size(kSchedulerMethods))];
  FuzzRequest r;
  r.daemon = Daemon::kScheduler;
  r.method = method.path;
  if (Chance(0.0005)) {
    r.bytes = RawBytes(RandomBytes((4 << 20) + static_cast<size_t>(Int(1, 1 << 16))));
    r.kind = "scheduler: a request over 4 MiB";
    r.code = Code::kResourceExhausted;
    return r;
  }
  // Random bytes, or a valid message cut short or with a field-0 tag, as long as they do not
  // parse as the method's request.
  std::string bytes;
  for (;;) {
    if (Chance(0.5)) {
      bytes = RandomBytes(static_cast<size_t>(Int(1, 256)));
      r.kind = "scheduler: random bytes";
    } else {
      proto::RegisterRequest message;  // Fields 1-5: ints and strings, as the others have.
      message.set_role(static_cast<proto::Role>(Int(0, 3)));
      message.set_address(RandomBytes(static_cast<size_t>(Int(0, 40))));
      message.set_requested_rank(static_cast<int32_t>(Int(-5, 5)));
      message.set_hostname(std::string(static_cast<size_t>(Int(0, 300)), 'h'));
      bytes = message.SerializePartialAsString();
      bytes.resize(static_cast<size_t>(Int(0, static_cast<int64_t>(bytes.size()))));
      if (Chance(0.5)) bytes += "\x07";
      r.kind = "scheduler: a corrupted message";
    }
    if (!method.make()->ParseFromString(bytes)) break;
  }
  r.bytes = RawBytes(bytes);
  return r;
}

}  // namespace kvstore::testing
