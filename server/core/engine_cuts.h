// EngineCuts: a kvserver engine's part of consistent cuts (a part of ServerEngine,
// server_engine.h; the whole protocol: server/core/checkpoint_set.h, docs/reliability.md).
//
// A checkpoint of the whole job holds every key of every server at one dist_sync round R. The
// scheduler drives the servers through Begin, Limit, Lagging and End:
// - Begin freezes: from then on no push may open a new round on any chunk (such pushes are
//   held, their bytes copied, and applied when the cut ends; pushes joining an open round go
//   on). It returns the highest round any chunk has started (completed, or open; in dist_sync
//   with one worker a round is that worker's push). In dist_async, which has no rounds, every
//   push is held until End and the cut is that point in time.
// - Limit lets chunks below round R go on up to it and holds every push that would start a
//   later one.
// - Lagging says whether a snapshot now is the cut.
// - End releases every held push (applied in arrival order) and ends the cut.
//
// Threading: thread-safe. Its state is guarded by the engine's lock, which it takes itself; the
// engine and KeyGroups call its hooks (Holds, Hold, HoldGroup, TakeHeld, active_locked) with
// that lock held.
#ifndef KVSTORE_SERVER_CORE_ENGINE_CUTS_H_
#define KVSTORE_SERVER_CORE_ENGINE_CUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/core/cut_gate.h"
#include "server/core/engine_values.h"
#include "server/core/server_engine.h"

namespace kvstore {

class EngineCuts {
 public:
  using Done = engine::Done;

  // How long a chunk behind the cut's round with no round open may catch up (Lagging).
  static constexpr absl::Duration kCatchUp = absl::Seconds(2);

  explicit EngineCuts(ServerEngine* engine) : engine_(*engine) {}

  // Begin: FailedPrecondition when a cut is already under way.
  absl::StatusOr<int64_t> Begin() ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Limit: FailedPrecondition without Begin or when a chunk is already past `round`.
  absl::Status Limit(int64_t round) ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Lagging returns "" when no round is open, no push is being applied, and every chunk that
  // has started a round has completed exactly the cut's round: a Snapshot now is the cut.
  // Otherwise it names one key still behind, and its round. A chunk behind the cut's round with
  // no round open counts as behind for kCatchUp after Limit only: a key pushed less often than
  // the others (or no more) is then cut at the round it last completed.
  std::string Lagging() const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // End releases every held push and ends the cut; with a `refusal`, the held pushes are
  // answered with it instead, unapplied (a copy of the engine was taken at the cut: their
  // senders send them again to every copy).
  void End(absl::Status refusal = absl::OkStatus()) ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // active is true between Begin and End.
  bool active() const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // MaxRoundStarted returns what Begin would, without freezing anything.
  int64_t MaxRoundStarted() const ABSL_LOCKS_EXCLUDED(engine_.mu_);

  // Hooks, called with the engine's lock held (not analysed across the classes: each asserts
  // the lock). Holds: a push of `chunks` must wait for the cut under way. Hold / HoldGroup keep
  // a copy of a push (the engine's, a key group's) for when the cut lets it go on. TakeHeld
  // ends the cut and returns the pushes it held, to be run after the lock is released (the job
  // failed: they fail at once then). active_locked: active, under the lock.
  bool Holds(absl::Span<engine::Chunk* const> chunks) const;
  void Hold(uint64_t node_id, uint64_t request_id, absl::Span<const IncomingValue> values,
            Done done);
  void HoldGroup(uint64_t node_id, uint64_t request_id, uint64_t group_id, const ByteChunks& bytes,
                 Done done, GroupAck ack);
  std::vector<CutGate::Held> TakeHeld();
  bool active_locked() const;

 private:
  int64_t MaxRoundStartedLocked() const ABSL_SHARED_LOCKS_REQUIRED(engine_.mu_);

  ServerEngine& engine_;
  // The cut under way and the pushes it holds.
  CutGate gate_ ABSL_GUARDED_BY(engine_.mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_ENGINE_CUTS_H_
