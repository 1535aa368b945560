// TableEngine: a kvserver's tables (docs/tables.md) - for each table key, the rows of the ids
// this server holds (common/table_wire.h's placement), in an EmbeddingTable
// (common/store/embedding_table.h), with what a distributed job adds:
// - Init: every worker sends every server the table's spec; the first makes the table, later
//   ones must name the same spec (AlreadyExists naming the key otherwise).
// - dist_sync rounds: a table's round completes once every worker of the job (those that left
//   an elastic job aside) has pushed to it; the round's pushes are concatenated in worker rank
//   order - so every copy of a shard sums them alike - and applied as one push (duplicate ids
//   summed, each id counted once for admission), then the rows unseen for evict_unseen_rounds
//   are evicted, and only then are the round's pushes acknowledged. A worker's pushes beyond
//   the open round wait, in order, for the rounds after it. dist_async applies each push as
//   it arrives, each one a round of the table.
// - request ids: a push retried with the same (node id, request id) is applied once - a retry
//   of a push still waiting for its round waits with it, one of an applied push is
//   acknowledged.
// - limits: a row wider than kMaxTableDim, or a pull whose rows would exceed
//   `max_value_bytes`, is refused; so is a push whose new rows would take the server's held
//   bytes (the dense values' and the tables') over `memory_budget_bytes` (ResourceExhausted
//   naming the key, the bytes and the limit; nothing changes).
// - senders: only the job's workers (and the scheduler) may send (JobWorkers::CheckSender).
//
// Threading: thread-safe. A push's `done` runs on the thread whose push completes the round
// (at once in dist_async, or for an error), after the locks are released.
#ifndef KVSTORE_SERVER_CORE_TABLE_ENGINE_H_
#define KVSTORE_SERVER_CORE_TABLE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/key.h"
#include "common/store/embedding_table.h"
#include "common/table_wire.h"
#include "common/tensor.h"
#include "proto/kvstore.pb.h"
#include "server/core/job_workers.h"
#include "server/core/recent_request_ids.h"
#include "server/core/view_floor.h"

namespace kvstore {

// The widest row a table may have, in elements (a block of EmbeddingTable::kRowsPerBlock rows
// with adam's state is then 192 MiB).
inline constexpr int64_t kMaxTableDim = 16384;

struct TableEngineOptions {
  bool sync = true;
  // The largest pull reply, in bytes.
  int64_t max_value_bytes = int64_t{4} << 30;
  // The most bytes the server may hold: `held_elsewhere` (the dense values') plus the tables'.
  int64_t memory_budget_bytes = std::numeric_limits<int64_t>::max();
  size_t dedup_window = 4096;
};

// TableInfo: one table as metrics and `kvctl status` show it.
struct TableInfo {
  Key key{int64_t{0}};
  int64_t dim = 0;
  int64_t round = 0;  // Updates applied.
  TableStats stats;
};

class TableEngine {
 public:
  using Done = std::function<void(absl::Status)>;

  // `workers` must outlive the engine; `held_elsewhere` returns the bytes the server holds
  // besides its tables (may be null: none); `floor` (may be null) is the server's view floor,
  // which a push is checked against under its table's lock (see FailRounds).
  TableEngine(TableEngineOptions options, const JobWorkers* workers,
              std::function<int64_t()> held_elsewhere, const ViewFloor* floor = nullptr);
  ~TableEngine();
  TableEngine(const TableEngine&) = delete;
  TableEngine& operator=(const TableEngine&) = delete;

  // Init makes table `key` from `spec` (TableConfigFromProto's checks), or checks that it
  // exists with that spec. Errors name the key.
  absl::Status Init(uint64_t node_id, const Key& key, const proto::TableSpec& spec);

