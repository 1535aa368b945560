// test_worker: the worker program of the multi-process tests. It joins the job described by the
// launch environment and runs one scenario (argv[1]), checking every value it pulls against an
// exact expectation; it exits 0 on success and 1 with a one-line reason otherwise.
//
// Scenarios:
//   rounds MODE R   MODE is dist_sync or dist_async. Over R rounds every worker pushes
//                   (rank+1) * base to 102 small int keys and a big key split over all
//                   servers, as one list (a key group) or key by key, alternating by round and
//                   rank. dist_sync (ASSIGN): after round r each worker pulls sum_w (w+1) *
//                   base. dist_async (servers started with --updater=sum): after the last round
//                   and a barrier, the value is init + R * sum_w (w+1) * base.
//   dead_server     Initialises keys, prints READY, and waits (at most 20 s) until the scheduler
//                   counts one dead server; then a pull from the dead server must fail with
//                   UNAVAILABLE naming the server's address.
//   string_keys     String keys, one of them split over the servers, summed over one round.
//   compressed TYPE SEED
//                   SetGradientCompression(TYPE, threshold 0.5 for 2bit, 0 for 1bit). Over 3
//                   dist_sync rounds every worker pushes random float32 gradients (drawn from
//                   SEED, the round and the rank, so every worker knows every gradient) to a
//                   small key and to a key split over the servers, and pulls the sum of every
//                   worker's decoded push, checked exactly against each worker's quantisation
//                   with its own residual. Each round's push must put exactly 1/16 (2bit) or
//                   1/32 (1bit) of the float32 bytes on the wire.
//   row_sparse SEED Over 3 dist_sync rounds every worker pushes random rows (ids unsorted and
//                   repeated, small-integer values, drawn from SEED, the round and the rank) of
//                   a (1000, 4) float32 key split by rows over the servers; each then pulls the
//                   sum of every worker's rows, dense and through RowSparsePull of random ids,
//                   checked exactly against a dense reference.
//   train SEED FIRST LAST CKPT_ROUND DIR OUT [restored] [pause=MS]
//                   Adam (with a factor schedule) on the servers, set by rank 0 unless
//                   `restored`; rounds FIRST..LAST of dist_sync pushes of gradients drawn from
//                   SEED, the round and the rank, to a key split over the servers and a small
//                   one. After round CKPT_ROUND (0: never) every worker waits for the others,
//                   rank 0 makes the servers checkpoint into DIR (relative to their
//                   --checkpoint_root), and "CHECKPOINTED" is printed. Rank 0 writes the final
//                   values to OUT. A `restored` job (servers started with --restore DIR)
//                   initialises the keys (kept from the
//                   checkpoint) and goes on from FIRST. With OUT "-" the worker holds on
//                   after its last round (up to 60 s) so that the test can kill the job.
//                   pause=MS: "ROUND r" after each round, then MS of sleep.
//   tables MODE SEED FIRST LAST SERVERS [CKPT_ROUND DIR]
//                   A table trained over rounds FIRST..LAST of Zipf ids in a job of SERVERS
//                   servers, every pull checked against a float64 reference; a checkpoint into
//                   DIR after CKPT_ROUND; FIRST > 1 after a restore (table_scenario.h). A
//                   last argument "hold=FILE": then READY, and it stays until FILE exists (at
//                   most 60 s); "pause=MS" (before it): MS of sleep between rounds.
//   clipped_sum     For examples/custom_kvserver: selects its "clipped_sum" updater with limit
//                   0.5, pushes [2, -2, 0.25, -0.1] twice and checks the clipped sums, then
//                   prints READY and waits (up to 60 s) for the job to be shut down.
//   big_value SEED MB
//                   One float32 key of MB MiB (servers started with --updater=sum): init and
//                   pull, three rounds of a pull and a push issued together, then a pushpull;
//                   values of random integers in [-1000, 1000] drawn from SEED (exact in
//                   float32), every pulled element checked against the running sum. The test
//                   bounds every process's peak memory.
//   elastic SEED R PAUSE_MS [BIG]
//                   Servers started with --updater=sum, while servers join and drain. Over R
//                   dist_sync rounds every worker pushes random integers in [-8, 8] (drawn
//                   from SEED, the round, the rank and the key) to 60 small int keys - as one
//                   list (a key group) or key by key, by round and rank - and to a key split
//                   over the servers (BIG float32, 200,000 unless given), then pulls them all
//                   and checks every
//                   element exactly against a float64 reference (init plus every worker's
//                   pushes so far). It prints "ROUND r" after each round and sleeps PAUSE_MS.
//   bad_input       Sends malformed, oversized and mismatched raw requests to server 0 and
//                   checks each is refused with the right code and that the stored value is
//                   unchanged and the server still answers.
#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/dist_store.h"
#include "client/kvstore.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/job_auth.h"
#include "common/proto_convert.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "proto/kvstore.grpc.pb.h"
#include "tests/integration/table_scenario.h"
#include "tests/signed_request.h"

namespace kvstore::testing {
namespace {

absl::Status Expect(bool condition, absl::string_view what) {
  return condition ? absl::OkStatus() : absl::InternalError(std::string(what));
}

// Base pattern of a key: small integers (exact in float32), never all equal.
Tensor Base(int64_t n, int salt) {
  Tensor t = Tensor::Zeros(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) t.SetFromDouble(i, static_cast<double>((i * 7 + salt) % 11) - 5);
  return t;
}

Tensor Scaled(const Tensor& base, double factor) {
  Tensor t = base.Clone();
  for (int64_t i = 0; i < t.num_elements(); ++i) t.SetFromDouble(i, base.GetAsDouble(i) * factor);
  return t;
}

absl::Status ExpectEqual(const Tensor& got, const Tensor& want, absl::string_view what) {
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (got.GetAsDouble(i) != want.GetAsDouble(i)) {
      return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", got.GetAsDouble(i),
                                              ", expected ", want.GetAsDouble(i)));
    }
  }
  return absl::OkStatus();
}

// FillRandomIntegers fills a float32 tensor with integers in [-1000, 1000] from a xorshift
// stream.
void FillRandomIntegers(Tensor* t, uint64_t* state) {
  float* data = t->data_as<float>();
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    data[i] = static_cast<float>(static_cast<int64_t>(x % 2001) - 1000);
  }
}

