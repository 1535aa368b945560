#include "tests/integration/table_scenario.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/table_wire.h"
#include "tests/table_reference.h"

namespace kvstore::testing {
namespace {

TableConfig ScenarioConfig(uint64_t seed, bool sync) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  TableConfig c;
  c.dim = pick(1, 8);
  c.initializer.kind = static_cast<RowInitializer::Kind>(pick(0, 2));
  c.initializer.a = c.initializer.kind == RowInitializer::Kind::kUniform ? -0.5 : 0.1;
  c.initializer.b = 0.5;
  c.initializer.seed = rng();
  c.optimizer.kind = sync ? static_cast<RowOptimizer::Kind>(pick(0, 2)) : RowOptimizer::Kind::kSgd;
  c.optimizer.lr = 0.05 * static_cast<double>(pick(1, 4));
  c.optimizer.wd = sync && pick(0, 1) == 1 ? 0.01 : 0.0;
  c.optimizer.epsilon = c.optimizer.kind == RowOptimizer::Kind::kAdagrad ? 1e-7 : 1e-8;
  c.admit_after = sync ? pick(1, 3) : 1;
  c.evict_unseen_rounds = sync && pick(0, 1) == 1 ? pick(1, 4) : 0;
  return c;
}

// One worker's push of a round: ids (repeats included) and gradients of small multiples of 1/4.
struct Push {
  std::vector<int64_t> ids;
  std::vector<float> grads;
};

Push DrawPush(uint64_t seed, int round, int rank, int64_t dim, const Zipf& zipf) {
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ULL * (round + 1)) ^
                      (0xc2b2ae3d27d4eb4fULL * (rank + 1)));
  Push push;
  const int64_t n = std::uniform_int_distribution<int64_t>(0, 40)(rng);
  for (int64_t i = 0; i < n; ++i) push.ids.push_back(zipf.Draw(rng));
  for (int64_t i = 0; i < n * dim; ++i) {
    push.grads.push_back(static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(rng)) / 4);
  }
  return push;
}

// Compare pulls `ids` and checks every row against `references` (one per server).
absl::Status Compare(KVStore& kv, const Key& key, const std::vector<int64_t>& ids, int64_t dim,
                     std::vector<TableReference>& references, int round, int64_t* compared) {
  Tensor out = Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(ids.size()), dim});
  RETURN_IF_ERROR(kv.PullRows(key, ids, &out));
  const int num_servers = static_cast<int>(references.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const std::vector<double> want = references[TableServerOf(ids[r], num_servers)].Pull(ids[r]);
    for (int64_t j = 0; j < dim; ++j) {
      const double got = out.data_as<float>()[r * dim + j];
      if (!(std::abs(got - want[j]) <= 2e-5 + 2e-4 * std::abs(want[j]))) {
        return absl::InternalError(absl::StrCat("round ", round, ": id ", ids[r], " element ", j,
                                                " is ", got, ", the reference says ", want[j]));
      }
    }
    ++*compared;
  }
  return absl::OkStatus();
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

}  // namespace

