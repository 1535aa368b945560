// Tests of dist_sync rounds kept for a whole key group (server_engine_group_rounds.cc): a group
// pushed whole by every worker takes one group round, and the values, acknowledgements, errors
// and request ids are those of the same pushes key by key - also when some worker pushes some
// members on its own in the middle of a round, with an updater that is not piecewise, and with
// workers pushing from threads of their own.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/key_groups.h"
#include "server/core/server_engine.h"
#include "server/core/server_engine_test_util.h"
#include "tests/test_util.h"
namespace kvstore {
namespace {

using testing::Bytes;
using testing::Incoming;
using testing::MaxAbsDiff;
using testing::TestRng;
using testing::ToDoubles;

std::unique_ptr<ServerEngine> Engine(const std::vector<uint64_t>& workers,
                                     std::unique_ptr<Updater> updater) {
  ServerEngineOptions options;
  options.sync = true;
  options.worker_node_ids = workers;
  auto engine = ServerEngine::Create(std::move(options), std::move(updater));
  REQUIRE(engine.ok());
  return std::move(engine).value();
}

std::vector<uint64_t> Workers(int n) {
  std::vector<uint64_t> nodes(n);
  std::iota(nodes.begin(), nodes.end(), uint64_t{2});
  return nodes;
}

// Members: `n` keys of the given dtypes, widest first so that every member is aligned in an
// arena, with random shapes and initial values.
struct Members {
  std::vector<ValueSlice> slices;
  std::vector<Tensor> initial;