// ExpectSum checks out == a + b element by element (integers: exact).
absl::Status ExpectSum(const Tensor& out, const Tensor& a, const Tensor* b,
                       absl::string_view what) {
  const float* o = out.data_as<const float>();
  const float* x = a.data_as<const float>();
  const float* y = b != nullptr ? b->data_as<const float>() : nullptr;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const float want = y != nullptr ? x[i] + y[i] : x[i];
    if (o[i] != want) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", o[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status BigValue(KVStore& kv, uint64_t seed, int64_t mib) {
  RETURN_IF_ERROR(Expect(seed != 0, "big_value: the seed must not be 0"));
  std::printf("big_value: %lld MiB, seed %llu\n", static_cast<long long>(mib),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  const int64_t n = mib * (int64_t{1} << 20) / 4;
  const Key key = int64_t{7};
  uint64_t state = seed;
  // Three tensors for the whole run: the expected value, the pushed one and the pulled one.
  Tensor stored = Tensor::Zeros(DType::kFloat32, {n});
  Tensor pushed = Tensor::Zeros(DType::kFloat32, {n});
  Tensor out = Tensor::Zeros(DType::kFloat32, {n});
  FillRandomIntegers(&stored, &state);
  absl::Time start = absl::Now();
  RETURN_IF_ERROR(kv.Init(key, stored));
  std::printf("init %s\n", absl::FormatDuration(absl::Now() - start).c_str());
  RETURN_IF_ERROR(kv.Pull(key, &out));
  RETURN_IF_ERROR(kv.WaitAll());
  RETURN_IF_ERROR(ExpectSum(out, stored, nullptr, "pull after init"));
  // Each round pulls and pushes at once: the push's chunks reach the server while the pull's
  // replies may still be leaving it, so the server updates copies of those chunks (copy on
  // write) and must not keep them all.
  for (int round = 0; round < 3; ++round) {
    FillRandomIntegers(&pushed, &state);
    start = absl::Now();
    RETURN_IF_ERROR(kv.Pull(key, &out));
    RETURN_IF_ERROR(kv.Push(key, pushed));
    RETURN_IF_ERROR(kv.WaitAll());
    std::printf("pull and push %s\n", absl::FormatDuration(absl::Now() - start).c_str());
    RETURN_IF_ERROR(ExpectSum(out, stored, nullptr, absl::StrCat("pull of round ", round)));
    float* sum = stored.data_as<float>();
    const float* add = pushed.data_as<const float>();
    for (int64_t i = 0; i < n; ++i) sum[i] += add[i];  // The running sum.
  }
  FillRandomIntegers(&pushed, &state);
  RETURN_IF_ERROR(kv.PushPull(key, pushed, &out));
  RETURN_IF_ERROR(kv.WaitAll());
  return ExpectSum(out, stored, &pushed, "pushpull");
}

absl::Status Rounds(KVStore& kv, const std::string& mode, int rounds) {
  const int rank = kv.rank(), workers = kv.num_workers();
  RETURN_IF_ERROR(Expect(kv.type() == mode, "store type"));
  // Int keys in one store; the string-key store is exercised by its own job (see the test).
  // Key 11 exceeds the job's big-value bound. 100 more small keys make the list long enough
  // to travel as a key group; in each round some workers send it as one list and the others
  // key by key, so rounds mix both kinds of push.
  std::vector<Key> keys = {3, 7, 11};
  std::vector<int64_t> sizes = {6, 1, 1000};
  for (int i = 0; i < 100; ++i) {
    keys.push_back(1000 + i);
    sizes.push_back(1 + i % 3);
  }
  std::vector<Tensor> bases, inits;
  for (size_t k = 0; k < keys.size(); ++k) {
    bases.push_back(Base(sizes[k], static_cast<int>(k)));
    inits.push_back(Scaled(Base(sizes[k], static_cast<int>(k) + 3), 0.5));
  }
  RETURN_IF_ERROR(kv.Init(keys, inits));
  const double total = workers * (workers + 1) / 2.0;  // sum over w of (w + 1)
  std::vector<Tensor> outs;
  for (int64_t n : sizes) outs.push_back(Tensor::Zeros(DType::kFloat32, {n}));
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  for (int r = 0; r < rounds; ++r) {
    std::vector<Tensor> pushed;
    for (const Tensor& base : bases) pushed.push_back(Scaled(base, rank + 1));
    const bool as_list = (r + rank) % 2 == 0;
    if (as_list) {
      RETURN_IF_ERROR(kv.Push(keys, pushed));
    } else {
      for (size_t k = 0; k < keys.size(); ++k) RETURN_IF_ERROR(kv.Push(keys[k], pushed[k]));
    }
    if (mode == "dist_sync") {
      if (as_list) {
        RETURN_IF_ERROR(kv.Pull(keys, out_ptrs));
      } else {
        for (size_t k = 0; k < keys.size(); ++k) RETURN_IF_ERROR(kv.Pull(keys[k], out_ptrs[k]));
      }
      RETURN_IF_ERROR(kv.WaitAll());
      for (size_t k = 0; k < keys.size(); ++k) {
        RETURN_IF_ERROR(ExpectEqual(outs[k], Scaled(bases[k], total),
                                    absl::StrCat("round ", r, " key ", keys[k].Quoted())));
      }
    }
  }
  RETURN_IF_ERROR(kv.WaitAll());
  RETURN_IF_ERROR(kv.Barrier());
  if (mode == "dist_async") {
    RETURN_IF_ERROR(kv.Pull(keys, out_ptrs));
    RETURN_IF_ERROR(kv.WaitAll());
    for (size_t k = 0; k < keys.size(); ++k) {
      Tensor want = inits[k].Clone();
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        want.SetFromDouble(i, inits[k].GetAsDouble(i) + rounds * total * bases[k].GetAsDouble(i));
      }
      RETURN_IF_ERROR(ExpectEqual(outs[k], want, absl::StrCat("key ", keys[k].Quoted())));
    }
  }
  std::printf("worker %d: %d rounds of %s checked\n", rank, rounds, mode.c_str());
  return absl::OkStatus();
}

// ElasticValue: the integer in [-8, 8] worker `rank` pushes to element `i` of key `k` in round
// `round` (0: the initial value), the same on every worker.
double ElasticValue(uint64_t seed, int round, int rank, int k, int64_t i) {
  uint64_t x = seed ^ (uint64_t(round) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(rank + 1) << 40) ^
               (uint64_t(k) << 20) ^ uint64_t(i);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<double>(static_cast<int64_t>(x % 17) - 8);
}

