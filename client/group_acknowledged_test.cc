// The pushes a server acknowledged, as a worker counts them for DATA_LOSS messages
// (KeyTable::AcknowledgedRound): per key for pushes of single keys, per group for key groups
// (GroupPlan::acknowledged_pushes), added to the members when the group goes.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "client/group_cache.h"
#include "client/group_plan.h"
#include "client/key_table.h"
#include "common/partitioner.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

TEST_CASE("Acknowledged pushes: keys counted one by one and through their groups") {
  testing::TestRng rng;
  INFO(rng.Describe());
  KeyTable table(Partitioner::Create(2).value(), kDefaultChunkBytes);
  std::vector<Key> keys;
  std::vector<Tensor> values;
  for (int k = 0; k < 200; ++k) {
    keys.emplace_back(int64_t{k});
    values.push_back(rng.RandomTensor(DType::kFloat32, {4}));
  }
  auto work = table.PlanInit(keys, values);
  REQUIRE(work.ok());
  table.Record(&*work);
  const std::vector<const KeyInfo*> infos = table.InfosOf(keys);
  REQUIRE(infos.size() == keys.size());
  // The reference: each key's acknowledged pushes, counted one by one.
  std::vector<int64_t> reference(keys.size(), 0);
  auto expected = [&](int server) {
    int64_t most = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (infos[i]->slices.front().server == server) most = std::max(most, reference[i]);
    }
    return most;
  };
  auto counted = [&](GroupCache& cache, int server) {
    absl::flat_hash_map<const KeyInfo*, int64_t> extra;
    cache.AddAcknowledged(&extra);
    return table.AcknowledgedRound(server, extra);
  };
  GroupCache cache(2);
  // Groups of random stretches of the keys, acknowledged a random number of times, and single
  // keys acknowledged alone.
  for (int round = 0; round < 30; ++round) {
    const size_t begin = static_cast<size_t>(rng.Int(0, 100));
    const size_t end = begin + static_cast<size_t>(rng.Int(64, 99));
    const std::vector<Key> list(keys.begin() + begin, keys.begin() + end);
    std::shared_ptr<GroupPlan> group = cache.For(list, table);
    REQUIRE(group != nullptr);
    const int64_t times = rng.Int(0, 3);
    group->acknowledged_pushes.fetch_add(times);
    for (size_t i = begin; i < end; ++i) reference[i] += times;
    const size_t single = static_cast<size_t>(rng.Int(0, 199));
    infos[single]->acknowledged_pushes.fetch_add(1);
    ++reference[single];
    for (int server = 0; server < 2; ++server) REQUIRE(counted(cache, server) == expected(server));
  }
  // A group no longer remembered, once its last holder lets it go, adds its count to its
  // members: nothing is lost.
  {
    auto plan = MakeGroupPlan(std::vector<Key>(keys.begin(), keys.begin() + 70),
                              std::vector<const KeyInfo*>(infos.begin(), infos.begin() + 70), 2);
    REQUIRE(plan != nullptr);
    plan->acknowledged_pushes.fetch_add(5);
    for (size_t i = 0; i < 70; ++i) reference[i] += 5;
  }
  for (int server = 0; server < 2; ++server) REQUIRE(counted(cache, server) == expected(server));
}

}  // namespace
}  // namespace kvstore
