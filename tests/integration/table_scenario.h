// The "tables" scenario of test_worker (docs/tables.md): every worker of a job makes one table
// and trains it for some rounds over ids drawn from a Zipf distribution, checking what it pulls
// against a float64 reference of every server's rows (tests/table_reference.h) that it computes
// from every worker's pushes - each worker draws every worker's ids and gradients from the
// seed, the round and the rank.
//
// dist_sync: a random table (row width, initializer, row optimizer, admission, eviction of
// rows unseen for some rounds); after each round's push the worker pulls that round's ids of
// every worker and some others, and each row must be the reference's - the round's pushes
// summed over the workers per server in rank order, as the servers apply them.
// dist_async: an sgd table without weight decay, admission or eviction - whose rows do not
// depend on the order the pushes arrive in; after the last round and a barrier every id ever
// pushed, and others, must be the reference's.
// Bad calls are refused first, naming the key: rows of the wrong shape, a key that is no table.
#ifndef KVSTORE_TESTS_INTEGRATION_TABLE_SCENARIO_H_
#define KVSTORE_TESTS_INTEGRATION_TABLE_SCENARIO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/kvstore.h"

namespace kvstore::testing {

// TableScenario runs the scenario on `kv` (`mode`: dist_sync or dist_async) over rounds
// `first`..`last` of a job of `num_servers` servers (first > 1: the servers restored a
// checkpoint cut after round first - 1, which the reference replays); prints "tables: round R
// ok" after each checked round and "tables: N rounds checked, M rows compared" at the end.
// `checkpoint_round` > 0: after that round every worker waits for the others, rank 0 makes the
// servers checkpoint into `checkpoint_dir`, and "CHECKPOINTED" is printed. `pause` is slept
// between rounds.
absl::Status TableScenario(KVStore& kv, const std::string& mode, uint64_t seed, int first, int last,
                           int num_servers, int checkpoint_round = 0,
                           const std::string& checkpoint_dir = "",
                           absl::Duration pause = absl::ZeroDuration());

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_INTEGRATION_TABLE_SCENARIO_H_