  // Push applies `grads` (ids.size() x dim, row-major) to the rows of `ids` as the file comment
  // says; `done` runs once. InvalidArgument for grads of another size, NotFound for a key that
  // is no table, PermissionDenied for a sender that is not a worker - each at once, nothing
  // queued.
  // `view_epoch`: the view the sender routed the push by; one the view floor refuses is
  // answered with its StaleViewError (checked under the table's lock, so that a push is
  // either in a Snapshot taken after the floor rose, or refused).
  void Push(uint64_t node_id, uint64_t request_id, const Key& key, std::vector<int64_t> ids,
            std::vector<float> grads, Done done, uint64_t view_epoch = 0);

  // Pull returns the rows of `ids` (any order, duplicates allowed) as ids.size() x dim
  // float32 values. Errors as Push's, and ResourceExhausted for a reply over max_value_bytes.
  absl::StatusOr<Tensor> Pull(uint64_t node_id, const Key& key, absl::Span<const int64_t> ids);

  // DropWorkers stops waiting for the workers JobWorkers has dropped (they left an elastic
  // job): their waiting pushes are refused, and rounds that waited only for them complete.
  // Call after JobWorkers::MarkDropped. Returns the rounds completed.
  int64_t DropWorkers();
  // FailRounds answers every push still waiting for a round with `status`: the job failed, or
  // a copy of the shard is taken for a replacement server once the view floor has risen (the
  // senders send them again to both copies).
  void FailRounds(const absl::Status& status);

  // Snapshot returns every table, in key order, as TableCheckpoint pieces of at most
  // `piece_bytes` of rows each (TablePieces; a table's rows as of one moment: its lock is
  // held); pushes waiting for a dist_sync round are not in it.
  std::vector<proto::TableCheckpoint> Snapshot(size_t piece_bytes = kTablePieceBytes) const;
  // Restore makes the tables of `pieces` (a Snapshot's), the engine holding none yet.
  // DataLoss naming the key for pieces that do not fit together; the checks of Init for a
  // spec that is no longer accepted.
  absl::Status Restore(const google::protobuf::RepeatedPtrField<proto::TableCheckpoint>& pieces);
  // Applied / LoadApplied: the request ids of the table pushes applied (a copy carries them).
  std::vector<AppliedRequests> Applied() const { return applied_.Export(); }
  void LoadApplied(absl::Span<const AppliedRequests> applied) { applied_.Load(applied); }

  // Tables returns every table's figures, in key order.
  std::vector<TableInfo> Tables() const;
  // bytes returns what the tables hold (TableStats::bytes, summed).
  int64_t bytes() const;

 private:
  struct Waiting {
    uint64_t request_id = 0;
    std::vector<int64_t> ids;
    std::vector<float> grads;
    std::vector<Done> dones;  // The push's, and its retries'.
  };
  struct Table {
    proto::TableSpec spec;
    std::unique_ptr<EmbeddingTable> rows;
    absl::Mutex mu;  // Guards the rest: the round and the pushes waiting for it.
    int64_t round = 0;
    absl::flat_hash_map<uint64_t, std::deque<Waiting>> waiting;
  };
  // A completed round's answers, run after the locks are released.
  using Answers = std::vector<std::pair<Done, absl::Status>>;

  absl::StatusOr<Table*> Find(const Key& key, absl::string_view what) const;
  // AllTables returns every table, in key order (tables are never removed: the pointers stay
  // valid); taken under mu_, which is then released.
  std::vector<std::pair<Key, Table*>> AllTables() const;
  // Apply applies one update of `table` (round `round`), checking the memory budget first.
  absl::Status Apply(Table* table, const Key& key, absl::Span<const int64_t> ids,
                     absl::Span<const float> grads, int64_t round);
  // CompleteRounds applies every round of `table` whose pushes are all there.
  int64_t CompleteRounds(Table* table, const Key& key, Answers* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table->mu);

  const TableEngineOptions options_;
  const JobWorkers* const workers_;
  const std::function<int64_t()> held_elsewhere_;
  const ViewFloor* const floor_;
  RecentRequestIds applied_;
  mutable absl::Mutex mu_;
  // Tables are never removed: a Table* stays valid for the engine's life.
  absl::flat_hash_map<Key, std::unique_ptr<Table>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_TABLE_ENGINE_H_
