#include "server/core/cut_gate.h"

#include <utility>

namespace kvstore {

absl::Status CutGate::Begin() {
  if (active()) {
    return absl::FailedPreconditionError(
        "a checkpoint is already being cut on this server; one at a time");
  }
  phase_ = Phase::kFrozen;
  return absl::OkStatus();
}

std::vector<CutGate::Held> CutGate::Limit(int64_t round, absl::Time now, bool release_held) {
  phase_ = Phase::kLimited;
  round_ = round;
  limited_at_ = now;
  std::vector<Held> release;
  if (release_held) release.swap(held_);
  return release;
}

bool CutGate::Holds(bool joins_open_round, int64_t rounds_done) const {
  if (phase_ == Phase::kNone || joins_open_round) return false;
  return phase_ == Phase::kFrozen || rounds_done >= round_;
}

bool CutGate::CatchingUp(absl::Time now, absl::Duration grace) const {
  return now - limited_at_ < grace;
}

std::vector<CutGate::Held> CutGate::End() {
  phase_ = Phase::kNone;
  std::vector<Held> release;
  release.swap(held_);
  return release;
}

}  // namespace kvstore