  Members(TestRng& rng, int n, std::vector<DType> dtypes) {
    std::vector<DType> drawn;
    for (int i = 0; i < n; ++i) drawn.push_back(dtypes[rng.Int(0, dtypes.size() - 1)]);
    std::stable_sort(drawn.begin(), drawn.end(),
                     [](DType a, DType b) { return DTypeSize(a) > DTypeSize(b); });
    for (int i = 0; i < n; ++i) {
      const Shape shape = rng.AnyShape(2, 5);
      initial.push_back(rng.RandomTensor(drawn[i], shape));
      slices.push_back(ValueSlice{int64_t{300 + 7 * i}, drawn[i], shape, 0, NumElements(shape)});
    }
  }
  std::vector<IncomingValue> Values(const std::vector<Tensor>& values, size_t from = 0,
                                    size_t to = SIZE_MAX) const {
    std::vector<IncomingValue> out;
    for (size_t i = from; i < std::min(to, values.size()); ++i) {
      out.push_back(Incoming(slices[i].key, values[i]));
    }
    return out;
  }
  std::vector<Tensor> Draw(TestRng& rng) const {
    std::vector<Tensor> out;
    for (const Tensor& t : initial) out.push_back(rng.RandomTensor(t.dtype(), t.shape()));
    return out;
  }
};

std::vector<uint8_t> Pack(const std::vector<Tensor>& values, size_t from = 0,
                          size_t to = SIZE_MAX) {
  std::vector<uint8_t> bytes;
  for (size_t i = from; i < std::min(to, values.size()); ++i) {
    const std::vector<uint8_t> b = Bytes(values[i]);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  return bytes;
}

// RandomSlices cuts `bytes` into pieces of 1 to 64 bytes, as a transport may deliver them.
ByteChunks RandomSlices(TestRng& rng, const std::vector<uint8_t>& bytes) {
  ByteChunks chunks;
  for (size_t at = 0; at < bytes.size();) {
    const size_t take = std::min<size_t>(rng.Int(1, 64), bytes.size() - at);
    chunks.emplace_back(bytes.data() + at, take);
    at += take;
  }
  return chunks;
}

// SameBits requires every member to hold the same bytes in both engines.
void RequireSameBits(ServerEngine& a, ServerEngine& b, const Members& members) {
  for (const ValueSlice& slice : members.slices) {
    INFO("key " << slice.key.ToString() << " " << DTypeName(slice.dtype));
    auto x = a.Pull(2, {slice});
    auto y = b.Pull(2, {slice});
    REQUIRE(x.ok());
    REQUIRE(y.ok());
    REQUIRE(Bytes((*x)[0]) == Bytes((*y)[0]));
  }
}

const std::vector<DType> kEveryDType(std::begin(kAllDTypes), std::end(kAllDTypes));

TEST_CASE("ServerEngine: every worker's whole-group push makes one group round",
          "[server][groups][group_rounds]") {
  TestRng rng;
  INFO(rng.Describe());
  const int w = GENERATE(2, 3, 4);
  INFO(w << " workers");
  const std::vector<uint64_t> nodes = Workers(w);
  auto by_key = Engine(nodes, MakeSumUpdater());
  auto grouped = Engine(nodes, MakeSumUpdater());
  const Members members(rng, 60, kEveryDType);
  REQUIRE(by_key->Init(2, members.Values(members.initial)).ok());
  REQUIRE(grouped->Init(2, members.Values(members.initial)).ok());
  for (uint64_t node : nodes) {
    REQUIRE(grouped->groups().Register(node, 10 + node, members.slices).ok());
    REQUIRE(grouped->groups().InArena(node, 10 + node));
  }
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : members.initial) expected.push_back(ToDoubles(t));
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    int acks = 0, by_key_acks = 0;
    // The workers' pushes arrive in a random order.
    std::vector<uint64_t> order = nodes;
    std::shuffle(order.begin(), order.end(), rng.engine());
    for (size_t k = 0; k < order.size(); ++k) {
      const uint64_t node = order[k];
      const std::vector<Tensor> pushed = members.Draw(rng);
      for (size_t i = 0; i < pushed.size(); ++i) {
        const auto v = ToDoubles(pushed[i]);
        for (size_t e = 0; e < v.size(); ++e) expected[i][e] += v[e];
      }
      const std::vector<uint8_t> bytes = Pack(pushed);
      const uint64_t request = 100 * round + node;
      by_key->Push(node, request, members.Values(pushed), [&](absl::Status s) {
        REQUIRE(s.ok());
        ++by_key_acks;
      });
      grouped->groups().Push(node, request, 10 + node, RandomSlices(rng, bytes),
                             [&](absl::Status s) {
                               REQUIRE(s.ok());
                               ++acks;
                             });
      if (k == 0) {
        // A retry of the pending push waits with it; a second push in the round is refused.
        grouped->groups().Push(node, request, 10 + node, RandomSlices(rng, bytes),
                               [&](absl::Status s) {
                                 REQUIRE(s.ok());
                                 ++acks;
                               });
        absl::Status twice = absl::UnknownError("not called");
        grouped->groups().Push(node, request + 50, 10 + node, RandomSlices(rng, bytes),
                               [&](absl::Status s) { twice = s; });
        REQUIRE(twice.code() == absl::StatusCode::kFailedPrecondition);
        REQUIRE(twice.message().find("pushed twice") != absl::string_view::npos);
        absl::Status alone = absl::UnknownError("not called");
        grouped->Push(node, request + 60, members.Values(pushed, 5, 6),
                      [&](absl::Status s) { alone = s; });
        REQUIRE(alone.code() == absl::StatusCode::kFailedPrecondition);
        // Neither a pull nor a checkpoint sees a partial round.
        REQUIRE(grouped->state().Snapshot().status().code() ==
                absl::StatusCode::kFailedPrecondition);
      }
      if (k + 1 < order.size()) {
        REQUIRE(acks == 0);
        REQUIRE(grouped->groups().rounds_done() == round);
      }
    }
    REQUIRE(acks == w + 1);
    REQUIRE(by_key_acks == w);
    REQUIRE(grouped->groups().rounds_done() == round + 1);
    // A retry of the applied push is acknowledged and not applied again.
    absl::Status retry = absl::UnknownError("not called");
    grouped->groups().Push(order[0], 100 * round + order[0], 10 + order[0],
                           RandomSlices(rng, Pack(members.Draw(rng))),
                           [&](absl::Status s) { retry = s; });
    REQUIRE(retry.ok());
    RequireSameBits(*by_key, *grouped, members);
    for (size_t i = 0; i < members.slices.size(); ++i) {
      auto pulled = grouped->Pull(3, {members.slices[i]});
      REQUIRE(pulled.ok());
      INFO("key " << members.slices[i].key.ToString() << " " << DTypeName(members.slices[i].dtype));
      const std::vector<double> got = ToDoubles((*pulled)[0]);
      // Floats against the float64 reference; integers are checked
      // bit for bit against the pushes key by key above.
      if (members.slices[i].dtype == DType::kFloat64 ||
          members.slices[i].dtype == DType::kFloat32 ||
          members.slices[i].dtype == DType::kFloat16 ||
          members.slices[i].dtype == DType::kBFloat16) {
        REQUIRE(MaxAbsDiff(got, expected[i]) <=
                testing::Tolerance(members.slices[i].dtype, w + 1, 4.0 * (w * (round + 1) + 1)));
      }
      expected[i] = got;
    }
    REQUIRE(grouped->state().Snapshot().ok());
  }
}

TEST_CASE(
    "ServerEngine: a group round that meets a push of its members on their own goes "
    "member by member",
    "[server][groups][group_rounds]") {
  TestRng rng;
  INFO(rng.Describe());
  const int w = GENERATE(2, 3, 4);
  INFO(w << " workers");
  const std::vector<uint64_t> nodes = Workers(w);
  auto by_key = Engine(nodes, MakeSumUpdater());
  auto grouped = Engine(nodes, MakeSumUpdater());
  const Members members(rng, 50, kEveryDType);
  const size_t n = members.slices.size();
  REQUIRE(by_key->Init(2, members.Values(members.initial)).ok());
  REQUIRE(grouped->Init(2, members.Values(members.initial)).ok());
  // Group 1: every member; group 2: a stretch of them, in the same arena.
  const size_t from = rng.Int(0, n / 2), to = rng.Int(n / 2 + 1, n);
  INFO("stretch [" << from << ", " << to << ")");
  const std::vector<ValueSlice> stretch(members.slices.begin() + from, members.slices.begin() + to);
  for (uint64_t node : nodes) {
    REQUIRE(grouped->groups().Register(node, 1, members.slices).ok());
    REQUIRE(grouped->groups().Register(node, 2, stretch).ok());
    REQUIRE(grouped->groups().InArena(node, 2));
  }
  int64_t whole_rounds = 0;
  for (int round = 0; round < 12; ++round) {
    INFO("round " << round);
    std::vector<uint64_t> order = nodes;
    std::shuffle(order.begin(), order.end(), rng.engine());
    // How each worker pushes: 0 the whole group, 1 key by key, 2 the stretch as a group and the
    // rest key by key. Every other round, every worker pushes the whole group.
    std::vector<int> mode(w, 0);
    if (round % 2 == 1) {
      for (int& m : mode) m = rng.Int(0, 2);
    }
    // A group round when every worker pushes the same group whole: all the whole group, or
    // all the stretch (the rest then goes key by key, outside it).
    whole_rounds += std::all_of(mode.begin(), mode.end(), [](int m) { return m == 0; }) ||
                    std::all_of(mode.begin(), mode.end(), [](int m) { return m == 2; });
    int acks = 0, expected_acks = 0;
    auto ack = [&](absl::Status s) {
      REQUIRE(s.ok());
      ++acks;
    };
    for (size_t k = 0; k < order.size(); ++k) {
      const uint64_t node = order[k];
      INFO("node " << node << " pushes by mode " << mode[k]);
      const std::vector<Tensor> pushed = members.Draw(rng);
      const uint64_t request = 1000 * round + node;
      by_key->Push(node, request, members.Values(pushed), [](absl::Status s) { REQUIRE(s.ok()); });
      const std::vector<uint8_t> all = Pack(pushed);
      const std::vector<uint8_t> part = Pack(pushed, from, to);
      switch (mode[k]) {
        case 0:
          grouped->groups().Push(node, request, 1, RandomSlices(rng, all), ack);
          ++expected_acks;
          break;
        case 1:
          grouped->Push(node, request, members.Values(pushed), ack);
          ++expected_acks;
          break;
        default: {
          std::vector<IncomingValue> rest = members.Values(pushed, 0, from);
          for (IncomingValue& v : members.Values(pushed, to)) rest.push_back(std::move(v));
          grouped->groups().Push(node, request, 2, RandomSlices(rng, part), ack);
          grouped->Push(node, request + 500, rest, ack);
          expected_acks += 2;
        }
      }
      if (k + 1 < order.size()) REQUIRE(acks == 0);
    }
    REQUIRE(acks == expected_acks);
    REQUIRE(grouped->groups().rounds_done() == whole_rounds);
    REQUIRE(grouped->state().Snapshot().ok());
    RequireSameBits(*by_key, *grouped, members);
  }
}

TEST_CASE("ServerEngine: a group round with an updater that is not piecewise",
          "[server][groups][group_rounds]") {
  TestRng rng;
  INFO(rng.Describe());
  const int w = GENERATE(2, 4);
  INFO(w << " workers");
  const std::vector<uint64_t> nodes = Workers(w);
  // stored = stored / 2 + received, a function of the whole value (as a user's updater is).
  auto halve_and_add = [] {
    return MakeFunctionUpdater(
        "halve_and_add", [](const Key&, const Tensor& received, Tensor* stored) {
          if (stored->dtype() == DType::kFloat64) {
            for (int64_t i = 0; i < stored->num_elements(); ++i) {
              stored->data_as<double>()[i] =
                  stored->data_as<double>()[i] / 2 + received.data_as<double>()[i];
            }
          } else {
            for (int64_t i = 0; i < stored->num_elements(); ++i) {
              stored->data_as<float>()[i] =
                  stored->data_as<float>()[i] / 2 + received.data_as<float>()[i];
            }
          }
        });
  };
  auto by_key = Engine(nodes, halve_and_add());
  auto grouped = Engine(nodes, halve_and_add());
  REQUIRE(!grouped->updater_name().empty());
  const Members members(rng, 40, {DType::kFloat64, DType::kFloat32});
  REQUIRE(by_key->Init(2, members.Values(members.initial)).ok());
  REQUIRE(grouped->Init(2, members.Values(members.initial)).ok());
  for (uint64_t node : nodes) REQUIRE(grouped->groups().Register(node, 4, members.slices).ok());
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : members.initial) expected.push_back(ToDoubles(t));
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<double>> sum(expected.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i].assign(expected[i].size(), 0.0);
    int acks = 0;
    for (uint64_t node : nodes) {
      const std::vector<Tensor> pushed = members.Draw(rng);
      for (size_t i = 0; i < pushed.size(); ++i) {
        const auto v = ToDoubles(pushed[i]);
        for (size_t e = 0; e < v.size(); ++e) sum[i][e] += v[e];
      }
      by_key->Push(node, round, members.Values(pushed), [](absl::Status s) { REQUIRE(s.ok()); });
      grouped->groups().Push(node, round, 4, RandomSlices(rng, Pack(pushed)), [&](absl::Status s) {
        REQUIRE(s.ok());
        ++acks;
      });
    }
    REQUIRE(acks == w);
    REQUIRE(grouped->groups().rounds_done() == round + 1);
    RequireSameBits(*by_key, *grouped, members);
    for (size_t i = 0; i < expected.size(); ++i) {
      for (size_t e = 0; e < expected[i].size(); ++e) {
        expected[i][e] = expected[i][e] / 2 + sum[i][e];
      }
      auto pulled = grouped->Pull(2, {members.slices[i]});
      REQUIRE(pulled.ok());
      REQUIRE(MaxAbsDiff(ToDoubles((*pulled)[0]), expected[i]) <=
              testing::Tolerance(members.slices[i].dtype, w + 2, 16.0 * w));
      expected[i] = ToDoubles((*pulled)[0]);
    }
  }
}