absl::Status Elastic(KVStore& kv, uint64_t seed, int rounds, int pause_ms, int64_t big) {
  const int rank = kv.rank(), workers = kv.num_workers();
  std::vector<Key> keys;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 60; ++i) {
    keys.push_back(500 + i);
    sizes.push_back(1 + i % 5);
  }
  keys.push_back(9);
  sizes.push_back(big);  // Above the job's big-value bound: split over the servers.
  const int n = static_cast<int>(keys.size());
  // The reference, in float64: each key's value after the rounds so far.
  std::vector<std::vector<double>> want(n);
  std::vector<Tensor> inits;
  for (int k = 0; k < n; ++k) {
    Tensor init = Tensor::Zeros(DType::kFloat32, {sizes[k]});
    want[k].resize(sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i) {
      want[k][i] = ElasticValue(seed, 0, 0, k, i);
      init.SetFromDouble(i, want[k][i]);
    }
    inits.push_back(std::move(init));
  }
  RETURN_IF_ERROR(kv.Init(keys, inits));
  std::vector<Tensor> outs;
  std::vector<Tensor*> out_ptrs;
  for (int64_t size : sizes) outs.push_back(Tensor::Zeros(DType::kFloat32, {size}));
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  for (int r = 1; r <= rounds; ++r) {
    std::vector<Tensor> pushed;
    for (int k = 0; k < n; ++k) {
      Tensor g = Tensor::Zeros(DType::kFloat32, {sizes[k]});
      for (int64_t i = 0; i < sizes[k]; ++i) {
        g.SetFromDouble(i, ElasticValue(seed, r, rank, k, i));
        for (int w = 0; w < workers; ++w) want[k][i] += ElasticValue(seed, r, w, k, i);
      }
      pushed.push_back(std::move(g));
    }
    const std::vector<Key> small(keys.begin(), keys.end() - 1);
    const std::vector<Tensor> small_pushed(pushed.begin(), pushed.end() - 1);
    const std::vector<Tensor*> small_outs(out_ptrs.begin(), out_ptrs.end() - 1);
    if ((r + rank) % 2 == 0) {
      RETURN_IF_ERROR(kv.Push(small, small_pushed));
      RETURN_IF_ERROR(kv.Pull(small, small_outs));
    } else {
      for (int k = 0; k + 1 < n; ++k) RETURN_IF_ERROR(kv.Push(keys[k], pushed[k]));
      for (int k = 0; k + 1 < n; ++k) RETURN_IF_ERROR(kv.Pull(keys[k], out_ptrs[k]));
    }
    RETURN_IF_ERROR(kv.Push(keys.back(), pushed.back()));
    RETURN_IF_ERROR(kv.Pull(keys.back(), out_ptrs.back()));
    RETURN_IF_ERROR(kv.WaitAll());
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < sizes[k]; ++i) {
        if (outs[k].GetAsDouble(i) != want[k][i]) {
          return absl::InternalError(absl::StrCat(
              "round ", r, " key ", keys[k].Quoted(), " element ", i, ": pulled ",
              outs[k].GetAsDouble(i), ", expected ", want[k][i], " (seed ", seed, ")"));
        }
      }
    }
    std::printf("ROUND %d\n", r);
    std::fflush(stdout);
    absl::SleepFor(absl::Milliseconds(pause_ms));
  }
  RETURN_IF_ERROR(kv.Barrier());
  std::printf("worker %d: %d rounds checked while the servers changed (seed %llu)\n", rank, rounds,
              static_cast<unsigned long long>(seed));
  return absl::OkStatus();
}

absl::Status StringKeys(KVStore& kv) {
  const std::vector<Key> keys = {"embedding", "fc1.weight"};
  const Tensor a = Base(300, 1), b = Base(4, 2);
  RETURN_IF_ERROR(kv.Init(keys, {a, b}));
  RETURN_IF_ERROR(kv.Push(keys, {Scaled(a, kv.rank() + 1), Scaled(b, kv.rank() + 1)}));
  Tensor out_a = Tensor::Zeros(DType::kFloat32, {300}), out_b = Tensor::Zeros(DType::kFloat32, {4});
  RETURN_IF_ERROR(kv.Pull(keys, {&out_a, &out_b}));
  RETURN_IF_ERROR(kv.WaitAll());
  const double total = kv.num_workers() * (kv.num_workers() + 1) / 2.0;
  RETURN_IF_ERROR(ExpectEqual(out_a, Scaled(a, total), "\"embedding\""));
  return ExpectEqual(out_b, Scaled(b, total), "\"fc1.weight\"");
}

