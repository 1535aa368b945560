// CutGate: where one engine stands in a consistent cut of the whole job (server/core/
// checkpoint_set.h, docs/reliability.md) - no cut, frozen (BeginCut: no push may open a round),
// or limited to a round (LimitCut: rounds below it go on) - and the pushes it holds meanwhile,
// to run again when it lets them go on.
//
// Threading: not thread-safe. The engine calls it under its own lock, because whether a push is
// held depends on the chunks' rounds read under that lock in the same step.
#ifndef KVSTORE_SERVER_CORE_CUT_GATE_H_
#define KVSTORE_SERVER_CORE_CUT_GATE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvstore {

class CutGate {
 public:
  // A held push: run with OK to apply it, or with a refusal to answer it unapplied.
  using Held = std::function<void(absl::Status)>;
  enum class Phase { kNone, kFrozen, kLimited };

  Phase phase() const { return phase_; }
  bool active() const { return phase_ != Phase::kNone; }
  // The cut's round (LimitCut's), meaningful in kLimited.
  int64_t round() const { return round_; }

  // Begin freezes; FailedPrecondition when a cut is already under way.
  absl::Status Begin();
  // Limit sets the cut's round at `now` (active() must be true: the engine checks it with the
  // chunks) and returns the held pushes to run again when `release_held` (dist_sync: those
  // below the cut go on; dist_async keeps every push held until End).
  std::vector<Held> Limit(int64_t round, absl::Time now, bool release_held);
  // Holds is true when a dist_sync push of a chunk must wait: it would open a round
  // (`joins_open_round` false) while frozen, or one past the cut's round (the chunk has
  // completed `rounds_done`). False without a cut.
  bool Holds(bool joins_open_round, int64_t rounds_done) const;
  // CatchingUp is true within `grace` after Limit: a chunk behind the cut's round may still
  // reach it.
  bool CatchingUp(absl::Time now, absl::Duration grace) const;
  // Hold keeps a push until the cut lets it go on.
  void Hold(Held push) { held_.push_back(std::move(push)); }
  // End ends the cut and returns the held pushes, in arrival order.
  std::vector<Held> End();

 private:
  Phase phase_ = Phase::kNone;
  int64_t round_ = 0;
  absl::Time limited_at_;
  std::vector<Held> held_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CUT_GATE_H_
