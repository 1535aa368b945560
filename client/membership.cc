#include "client/membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/named_thread.h"

namespace kvstore {

absl::StatusOr<std::unique_ptr<Membership>> Membership::Join(std::unique_ptr<SchedulerLink> link,
                                                             const std::string& mode,
                                                             const MembershipOptions& options) {
  std::unique_ptr<Membership> member(new Membership(std::move(link), options));
  absl::StatusOr<JobView> view =
      member->link_->Register(mode, options.requested_rank, absl::Now() + options.register_timeout);
  if (!view.ok()) return member->Named(view.status(), "joining the job through");
  member->view_ = *std::move(view);
  member->view_.heartbeat_interval =
      std::max(absl::Milliseconds(10), member->view_.heartbeat_interval);
  if (member->view_.servers.empty()) {
    return absl::InternalError("the cluster view lists no servers");
  }
  member->heartbeat_ = NamedThread("kv-heartbeat", [m = member.get()] { m->HeartbeatLoop(); });
  return member;
}

Membership::~Membership() { Leave(); }

absl::Status Membership::WhileSchedulerAway(const std::string& what, absl::Time deadline,
                                            const std::function<absl::Status()>& call) const {
  absl::Duration backoff = absl::Milliseconds(100);
  std::optional<absl::Time> give_up;  // From the first failure.
  for (;;) {
    absl::Status status = call();
    if (!absl::IsUnavailable(status)) return status;
    // A scheduler that said the job is over is not away but gone for good: nothing to wait for.
    if (job_over_) {
      return absl::CancelledError(
          absl::StrCat("the job run by ", link_->name(), " is over (", status.message(), ")"));
    }
    if (!give_up.has_value()) {
      give_up = std::min(deadline, absl::Now() + options_.scheduler_lost_timeout);
      SdkLogger()->warn(
          "worker {}: {} {} failed ({}); retrying while the scheduler is away, "
          "for up to {}",
          view_.rank, what, link_->name(), std::string(status.message()),
          absl::FormatDuration(absl::Trunc(*give_up - absl::Now(), absl::Milliseconds(100))));
    }
    if (absl::Now() + backoff > *give_up) return status;
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(250));
  }
}

absl::Status Membership::Named(const absl::Status& status, const std::string& what) const {
  return absl::Status(status.code(),
                      absl::StrCat(what, " ", link_->name(), ": ", status.message()));
}

bool Membership::FailsWorker(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kCancelled:
      return false;
    default:
      return true;
  }
}

void Membership::set_acknowledged_round(AcknowledgedRound acknowledged, bool exact) {
  acknowledged_ = std::move(acknowledged);
  exact_rounds_ = exact;
}

void Membership::NoteLocked(const absl::Status& status) {
  if (failure_.ok() && FailsWorker(status)) failure_ = status;
}

std::string Membership::DataLossLocked() const {
  std::vector<std::string> lines;
  for (const LostUpdates& loss : data_loss_) {
    const int64_t acknowledged = acknowledged_ ? acknowledged_(loss.rank) : 0;
    lines.push_back(Describe(loss, acknowledged, acknowledged_ && exact_rounds_));
  }
  return absl::StrJoin(lines, "; ");
}

absl::Status Membership::JobOver() {
  {
    absl::MutexLock lock(&mu_);
    if (!data_loss_.empty()) {
      const absl::Status status = absl::DataLossError(DataLossLocked());
      NoteLocked(status);
      return status;
    }
  }
  if (!job_over_) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (!job_failure_.empty()) {
    const absl::Status status = absl::AbortedError(
        absl::StrCat("the job run by ", link_->name(), " failed: ", job_failure_));
    NoteLocked(status);
    return status;
  }
  return absl::CancelledError(absl::StrCat("the job run by ", link_->name(), " is over"));
}

absl::Status Membership::Noted(absl::Status status) {
  if (absl::IsDataLoss(status)) {
    bool known;
    {
      absl::MutexLock lock(&mu_);
      known = !data_loss_.empty();
    }
    // A server refused a request as restarted into the job: the scheduler knows what it
    // restored (the server told it before serving).
    if (!known) Beat().IgnoreError();
  }
  absl::MutexLock lock(&mu_);
  if (!status.ok() && !data_loss_.empty()) {
    const std::string loss = DataLossLocked();
    if (status.message().find(loss) == absl::string_view::npos) {
      status = absl::DataLossError(absl::StrCat(status.message(), " (", loss, ")"));
    }
  } else if (!status.ok()) {
    if (!job_failure_.empty() && status.message().find(job_failure_) == absl::string_view::npos) {
      status = absl::Status(
          status.code(), absl::StrCat(status.message(), " (the job failed: ", job_failure_, ")"));
    } else {
      const absl::Duration silent = absl::Now() - last_answer_;
      if (!job_over_ && silent > 3 * view_.heartbeat_interval + absl::Seconds(1)) {
        status = absl::Status(
            status.code(),
            absl::StrCat(status.message(), " (", link_->name(), " has answered no heartbeat for ",
                         absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                         ": the scheduler is lost, and servers exit when they lose it)"));
      }
    }
  }
  NoteLocked(status);
  return status;
}