TEST_CASE("ServerEngine: a new updater waits for the open group round",
          "[server][groups][group_rounds]") {
  TestRng rng;
  INFO(rng.Describe());
  const std::vector<uint64_t> nodes = Workers(2);
  auto engine = Engine(nodes, MakeSumUpdater());
  const Members members(rng, 20, {DType::kFloat64});
  REQUIRE(engine->Init(2, members.Values(members.initial)).ok());
  for (uint64_t node : nodes) REQUIRE(engine->groups().Register(node, 3, members.slices).ok());
  const std::vector<Tensor> a = members.Draw(rng), b = members.Draw(rng);
  int acks = 0;
  auto ack = [&](absl::Status s) {
    REQUIRE(s.ok());
    ++acks;
  };
  engine->groups().Push(2, 1, 3, RandomSlices(rng, Pack(a)), ack);
  // Mid-round: pulls see the values before the round, the updater waits.
  for (size_t i = 0; i < members.slices.size(); ++i) {
    auto pulled = engine->Pull(2, {members.slices[i]});
    REQUIRE(pulled.ok());
    REQUIRE(Bytes((*pulled)[0]) == Bytes(members.initial[i]));
  }
  engine->SetUpdater(MakeAssignUpdater());
  REQUIRE(engine->updater_name() != "assign");
  engine->groups().Push(3, 1, 3, RandomSlices(rng, Pack(b)), ack);
  REQUIRE(acks == 2);
  REQUIRE(engine->updater_name() == "assign");
  for (size_t i = 0; i < members.slices.size(); ++i) {
    auto pulled = engine->Pull(2, {members.slices[i]});
    REQUIRE(pulled.ok());
    const auto x = ToDoubles(members.initial[i]), y = ToDoubles(a[i]), z = ToDoubles(b[i]);
    std::vector<double> expected(x.size());
    for (size_t e = 0; e < x.size(); ++e) expected[e] = x[e] + (y[e] + z[e]);
    REQUIRE(ToDoubles((*pulled)[0]) == expected);  // float64: the same additions, in order.
  }
}