absl::Status DeadServer(KVStore& kv) {
  // Key 11 is split over every server, so pulling it needs the dead one.
  RETURN_IF_ERROR(kv.Init(11, Base(1000, 0)));
  std::printf("READY\n");
  std::fflush(stdout);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  int dead = 0;
  while (absl::Now() < give_up) {
    ASSIGN_OR_RETURN(dead, kv.NumDeadNodes(NodeGroup::kServers, absl::Seconds(1)));
    if (dead == 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  RETURN_IF_ERROR(Expect(dead == 1, absl::StrCat("scheduler counts ", dead, " dead servers")));
  ASSIGN_OR_RETURN(const int dead_workers, kv.NumDeadNodes(NodeGroup::kWorkers, absl::Seconds(1)));
  RETURN_IF_ERROR(Expect(dead_workers == 0, "a live worker is counted dead"));
  Tensor out = Tensor::Zeros(DType::kFloat32, {1000});
  RETURN_IF_ERROR(kv.Pull(11, &out));
  const absl::Status pulled = kv.WaitAll();
  RETURN_IF_ERROR(Expect(absl::IsUnavailable(pulled),
                         absl::StrCat("pull from a dead server returned ", pulled.ToString())));
  RETURN_IF_ERROR(Expect(pulled.message().find("server 1 at 127.0.0.1:") != absl::string_view::npos,
                         absl::StrCat("the error does not name the server: ", pulled.ToString())));
  std::printf("dead server detected and named: %s\n", std::string(pulled.message()).c_str());
  return absl::OkStatus();
}

// RawCall sends `request` as a raw call of `method` on `stub`, with `credential` (a node
// credential, "NODE_ID:TOKEN", in the metadata of a scheduler's call) unless it is empty, and
// returns the call's status; the reply, when there is one, goes to `*reply`. Requests to a
// kvserver are sent as they are (signed or not by the caller: testing::SignRequest).
grpc::Status RawCall(grpc::GenericStub& stub, const char* method, const grpc::ByteBuffer& request,
                     const std::string& credential, grpc::ByteBuffer* reply) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(absl::Now() + absl::Seconds(10)));
  grpc::ByteBuffer sent = request;
  const bool to_server = absl::StartsWith(method, "/kvstore.proto.KVServer/");
  if (!credential.empty() && !to_server) context.AddMetadata(kNodeTokenKey, credential);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &sent, reply, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// Raw requests to server 0 (at `server`), bypassing the SDK's own checks, signed as this
// worker by `signer` (the store's own: DistStore::signer; null in a job without a secret) with
// its token `token`; `signed_payloads` when the job signs payloads.
absl::Status BadInput(KVStore& kv, uint64_t node_id, const std::string& server,
                      RequestSigner* signer, const std::string& token, bool signed_payloads) {
  const Tensor init = Base(6, 4);
  RETURN_IF_ERROR(kv.Init(5, init));  // Small key: lives on one server; with one server, here.
  grpc::GenericStub stub(MakeChannel(server));
  RequestSigner* sent_signer = signer;  // What `call` signs with; the attacks change it.
  auto send = [&](const char* method, const grpc::ByteBuffer& request) {
    grpc::ByteBuffer reply;
    return FromGrpcStatus(RawCall(stub, method, request, "", &reply));
  };
  auto call = [&](const char* method, const grpc::ByteBuffer& request) {
    return send(method, testing::SignRequest(method, request, sent_signer, server));
  };
  auto push = [&](uint64_t node, std::vector<int64_t> shape, DType dtype, int64_t count,
                  uint64_t payload_bytes, const Tensor& data, int64_t key = 5) {
    proto::PushRequest header;
    header.set_node_id(node);
    header.set_request_id(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
    proto::TensorHeader* t = header.add_tensors();
    KeyToProto(key, t->mutable_key());
    t->set_dtype(DTypeToProto(dtype));
    for (int64_t d : shape) t->add_shape(d);
    t->set_element_count(count);
    t->set_payload_bytes(payload_bytes);
    return call("/kvstore.proto.KVServer/Push",
                EncodeFrame(header, {PayloadPart{data, 0, data.byte_size()}}).value());
  };
  // An Init request naming key 5 (already stored whole), flagged deferred and/or fill.
  auto init_request = [&](bool deferred, bool fill, uint64_t payload_bytes, const Tensor& data) {
    proto::InitRequest header;
    header.set_node_id(node_id);
    header.set_deferred(deferred);
    header.set_fill(fill);
    proto::TensorHeader* t = header.add_tensors();
    KeyToProto(int64_t{5}, t->mutable_key());
    t->set_dtype(DTypeToProto(DType::kFloat32));
    t->add_shape(6);
    t->set_element_count(6);
    t->set_payload_bytes(payload_bytes);
    std::vector<PayloadPart> parts;
    if (payload_bytes > 0) parts.push_back(PayloadPart{data, 0, data.byte_size()});
    return call("/kvstore.proto.KVServer/Init", EncodeFrame(header, parts).value());
  };
  const Tensor other = Base(6, 9);
  struct Case {
    const char* name;
    absl::Status status;
    absl::StatusCode code;
  };
  grpc::Slice garbage_slice(std::string("\xff\xff\xff\x7f garbage"));
  const std::vector<Case> cases = {
      {"garbage bytes", call("/kvstore.proto.KVServer/Push", grpc::ByteBuffer(&garbage_slice, 1)),
       absl::StatusCode::kInvalidArgument},
      {"payload shorter than its header says",
       push(node_id, {6}, DType::kFloat32, 6, 1 << 20, other), absl::StatusCode::kInvalidArgument},
      {"wrong shape", push(node_id, {2, 3}, DType::kFloat32, 6, 24, other),
       absl::StatusCode::kInvalidArgument},
      {"wrong dtype", push(node_id, {6}, DType::kInt32, 6, 24, other),
       absl::StatusCode::kInvalidArgument},
      {"a node id never issued", push(987654, {6}, DType::kFloat32, 6, 24, other),
       absl::StatusCode::kPermissionDenied},
      {"a key never initialised", push(node_id, {6}, DType::kFloat32, 6, 24, other, 77),
       absl::StatusCode::kNotFound},
      {"an Init both deferred and a fill", init_request(true, true, 24, other),
       absl::StatusCode::kInvalidArgument},
      {"a fill of a key initialised whole", init_request(false, true, 24, other),
       absl::StatusCode::kFailedPrecondition},
      {"a deferred Init with bytes", init_request(true, false, 24, other),
       absl::StatusCode::kInvalidArgument},
  };
  std::vector<Case> attacks;
  if (signer != nullptr) {
    // A job with a secret: requests without this worker's signature, or naming another node.
    const Tensor zeros = Tensor::Zeros(DType::kFloat32, {6});
    proto::ServerCommandRequest command;
    command.set_node_id(node_id);
    command.set_head(0);
    command.set_body("sum");
    attacks.push_back({"a push naming the scheduler's node (1)",
                       push(1, {6}, DType::kFloat32, 6, 24, zeros),
                       absl::StatusCode::kPermissionDenied});
    attacks.push_back({"a push naming another worker's node",
                       push(node_id + 1, {6}, DType::kFloat32, 6, 24, zeros),
                       absl::StatusCode::kPermissionDenied});
    attacks.push_back({"a command sent straight to a server",
                       call("/kvstore.proto.KVServer/Command", EncodeMessage(command)),
                       absl::StatusCode::kPermissionDenied});
    sent_signer = nullptr;
    attacks.push_back({"a push without a signature",
                       push(node_id, {6}, DType::kFloat32, 6, 24, zeros),
                       absl::StatusCode::kUnauthenticated});
    RequestSigner forged(node_id, JobToken(NewSecret()));
    sent_signer = &forged;
    attacks.push_back({"a push signed with a forged node token",
                       push(node_id, {6}, DType::kFloat32, 6, 24, zeros),
                       absl::StatusCode::kUnauthenticated});
    RequestSigner claimed(1, token);
    sent_signer = &claimed;
    attacks.push_back({"a push signed with this node's token as node 1",
                       push(1, {6}, DType::kFloat32, 6, 24, zeros),
                       absl::StatusCode::kUnauthenticated});
    sent_signer = signer;
    // A request captured on the wire: sent again as it is, altered, or sent to another method,
    // it is refused, and the key keeps what the one accepted push made it.
    const Tensor six = Base(6, 8);
    RETURN_IF_ERROR(kv.Init(6, six));
    proto::PushRequest header;
    header.set_node_id(node_id);
    header.set_request_id(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
    proto::TensorHeader* t = header.add_tensors();
    KeyToProto(int64_t{6}, t->mutable_key());
    t->set_dtype(DTypeToProto(DType::kFloat32));
    t->add_shape(6);
    t->set_element_count(6);
    t->set_payload_bytes(24);
    const Tensor pushed = Base(6, 11);
    const grpc::ByteBuffer captured = testing::SignRequest(
        "/kvstore.proto.KVServer/Push",
        EncodeFrame(header, {PayloadPart{pushed, 0, pushed.byte_size()}}).value(), signer, server);
    RETURN_IF_ERROR(send("/kvstore.proto.KVServer/Push", captured));
    Tensor after_push = Tensor::Zeros(DType::kFloat32, {6});
    RETURN_IF_ERROR(kv.Pull(6, &after_push));
    RETURN_IF_ERROR(kv.WaitAll());
    attacks.push_back({"a captured push sent again", send("/kvstore.proto.KVServer/Push", captured),
                       absl::StatusCode::kUnauthenticated});
    std::vector<grpc::Slice> slices;
    RETURN_IF_ERROR(FromGrpcStatus(captured.Dump(&slices)));
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    std::string header_altered = bytes;
    header_altered[6] ^= 0x01;  // A byte of the header (the request id's field).
    grpc::Slice altered_header(header_altered);
    attacks.push_back({"a captured push with its header altered",
                       send("/kvstore.proto.KVServer/Push", grpc::ByteBuffer(&altered_header, 1)),
                       absl::StatusCode::kUnauthenticated});
    // Its payload is signed too where the job signs payloads (scheduler --signed_payloads).
    if (signed_payloads) {
      bytes[bytes.size() - kSignatureTrailerBytes - 1] ^= 0x40;  // The payload's last byte.
      grpc::Slice altered(bytes);
      attacks.push_back({"a captured push with its payload altered",
                         send("/kvstore.proto.KVServer/Push", grpc::ByteBuffer(&altered, 1)),
                         absl::StatusCode::kUnauthenticated});
    }
    attacks.push_back({"a captured push sent as a PushPull",
                       send("/kvstore.proto.KVServer/PushPull", captured),
                       absl::StatusCode::kUnauthenticated});
    Tensor after_replays = Tensor::Zeros(DType::kFloat32, {6});
    RETURN_IF_ERROR(kv.Pull(6, &after_replays));
    RETURN_IF_ERROR(kv.WaitAll());
    RETURN_IF_ERROR(ExpectEqual(after_replays, after_push, "key 6 after the replayed pushes"));
  }
  for (const std::vector<Case>* list : {&cases, static_cast<const std::vector<Case>*>(&attacks)}) {
    for (const Case& c : *list) {
      RETURN_IF_ERROR(
          Expect(c.status.code() == c.code, absl::StrCat(c.name, ": got ", c.status.ToString())));
      std::printf("refused %s: %s\n", c.name, c.status.ToString().c_str());
    }
  }
  Tensor out = Tensor::Zeros(DType::kFloat32, {6});
  RETURN_IF_ERROR(kv.Pull(5, &out));
  RETURN_IF_ERROR(kv.WaitAll());
  return ExpectEqual(out, init, "key 5 after the refused requests");
}

// Raw calls to the scheduler at `address` without the job's credentials, or with this
// worker's (`credential`) for another node: each must be refused, and the job go on.
absl::Status SchedulerAttacks(const std::string& address, uint64_t node_id,
                              const std::string& credential) {
  grpc::GenericStub stub(MakeChannel(address));
  auto call = [&](const char* method, const google::protobuf::MessageLite& message,
                  const std::string& sent_credential) {
    grpc::ByteBuffer reply;
    return FromGrpcStatus(RawCall(stub, method, EncodeMessage(message), sent_credential, &reply));
  };
  proto::RegisterRequest fake_server;
  fake_server.set_role(proto::SERVER);
  fake_server.set_address("127.0.0.1:1");
  proto::ShutdownRequest shutdown;
  proto::CommandRequest command;
  command.set_head(0);
  command.set_body("sum");
  proto::ClusterStatusRequest status;
  proto::HeartbeatRequest other_heartbeat;
  other_heartbeat.set_node_id(node_id + 1);
  proto::BarrierRequest other_barrier;
  other_barrier.set_node_id(node_id + 1);
  other_barrier.set_group(proto::GROUP_WORKERS);
  struct Case {
    const char* name;
    absl::Status status;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"a registration without the job token",
       call("/kvstore.proto.Scheduler/Register", fake_server, ""),
       absl::StatusCode::kUnauthenticated},
      {"a registration with a node token",
       call("/kvstore.proto.Scheduler/Register", fake_server, credential),
       absl::StatusCode::kUnauthenticated},
      {"a shutdown without a credential", call("/kvstore.proto.Scheduler/Shutdown", shutdown, ""),
       absl::StatusCode::kUnauthenticated},
      {"an updater command without a credential",
       call("/kvstore.proto.Scheduler/Command", command, ""), absl::StatusCode::kUnauthenticated},
      {"a status request without a credential",
       call("/kvstore.proto.Scheduler/ClusterStatus", status, ""),
       absl::StatusCode::kUnauthenticated},
      {"a heartbeat for another node",
       call("/kvstore.proto.Scheduler/Heartbeat", other_heartbeat, credential),
       absl::StatusCode::kPermissionDenied},
      {"a barrier entered as another node",
       call("/kvstore.proto.Scheduler/Barrier", other_barrier, credential),
       absl::StatusCode::kPermissionDenied},
  };
  for (const Case& c : cases) {
    RETURN_IF_ERROR(
        Expect(c.status.code() == c.code, absl::StrCat(c.name, ": got ", c.status.ToString())));
    std::printf("refused %s: %s\n", c.name, c.status.ToString().c_str());
  }
  // Bytes that do not parse: INVALID_ARGUMENT with a message, not an empty UNIMPLEMENTED.
  grpc::Slice garbage(std::string("\x0a\xff\xff\xff\xff\xff garbage"));
  grpc::ByteBuffer reply;
  const grpc::Status malformed = RawCall(stub, "/kvstore.proto.Scheduler/Heartbeat",
                                         grpc::ByteBuffer(&garbage, 1), credential, &reply);
  RETURN_IF_ERROR(Expect(malformed.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
                             !malformed.error_message().empty(),
                         absl::StrCat("a malformed heartbeat: got ", malformed.error_code(), " ",
                                      malformed.error_message())));
  std::printf("refused a malformed heartbeat: %s\n", malformed.error_message().c_str());
  return absl::OkStatus();
}

// Gradient of `worker` in `round` for a key of `n` elements: uniform in [-1, 1).
std::vector<float> Gradient(uint64_t seed, int key, int round, int worker, int64_t n) {
  std::mt19937_64 engine(seed * 1000003 + key * 1009 + round * 101 + worker);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> g(n);
  for (float& v : g) v = uniform(engine);
  return g;
}

// One worker's compressor, written from the rules in common/compression.h element by element.
double SendOne(CompressionType type, float t, float g, float* r) {
  *r += g;
  if (type == CompressionType::k2Bit) {
    if (*r >= t) {
      *r -= t;
      return t;
    }
    if (*r <= -t) {
      *r += t;
      return -t;
    }
    return 0;
  }
  if (*r > t) {
    *r -= 1;
    return 1;
  }
  *r += 1;
  return -1;
}

absl::Status Compressed(KVStore& kv, const std::string& type, uint64_t seed) {
  auto* dist = dynamic_cast<DistStore*>(&kv);
  RETURN_IF_ERROR(Expect(dist != nullptr, "not a distributed store"));
  const int rank = kv.rank(), workers = kv.num_workers();
  const double threshold = type == "2bit" ? 0.5 : 0.0;
  ASSIGN_OR_RETURN(CompressionParams params, MakeCompressionParams(type, threshold));
  // Key 22 is split over the servers (above the default big-value bound) and travels in
  // 512 KiB chunks; both sizes are multiples of 32 per chunk, so the codes have no padding.
  const std::vector<int> keys = {21, 22};
  const std::vector<int64_t> sizes = {1600, 1200000};
  std::vector<Tensor> inits;
  for (int64_t n : sizes) inits.push_back(Tensor::Zeros(DType::kFloat32, {n}));
  RETURN_IF_ERROR(kv.Init({keys[0], keys[1]}, inits));
  RETURN_IF_ERROR(kv.SetGradientCompression({type, threshold}));
  // residuals[k][w]: worker w's residual for key k, as the reference keeps it.
  std::vector<std::vector<std::vector<float>>> residuals(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    residuals[k].assign(workers, std::vector<float>(sizes[k], 0.0f));
  }
  int64_t float_bytes = 0;
  for (int64_t n : sizes) float_bytes += n * 4;
  const int64_t factor = ValuesPerWord(params.type);
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> pushed, outs;
    std::vector<std::vector<double>> expected(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) {
      expected[k].assign(sizes[k], 0.0);
      for (int w = 0; w < workers; ++w) {
        const std::vector<float> g = Gradient(seed, keys[k], round, w, sizes[k]);
        for (int64_t i = 0; i < sizes[k]; ++i) {
          expected[k][i] += SendOne(params.type, params.threshold, g[i], &residuals[k][w][i]);
        }
        if (w == rank) {
          Tensor t = Tensor::Zeros(DType::kFloat32, {sizes[k]});
          std::copy(g.begin(), g.end(), t.data_as<float>());
          pushed.push_back(t);
        }
      }
      outs.push_back(Tensor::Full(DType::kFloat32, {sizes[k]}, -99));
    }
    const int64_t before = dist->push_payload_bytes();
    RETURN_IF_ERROR(kv.Push({keys[0], keys[1]}, pushed));
    RETURN_IF_ERROR(kv.Pull({keys[0], keys[1]}, {&outs[0], &outs[1]}));
    RETURN_IF_ERROR(kv.WaitAll());
    const int64_t wire = dist->push_payload_bytes() - before;
    RETURN_IF_ERROR(Expect(wire * factor == float_bytes,
                           absl::StrCat("round ", round, ": ", wire, " payload bytes pushed for ",
                                        float_bytes, " float32 bytes, expected 1/", factor)));
    for (size_t k = 0; k < keys.size(); ++k) {
      for (int64_t i = 0; i < sizes[k]; ++i) {
        if (outs[k].GetAsDouble(i) != expected[k][i]) {
          return absl::InternalError(absl::StrCat("round ", round, " key ", keys[k], " element ", i,
                                                  ": pulled ", outs[k].GetAsDouble(i),
                                                  ", expected ", expected[k][i]));
        }
      }
    }
    std::printf("worker %d: round %d of %s checked, %lld payload bytes for %lld float32 bytes\n",
                rank, round, type.c_str(), static_cast<long long>(wire),
                static_cast<long long>(float_bytes));
  }
  return absl::OkStatus();
}

// The rows worker `w` pushes in `round`: ids and their values (small integers, exact sums).
std::pair<std::vector<int64_t>, std::vector<float>> Rows(uint64_t seed, int round, int w,
                                                         int64_t rows, int64_t row) {
  std::mt19937_64 engine(seed * 7919 + round * 31 + w);
  std::uniform_int_distribution<int64_t> id(0, rows - 1), count(0, 60), value(-9, 9);
  std::vector<int64_t> ids(count(engine));
  for (int64_t& i : ids) i = id(engine);
  std::vector<float> values(ids.size() * row);
  for (float& v : values) v = static_cast<float>(value(engine));
  return {ids, values};
}

absl::Status RowSparseRounds(KVStore& kv, uint64_t seed) {
  const int rank = kv.rank(), workers = kv.num_workers();
  const Shape shape = {1000, 4};
  const int64_t rows = shape[0], row = shape[1];
  RETURN_IF_ERROR(kv.Init(31, Tensor::Zeros(DType::kFloat32, shape)));
  for (int round = 0; round < 3; ++round) {
    std::vector<double> expected(rows * row, 0.0);
    RowSparse mine;
    for (int w = 0; w < workers; ++w) {
      auto [ids, values] = Rows(seed, round, w, rows, row);
      for (size_t i = 0; i < ids.size(); ++i) {
        for (int64_t e = 0; e < row; ++e) expected[ids[i] * row + e] += values[i * row + e];
      }
      if (w != rank) continue;
      Tensor data = Tensor::Zeros(DType::kFloat32, RowShape(shape, ids.size()));
      std::copy(values.begin(), values.end(), data.data_as<float>());
      ASSIGN_OR_RETURN(mine, RowSparse::Create(shape, ids, data));
    }
    RETURN_IF_ERROR(kv.Push(31, mine));
    Tensor dense = Tensor::Full(DType::kFloat32, shape, -99);
    RETURN_IF_ERROR(kv.Pull(31, &dense));
    std::mt19937_64 engine(seed + round + 1000 * rank);
    std::uniform_int_distribution<int64_t> id(0, rows - 1);
    std::vector<int64_t> wanted(50);
    for (int64_t& i : wanted) i = id(engine);
    RowSparse out = RowSparse::Empty(DType::kFloat32, shape);
    RETURN_IF_ERROR(kv.RowSparsePull(31, &out, wanted));
    RETURN_IF_ERROR(kv.WaitAll());
    for (int64_t i = 0; i < rows * row; ++i) {
      if (dense.GetAsDouble(i) != expected[i]) {
        return absl::InternalError(absl::StrCat("round ", round, " element ", i, ": pulled ",
                                                dense.GetAsDouble(i), ", expected ", expected[i]));
      }
    }
    const Tensor pulled = out.ToDense();
    for (int64_t r : out.row_ids()) {
      for (int64_t e = 0; e < row; ++e) {
        if (pulled.GetAsDouble(r * row + e) != expected[r * row + e]) {
          return absl::InternalError(
              absl::StrCat("round ", round, " row ", r, ": row-sparse pull differs from the sum"));
        }
      }
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    RETURN_IF_ERROR(Expect(out.row_ids() == wanted, "row-sparse pull ids"));
    std::printf("worker %d: row-sparse round %d checked\n", rank, round);
  }
  return absl::OkStatus();
}

absl::Status Train(KVStore& kv, char** args, int count) {
  if (count < 6) {
    return absl::InvalidArgumentError(
        "usage: test_worker train SEED FIRST LAST CKPT_ROUND DIR OUT [restored]");
  }
  uint64_t seed = 0;
  int first = 0, last = 0, checkpoint_round = 0;
  if (!absl::SimpleAtoi(args[0], &seed) || !absl::SimpleAtoi(args[1], &first) ||
      !absl::SimpleAtoi(args[2], &last) || !absl::SimpleAtoi(args[3], &checkpoint_round)) {
    return absl::InvalidArgumentError("train: SEED FIRST LAST CKPT_ROUND must be integers");
  }
  const std::string dir = args[4], out = args[5];
  // A last argument "pause=MS": MS of sleep after each round, announced with "ROUND r", so
  // that a test can change the servers meanwhile.
  int pause_ms = -1;
  if (count > 6 && absl::StartsWith(args[count - 1], "pause=")) {
    if (!absl::SimpleAtoi(std::string(args[count - 1]).substr(6), &pause_ms)) {
      return absl::InvalidArgumentError("train: pause=MS takes a number of milliseconds");
    }
    --count;
  }
  const bool restored = count > 6 && std::string(args[6]) == "restored";
  const int rank = kv.rank();
  const std::vector<Key> keys = {"embedding", "bias"};
  const std::vector<Shape> shapes = {{600, 5}, {7}};
  auto draw = [&](uint64_t stream, const Shape& shape) {
    std::mt19937_64 engine(stream);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    Tensor t = Tensor::Zeros(DType::kFloat32, shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<float>()[i] = uniform(engine);
    return t;
  };
  RETURN_IF_ERROR(kv.Init(keys, {draw(seed, shapes[0]), draw(seed + 1, shapes[1])}));
  if (!restored && rank == 0) {
    OptimizerConfig adam;
    adam.name = "adam";
    adam.learning_rate = 0.01;
    adam.wd = 0.001;
    adam.lr_scheduler.type = "factor";
    adam.lr_scheduler.step = 2;
    adam.lr_scheduler.factor = 0.8;
    RETURN_IF_ERROR(kv.SetOptimizer(adam));
  }
  RETURN_IF_ERROR(kv.Barrier());
  std::vector<Tensor> values = {Tensor::Zeros(DType::kFloat32, shapes[0]),
                                Tensor::Zeros(DType::kFloat32, shapes[1])};
  for (int round = first; round <= last; ++round) {
    const uint64_t stream = seed * 1000 + round * 10 + rank;
    RETURN_IF_ERROR(kv.Push(keys, {draw(stream, shapes[0]), draw(stream + 5000, shapes[1])}));
    RETURN_IF_ERROR(kv.Pull(keys, {&values[0], &values[1]}));
    RETURN_IF_ERROR(kv.WaitAll());
    if (round == checkpoint_round) {
      RETURN_IF_ERROR(kv.Barrier());
      if (rank == 0) RETURN_IF_ERROR(kv.Checkpoint(dir));
      RETURN_IF_ERROR(kv.Barrier());
      std::printf("worker %d: CHECKPOINTED after round %d\n", rank, round);
      std::fflush(stdout);
    }
    if (pause_ms >= 0) {
      std::printf("ROUND %d\n", round);
      std::fflush(stdout);
      absl::SleepFor(absl::Milliseconds(pause_ms));
    }
  }
  if (out == "-") {
    absl::SleepFor(absl::Seconds(60));
    return absl::DeadlineExceededError("train: nobody ended the job within 60 s");
  }
  if (rank == 0) {
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    for (const Tensor& v : values) {
      file.write(static_cast<const char*>(v.data()), static_cast<std::streamsize>(v.byte_size()));
    }
    if (!file) return absl::InternalError(absl::StrCat("cannot write ", out));
  }
  std::printf("worker %d: trained rounds %d..%d\n", rank, first, last);
  return absl::OkStatus();
}

// HoldUntilShutdown prints READY and waits (at most 60 s) until the job is shut down.
void HoldUntilShutdown(KVStore& kv) {
  std::printf("READY\n");
  std::fflush(stdout);
  for (int i = 0; i < 600; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<int> dead = kv.NumDeadNodes(NodeGroup::kScheduler, absl::Seconds(1));
    if (!dead.ok() || *dead > 0) break;
  }
}

absl::Status ClippedSum(KVStore& kv) {
  RETURN_IF_ERROR(kv.Init(9, Tensor::Zeros(DType::kFloat32, {4})));
  RETURN_IF_ERROR(kv.SendCommandToServers(0, "clipped_sum limit=0.5"));
  ASSIGN_OR_RETURN(const Tensor push,
                   Tensor::FromValues(DType::kFloat32, {4}, {2, -2, 0.25, -0.1}));
  for (int step = 1; step <= 2; ++step) {
    RETURN_IF_ERROR(kv.Push(9, push));
    Tensor out = Tensor::Zeros(DType::kFloat32, {4});
    RETURN_IF_ERROR(kv.Pull(9, &out));
    RETURN_IF_ERROR(kv.WaitAll());
    ASSIGN_OR_RETURN(const Tensor want, Tensor::FromValues(DType::kFloat32, {4},
                                                           {0.5 * step, -0.5 * step, 0.25 * step,
                                                            static_cast<double>(-0.1f) * step}));
    RETURN_IF_ERROR(ExpectEqual(out, want, absl::StrCat("clipped_sum step ", step)));
  }
  HoldUntilShutdown(kv);
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  if (argc < 2) return absl::InvalidArgumentError("usage: test_worker SCENARIO [ARGS]");
  const std::string scenario = argv[1];
  const std::string mode = (scenario == "rounds" || scenario == "tables") && argc > 2
                               ? argv[2]
                               : std::string("dist_sync");
  ASSIGN_OR_RETURN(DistOptions options, DistOptions::FromEnvironment());
  options.rpc_timeout = absl::Seconds(30);
  options.barrier_timeout = absl::Seconds(60);
  options.register_timeout = absl::Seconds(30);
  options.max_retries = 3;
  ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create(mode, options));
  if (scenario == "rounds") {
    int rounds = 3;
    if (argc > 3 && !absl::SimpleAtoi(argv[3], &rounds)) {
      return absl::InvalidArgumentError("rounds must be an integer");
    }
    return Rounds(*kv, mode, rounds);
  }
  if (scenario == "tables") {
    // A last argument "hold=FILE": once checked, print READY and stay in the job until FILE
    // exists (at most 60 s), for the test to look at it; then finish as usual.
    std::string hold;
    if (argc > 7 && absl::StartsWith(argv[argc - 1], "hold=")) {
      hold = std::string(argv[argc - 1]).substr(5);
      --argc;
    }
    // "pause=MS": sleep MS between rounds, so that a test can act during training.
    int pause_ms = 0;
    if (argc > 7 && absl::StartsWith(argv[argc - 1], "pause=")) {
      if (!absl::SimpleAtoi(std::string(argv[argc - 1]).substr(6), &pause_ms)) {
        return absl::InvalidArgumentError("tables: pause=MS takes milliseconds");
      }
      --argc;
    }
    uint64_t seed = 0;
    int first = 0, last = 0, servers = 0, checkpoint_round = 0;
    if (argc < 7 || !absl::SimpleAtoi(argv[3], &seed) || !absl::SimpleAtoi(argv[4], &first) ||
        !absl::SimpleAtoi(argv[5], &last) || !absl::SimpleAtoi(argv[6], &servers) ||
        (argc > 7 && (argc < 9 || !absl::SimpleAtoi(argv[7], &checkpoint_round)))) {
      return absl::InvalidArgumentError(
          "usage: test_worker tables MODE SEED FIRST LAST SERVERS [CKPT_ROUND DIR]");
    }
    RETURN_IF_ERROR(TableScenario(*kv, mode, seed, first, last, servers, checkpoint_round,
                                  argc > 8 ? argv[8] : "", absl::Milliseconds(pause_ms)));
    if (!hold.empty()) {
      std::printf("READY\n");
      std::fflush(stdout);
      const absl::Time give_up = absl::Now() + absl::Seconds(60);
      while (!std::filesystem::exists(hold) && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    return absl::OkStatus();
  }
  if (scenario == "open_round") {
    // open_round KEY: a round of KEY that never completes (rank 0 pushes it, the others never
    // do), so that a checkpoint waits for it; then waits (bounded) for the test to end it.
    int64_t key = 0;
    if (argc < 3 || !absl::SimpleAtoi(argv[2], &key)) {
      return absl::InvalidArgumentError("usage: test_worker open_round KEY");
    }
    RETURN_IF_ERROR(kv->Init(key, Base(8, 1)));
    if (kv->rank() == 0) RETURN_IF_ERROR(kv->Push(key, Base(8, 2)));
    absl::SleepFor(absl::Milliseconds(200));  // Time to reach the server (checked by the test).
    std::printf("READY\n");
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(60));
    return absl::DeadlineExceededError("open_round: not ended within 60 s");
  }
  if (scenario == "after_the_end") {
    // Stays until the job is shut down (kvctl shutdown), waits for the scheduler to be gone,
    // then calls it: the call must fail at once, naming the job's end, not wait for a
    // scheduler that was only away.
    std::printf("READY\n");
    std::fflush(stdout);
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up &&
           kv->NumDeadNodes(NodeGroup::kScheduler, absl::Seconds(1)).ok()) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    absl::SleepFor(absl::Seconds(1));  // The scheduler exits once the servers have heard it.
    const absl::Time start = absl::Now();
    const absl::Status barrier = kv->Barrier();
    std::printf("a barrier after the end: %s after %lld ms\n", barrier.ToString().c_str(),
                static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - start)));
    return absl::IsCancelled(barrier) ? absl::OkStatus() : barrier;
  }
  if (scenario == "string_keys") return StringKeys(*kv);
  if (scenario == "elastic") {
    uint64_t seed = 0;
    int rounds = 0, pause_ms = 0;
    int64_t big = 200000;
    if (argc < 5 || argc > 6 || !absl::SimpleAtoi(argv[2], &seed) ||
        !absl::SimpleAtoi(argv[3], &rounds) || !absl::SimpleAtoi(argv[4], &pause_ms) ||
        (argc == 6 && !absl::SimpleAtoi(argv[5], &big))) {
      return absl::InvalidArgumentError("usage: test_worker elastic SEED ROUNDS PAUSE_MS [BIG]");
    }
    return Elastic(*kv, seed, rounds, pause_ms, big);
  }
  if (scenario == "train") return Train(*kv, argv + 2, argc - 2);
  if (scenario == "clipped_sum") return ClippedSum(*kv);
  if (scenario == "row_sparse") {
    uint64_t seed = 0;
    if (argc < 3 || !absl::SimpleAtoi(argv[2], &seed)) {
      return absl::InvalidArgumentError("usage: test_worker row_sparse SEED");
    }
    return RowSparseRounds(*kv, seed);
  }
  if (scenario == "compressed") {
    uint64_t seed = 0;
    if (argc < 4 || !absl::SimpleAtoi(argv[3], &seed)) {
      return absl::InvalidArgumentError("usage: test_worker compressed TYPE SEED");
    }
    return Compressed(*kv, argv[2], seed);
  }
  if (scenario == "dead_server") return DeadServer(*kv);
  if (scenario == "until_killed") {
    // Joins, and pushes a key that the other workers never push, so that the server holds its
    // push open (a dist_sync round that never completes); then waits (bounded) for the test to
    // kill it.
    RETURN_IF_ERROR(kv->Init(3, Base(8, 1)));
    RETURN_IF_ERROR(kv->Init(4, Base(8, 3)));
    RETURN_IF_ERROR(kv->Push(4, Base(8, 4)));
    RETURN_IF_ERROR(kv->Wait({4}));  // Every worker pushed key 4: the round completed.
    if (kv->rank() == 0) {
      RETURN_IF_ERROR(kv->Push(3, Base(8, 2)));
      absl::SleepFor(absl::Milliseconds(200));  // Time to reach the server (not asserted).
    }
    std::printf("READY\n");
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(60));
    return absl::DeadlineExceededError("until_killed: not killed within 60 s");
  }
  if (scenario == "big_value") {
    uint64_t seed = 0;
    int64_t mib = 0;
    if (argc < 4 || !absl::SimpleAtoi(argv[2], &seed) || !absl::SimpleAtoi(argv[3], &mib) ||
        mib <= 0) {
      return absl::InvalidArgumentError("usage: test_worker big_value SEED MIB");
    }
    return BigValue(*kv, seed, mib);
  }
  if (scenario == "bad_input") {
    auto* dist = dynamic_cast<DistStore*>(kv.get());
    RETURN_IF_ERROR(Expect(dist != nullptr, "not a distributed store"));
    // Server 0's address, from the scheduler.
    auto scheduler = proto::Scheduler::NewStub(
        MakeChannel(absl::StrCat(options.scheduler_host, ":", options.scheduler_port)));
    proto::ClusterStatusRequest request;
    request.set_node_id(dist->node_id());
    proto::ClusterStatusResponse reply;
    const std::string credential =
        options.security.secret.empty() ? "" : NodeCredential(dist->node_id(), dist->node_token());
    const std::string token = options.security.secret.empty() ? "" : dist->node_token();
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadline(absl::Now() + absl::Seconds(10)));
    if (!credential.empty()) context.AddMetadata(kNodeTokenKey, credential);
    RETURN_IF_ERROR(FromGrpcStatus(scheduler->ClusterStatus(&context, request, &reply)));
    std::string server;
    for (const proto::NodeStatus& node : reply.nodes()) {
      if (node.role() == proto::SERVER && node.rank() == 0) server = node.address();
    }
    RETURN_IF_ERROR(Expect(!server.empty(), "the scheduler lists no server 0"));
    RETURN_IF_ERROR(
        BadInput(*kv, dist->node_id(), server, dist->signer(), token, dist->signed_payloads()));
    if (credential.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(
        SchedulerAttacks(absl::StrCat(options.scheduler_host, ":", options.scheduler_port),
                         dist->node_id(), credential));
    // The job went on: the key is intact, and a barrier and a pull still work.
    RETURN_IF_ERROR(kv->Barrier());
    Tensor out = Tensor::Zeros(DType::kFloat32, {6});
    RETURN_IF_ERROR(kv->Pull(5, &out));
    RETURN_IF_ERROR(kv->WaitAll());
    return ExpectEqual(out, Base(6, 4), "key 5 after the refused calls");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown scenario ", scenario));
}

}  // namespace
}  // namespace kvstore::testing

int main(int argc, char** argv) {
  const absl::Status status = kvstore::testing::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "test_worker: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