void Membership::Leave() {
  if (left_) return;
  left_ = true;
  if (!job_over_) {
    std::string failure;
    {
      absl::MutexLock lock(&mu_);
      if (!failure_.ok()) failure = failure_.ToString();
    }
    const absl::Time deadline =
        absl::Now() + std::max(absl::Seconds(10), options_.scheduler_lost_timeout);
    const absl::Status status =
        WhileSchedulerAway("telling it has finished through", deadline,
                           [&] { return link_->Finish(view_.node_id, deadline, failure); });
    if (!status.ok()) {
      SdkLogger()->warn("worker {}: telling {} that it finished: {}", view_.rank, link_->name(),
                        std::string(status.message()));
    }
  }
  if (!stop_heartbeat_.HasBeenNotified()) stop_heartbeat_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
}

absl::StatusOr<bool> Membership::Beat() {
  const absl::Duration interval = view_.heartbeat_interval;
  absl::StatusOr<JobState> over = link_->Heartbeat(
      view_.node_id, barriers_passed_.load(), absl::Now() + std::max(interval, absl::Seconds(2)));
  if (!over.ok()) return over.status();
  OnRouting on_routing;
  {
    absl::MutexLock lock(&mu_);
    last_answer_ = absl::Now();
    if (over->over && !over->failure.empty()) job_failure_ = over->failure;
    on_routing = on_routing_;
    if (over->data_loss.size() > data_loss_.size()) {
      data_loss_ = over->data_loss;
      spdlog::error("worker {}: data loss: {}", view_.rank, DataLossLocked());
    }
  }
  if (on_routing) on_routing(*over);
  if (over->over) {
    if (!over->failure.empty() && !job_over_.exchange(true)) {
      spdlog::error("worker {}: the job failed: {}", view_.rank, over->failure);
    }
    job_over_ = true;
  }
  return over->over;
}

absl::Status Membership::RefreshRouting() {
  absl::StatusOr<bool> over = Beat();
  return over.ok() ? absl::OkStatus() : Named(over.status(), "a heartbeat to");
}

void Membership::HeartbeatLoop() {
  bool warned = false;
  const absl::Duration interval = view_.heartbeat_interval;
  while (!stop_heartbeat_.WaitForNotificationWithTimeout(interval)) {
    const absl::StatusOr<bool> over = Beat();
    if (!over.ok()) {
      if (!warned) {
        SdkLogger()->warn("worker {}: heartbeat to {} failed: {}", view_.rank, link_->name(),
                          std::string(over.status().message()));
      }
      warned = true;
      continue;
    }
    warned = false;
    if (*over || job_over_) return;
  }
}

absl::Status Membership::Barrier() {
  const uint64_t sequence = ++barriers_;
  const absl::Time deadline = absl::Now() + options_.barrier_timeout;
  const absl::Status status = WhileSchedulerAway(
      "a barrier at", deadline, [&] { return link_->Barrier(view_.node_id, sequence, deadline); });
  if (status.ok()) {
    barriers_passed_ = sequence;
    return status;
  }
  return Noted(Named(status, "barrier at"));
}

absl::StatusOr<std::vector<std::string>> Membership::Command(int head, const std::string& body) {
  const absl::Time deadline = absl::Now() + options_.command_timeout;
  absl::StatusOr<std::vector<std::string>> replies;
  const absl::Status status =
      WhileSchedulerAway(absl::StrCat("command ", head, " through"), deadline, [&] {
        replies = link_->Command(view_.node_id, head, body, deadline);
        return replies.status();
      });
  if (status.ok()) return replies;
  return Noted(Named(status, absl::StrCat("command ", head, " through")));
}

absl::StatusOr<bool> Membership::ServerUnreachable(int rank, const absl::Status& error) {
  std::string reason;
  absl::StatusOr<bool> dead = link_->ServerUnreachable(view_.node_id, rank, error.ToString(),
                                                       absl::Now() + kServerCheckTimeout, &reason);
  if (!dead.ok()) return Named(dead.status(), "reporting an unreachable server to");
  if (*dead) {
    SdkLogger()->warn("worker {}: {}; failing over to the other copy of its shards", view_.rank,
                      reason);
  }
  return dead;
}

void Membership::set_on_routing(OnRouting on_routing) {
  absl::MutexLock lock(&mu_);
  on_routing_ = std::move(on_routing);
}

absl::StatusOr<int> Membership::NumDeadNodes(int group, absl::Duration timeout) {
  const int timeout_s = static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(timeout, absl::Seconds(1)))));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<int> dead;
  const absl::Status status = WhileSchedulerAway("counting dead nodes through", deadline, [&] {
    dead = link_->NumDeadNodes(view_.node_id, group, timeout_s, deadline);
    return dead.status();
  });
  if (status.ok()) return dead;
  return Noted(Named(status, "counting dead nodes through"));
}

}  // namespace kvstore