TEST_CASE("ServerEngine: workers push whole groups from threads of their own",
          "[server][groups][group_rounds]") {
  TestRng rng;
  INFO(rng.Describe());
  // Every push a whole group, or now and then (one push in five) the same values key by key,
  // which splits a group round while other workers' group pushes are on their way.
  const bool mixed = GENERATE(false, true);
  INFO((mixed ? "group and key-by-key pushes" : "group pushes"));
  const int w = 4, rounds = 30;
  const std::vector<uint64_t> nodes = Workers(w);
  auto engine = Engine(nodes, MakeSumUpdater());
  const Members members(rng, 200, {DType::kFloat64, DType::kInt64, DType::kInt32});
  REQUIRE(engine->Init(2, members.Values(members.initial)).ok());
  for (uint64_t node : nodes) REQUIRE(engine->groups().Register(node, 8, members.slices).ok());
  // Every worker's pushes, drawn beforehand (small integers: every sum is exact).
  std::vector<std::vector<std::vector<uint8_t>>> pushes(w);
  std::vector<std::vector<std::vector<Tensor>>> by_key(w);  // Non-empty: pushed key by key.
  int64_t whole_rounds = 0;
  std::vector<std::vector<double>> expected;
  for (const Tensor& t : members.initial) expected.push_back(ToDoubles(t));
  for (int k = 0; k < w; ++k) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<Tensor> values;
      for (size_t i = 0; i < members.initial.size(); ++i) {
        Tensor t = Tensor::Zeros(members.initial[i].dtype(), members.initial[i].shape());
        for (int64_t e = 0; e < t.num_elements(); ++e) {
          const int64_t v = rng.Int(-50, 50);
          switch (t.dtype()) {
            case DType::kFloat64:
              t.data_as<double>()[e] = static_cast<double>(v);
              break;
            case DType::kInt64:
              t.data_as<int64_t>()[e] = v;
              break;
            default:
              t.data_as<int32_t>()[e] = static_cast<int32_t>(v);
          }
          expected[i][e] += static_cast<double>(v);
        }
        values.push_back(std::move(t));
      }
      pushes[k].push_back(Pack(values));
      by_key[k].push_back(mixed && rng.Int(0, 4) == 0 ? std::move(values) : std::vector<Tensor>());
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < w; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < rounds; ++r) {
        std::atomic<bool> acked{false};
        auto ack = [&](absl::Status s) {
          failures += !s.ok();
          acked = true;
        };
        if (by_key[k][r].empty()) {
          ByteChunks bytes = {absl::MakeConstSpan(pushes[k][r])};
          engine->groups().Push(nodes[k], r, 8, bytes, ack);
        } else {
          engine->Push(nodes[k], r, members.Values(by_key[k][r]), ack);
        }
        // Bounded wait for this round's acknowledgement (the other workers' pushes).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!acked && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        if (!acked) {
          ++failures;
          return;
        }
      }
    });
  }
  std::thread reader([&] {
    for (int i = 0; i < 200; ++i) failures += !engine->groups().Pull(2, 8).ok();
  });
  for (auto& t : threads) t.join();
  reader.join();
  REQUIRE(failures == 0);
  for (int r = 0; r < rounds; ++r) {
    bool whole = true;
    for (int k = 0; k < w; ++k) whole = whole && by_key[k][r].empty();
    whole_rounds += whole;
  }
  // A round with a push key by key may still have begun as a group round and then split: the
  // rounds that had none are group rounds.
  REQUIRE(engine->groups().rounds_done() == whole_rounds);
  for (size_t i = 0; i < members.slices.size(); ++i) {
    auto pulled = engine->Pull(2, {members.slices[i]});
    REQUIRE(pulled.ok());
    const std::vector<double> got = ToDoubles((*pulled)[0]);
    INFO("key " << members.slices[i].key.ToString());
    // float64 sums of small integers onto a random start: within rounding of the start.
    REQUIRE(MaxAbsDiff(got, expected[i]) <= 1e-9);
  }
}

}  // namespace
}  // namespace kvstore

