// EngineState: what a checkpoint or a copy of a kvserver's engine takes from it and restores
// into it (a part of ServerEngine, server_engine.h): the stored parts with the rounds their
// chunks completed, the updater's state, and the request ids applied per node.
//
// Threading: thread-safe; it takes the engine's lock itself.
#ifndef KVSTORE_SERVER_CORE_ENGINE_STATE_H_
#define KVSTORE_SERVER_CORE_ENGINE_STATE_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/store/updater.h"
#include "server/core/recent_request_ids.h"
#include "server/core/server_engine.h"

namespace kvstore {

class EngineState {
 public:
  explicit EngineState(ServerEngine* engine) : engine_(*engine) {}

  // Snapshot copies every stored part and the updater's state. FailedPrecondition while a
  // dist_sync round is open (a checkpoint is taken between rounds); the engine's lock is held
  // meanwhile, so no round starts. In dist_async, pushes arriving during the snapshot may be
  // in it or not: checkpoint when the workers are quiet.
  absl::StatusOr<EngineSnapshot> Snapshot() const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Describe is Snapshot without the values' bytes (every part's `data` is undefined): the
  // layouts, their chunks' rounds and the updater's state, for a copy whose bytes are read
  // from the engine afterwards (ReadStretch; server/core/shard_stream.h). Same errors.
  absl::StatusOr<EngineSnapshot> Describe() const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // ReadStretch copies the elements [begin, end) (whole-value element indices) of the part
  // stored as `layout` into `out`, each chunk under its lock. FailedPrecondition naming the key
  // when no part is stored as `layout` any more (dropped or initialised again since it was
  // described); InvalidArgument when [begin, end) is not within it. Blocks only on the locks.
  absl::Status ReadStretch(const ValueSlice& layout, int64_t begin, int64_t end, void* out) const
      ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Restore stores `parts` before the server serves (kvserver --restore). A later Init of a
  // restored key with the same dtype, shape and slice succeeds and keeps the restored value.
  absl::Status Restore(absl::Span<const StoredPart> parts);
  // InitUnset is ServerEngine::Init of `values` without bytes (deferred, as the scheduler),
  // their chunks not zeroed: for a copy streamed in, every byte filled (InitFill) before
  // the parts are marked restored and any is read. Init's errors.
  absl::Status InitUnset(absl::Span<const IncomingValue> values);
  // MarkRestored marks parts already stored - by Restore, or by a deferred Init whose bytes
  // were filled in (InitFill) - as Restore does: restored (a later matching Init keeps them),
  // their chunks at the rounds `parts` give (when one per chunk), and no longer waiting for
  // bytes. `parts`' data is not read. NotFound naming the key for a part not stored.
  absl::Status MarkRestored(absl::Span<const StoredPart> parts) ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // DropUnrestored removes the parts of `keys` not marked restored (made for a copy that was
  // abandoned before it was complete, into a server that serves no worker yet: no request
  // holds them), releasing what they held of the memory budget. Returns how many it removed.
  size_t DropUnrestored(absl::Span<const Key> keys) ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // SetRoundsDone records that every chunk stored now has completed `round` rounds (a
  // checkpoint cut at that round was restored), so that later cuts count on from there.
  void SetRoundsDone(int64_t round) ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Applied / LoadApplied: the request ids applied per node (deduplication), for a copy of the
  // engine that must not apply them again.
  std::vector<AppliedRequests> Applied() const;
  void LoadApplied(absl::Span<const AppliedRequests> applied);
  // SaveUpdaterState / LoadUpdaterState: the updater's state, for SaveOptimizerStates. Load
  // keeps the parts of the keys this server holds and refuses, changing nothing, a part of a
  // held key whose element range is not one of its chunks (InvalidArgument naming the key).
  absl::StatusOr<UpdaterStateData> SaveUpdaterState() const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  absl::Status LoadUpdaterState(const UpdaterStateData& state) ABSL_LOCKS_EXCLUDED(engine_.mu_);

 private:
  absl::StatusOr<EngineSnapshot> Take(bool with_data) const ABSL_LOCKS_EXCLUDED(engine_.mu_);

  ServerEngine& engine_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_ENGINE_STATE_H_