absl::Status TableScenario(KVStore& kv, const std::string& mode, uint64_t seed, int first, int last,
                           int num_servers, int checkpoint_round, const std::string& checkpoint_dir,
                           absl::Duration pause) {
  const bool sync = mode != "dist_async";
  const TableConfig config = ScenarioConfig(seed, sync);
  const Key key("embedding");
  const int64_t dim = config.dim;
  std::printf(
      "tables: seed %llu, %s, dim %lld, optimizer %d, admit_after %lld, "
      "evict_unseen_rounds %lld, %d servers\n",
      static_cast<unsigned long long>(seed), mode.c_str(), static_cast<long long>(dim),
      static_cast<int>(config.optimizer.kind), static_cast<long long>(config.admit_after),
      static_cast<long long>(config.evict_unseen_rounds), num_servers);
  std::fflush(stdout);
  // Bad calls first: refused at once, naming the key.
  Tensor rows = Tensor::Zeros(DType::kFloat32, {1, dim});
  absl::Status status = kv.PullRows(key, {1}, &rows);
  RETURN_IF_ERROR(
      Expect(absl::IsNotFound(status) && absl::StrContains(status.message(), "embedding"),
             absl::StrCat("a pull before InitTable: ", status.ToString())));
  RETURN_IF_ERROR(kv.InitTable(key, config));
  status = kv.InitTable(key, config);
  RETURN_IF_ERROR(Expect(absl::IsAlreadyExists(status),
                         absl::StrCat("a second InitTable: ", status.ToString())));
  Tensor wide = Tensor::Zeros(DType::kFloat32, {1, dim + 1});
  status = kv.PushRows(key, {1}, wide);
  RETURN_IF_ERROR(
      Expect(absl::IsInvalidArgument(status) && absl::StrContains(status.message(), "embedding"),
             absl::StrCat("rows of the wrong width: ", status.ToString())));

  // The reference: one table per server, fed as the servers are.
  std::unique_ptr<EmbeddingTable> initial = EmbeddingTable::Create(config).value();
  std::vector<TableReference> references;
  for (int s = 0; s < num_servers; ++s) references.emplace_back(*initial);
  const Zipf zipf(1000, 1.05);
  const int workers = kv.num_workers();
  std::set<int64_t> pushed;
  int64_t compared = 0;
  std::mt19937_64 probes(seed + 77 + kv.rank());
  for (int round = 1; round <= last; ++round) {
    std::vector<Push> pushes;
    for (int w = 0; w < workers; ++w) pushes.push_back(DrawPush(seed, round, w, dim, zipf));
    const Push& mine = pushes[kv.rank()];
    Tensor grads = Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(mine.ids.size()), dim});
    std::copy(mine.grads.begin(), mine.grads.end(), grads.data_as<float>());
    // Rounds before `first` are in the restored servers already: the reference replays them.
    if (round >= first) RETURN_IF_ERROR(kv.PushRows(key, mine.ids, grads));
    // Each server applies the round's pushes of its ids, in worker rank order (dist_async: one
    // push at a time, in an order that does not matter for this table).
    std::vector<int64_t> probe;
    for (int s = 0; s < num_servers; ++s) {
      std::vector<int64_t> ids;
      std::vector<float> g;
      for (int w = 0; w < workers; ++w) {
        const Push& p = pushes[w];
        for (size_t r = 0; r < p.ids.size(); ++r) {
          if (TableServerOf(p.ids[r], num_servers) != s) continue;
          ids.push_back(p.ids[r]);
          g.insert(g.end(), p.grads.begin() + r * dim, p.grads.begin() + (r + 1) * dim);
        }
      }
      RETURN_IF_ERROR(Expect(references[s].Push(ids, g, round), "the reference refused a push"));
      references[s].EvictUnseen(round);
    }
    for (const Push& p : pushes) {
      probe.insert(probe.end(), p.ids.begin(), p.ids.end());
      pushed.insert(p.ids.begin(), p.ids.end());
    }
    for (int i = 0; i < 8; ++i) probe.push_back(zipf.Draw(probes));
    if (round < first) continue;
    absl::SleepFor(pause);
    if (sync) {
      RETURN_IF_ERROR(Compare(kv, key, probe, dim, references, round, &compared));
      std::printf("tables: round %d ok\n", round);
      std::fflush(stdout);
    }
    if (round == checkpoint_round) {
      RETURN_IF_ERROR(kv.Barrier());
      if (kv.rank() == 0) RETURN_IF_ERROR(kv.Checkpoint(checkpoint_dir));
      RETURN_IF_ERROR(kv.Barrier());
      std::printf("CHECKPOINTED\n");
      std::fflush(stdout);
    }
  }
  if (!sync) {
    RETURN_IF_ERROR(kv.Barrier());  // Every worker's pushes are applied.
    std::vector<int64_t> all(pushed.begin(), pushed.end());
    for (int i = 0; i < 8; ++i) all.push_back(zipf.Draw(probes));
    RETURN_IF_ERROR(Compare(kv, key, all, dim, references, last, &compared));
  }
  size_t held = 0;
  for (const TableReference& reference : references) held += reference.Ids().size();
  std::printf("tables: %d rounds checked, %lld rows compared; the reference holds %zu rows\n",
              last - first + 1, static_cast<long long>(compared), held);
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace kvstore::testing