namespace kvstore {
namespace {

TEST_CASE("ServerEngine: a cut's round counts the group rounds every worker has joined",
          "[server][groups][group_rounds][cut]") {
  // Workers push whole groups from threads while another thread cuts again and again, as
  // periodic checkpoints do. A group round every worker had joined, still being summed when a
  // cut began, stayed whole and was not counted in the cut's round: it completed one past it,
  // and the cut's Limit failed ("has started round R+1, past the cut's round R").
  TestRng rng;
  INFO(rng.Describe());
  const int w = 3, rounds = 400;
  const std::vector<uint64_t> nodes = Workers(w);
  auto engine = Engine(nodes, MakeSumUpdater());
  const Members members(rng, 64, {DType::kFloat32});
  REQUIRE(engine->Init(2, members.Values(members.initial)).ok());
  for (uint64_t node : nodes) REQUIRE(engine->groups().Register(node, 8, members.slices).ok());
  const std::vector<uint8_t> push = Pack(members.Draw(rng));
  std::atomic<int> failures{0}, cuts{0};
  std::atomic<bool> pushing{true};
  std::vector<std::string> refused;
  std::thread cutter([&] {
    while (pushing) {
      absl::StatusOr<int64_t> round = engine->cuts().Begin();
      if (!round.ok()) continue;
      const absl::Status limited = engine->cuts().Limit(*round);
      if (!limited.ok() && refused.size() < 3) refused.push_back(limited.ToString());
      failures += !limited.ok();
      ++cuts;
      engine->cuts().End();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int k = 0; k < w; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < rounds; ++r) {
        std::atomic<bool> acked{false};
        ByteChunks bytes = {absl::MakeConstSpan(push)};
        engine->groups().Push(nodes[k], r + 1, 8, bytes, [&](absl::Status s) {
          failures += !s.ok();
          acked = true;
        });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!acked && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        if (!acked) {
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  pushing = false;
  cutter.join();
  INFO(cuts.load() << " cuts; refused: " << (refused.empty() ? "none" : refused[0]));
  REQUIRE(failures == 0);
  REQUIRE(cuts > 0);
}

}  // namespace
}  // namespace kvstore
