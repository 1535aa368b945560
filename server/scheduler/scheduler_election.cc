#include "server/scheduler/scheduler_election.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/scheduler_endpoint.h"

namespace kvstore {

SchedulerElection::~SchedulerElection() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (keeper_.joinable()) keeper_.join();
  // Stepping down: a standby takes over at once instead of after the lease.
  if (leading_ && lease_ != 0) etcd_.Revoke(lease_).IgnoreError();
}

std::string SchedulerElection::OverKeyOf(const std::string& job) {
  return absl::StrCat("/kvstore/jobs/", job, "/over");
}

absl::Status SchedulerElection::Finish() {
  const absl::Status put = etcd_.Put(OverKeyOf(options_.job), "the job is over");
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (keeper_.joinable()) keeper_.join();
  if (leading_ && lease_ != 0) etcd_.Revoke(lease_).IgnoreError();
  leading_ = false;
  return put;
}

absl::Status SchedulerElection::Campaign(const std::string& address, absl::Notification* stop) {
  const std::string key = SchedulerKey(options_.job);
  absl::Time next_log = absl::InfinitePast();
  std::string last_holder;
  while (!stop->HasBeenNotified()) {
    if (const absl::StatusOr<std::string> over = etcd_.Get(OverKeyOf(options_.job)); over.ok()) {
      spdlog::info("scheduler: job {} is over (its leader said so in etcd); a standby stops",
                   options_.job);
      return absl::NotFoundError(absl::StrCat("job ", options_.job, " is over"));
    }
    absl::Status failed;
    if (lease_ == 0) {
      absl::StatusOr<int64_t> lease = etcd_.GrantLease(options_.lease);
      if (lease.ok()) {
        lease_ = *lease;
      } else {
        failed = lease.status();
      }
    }
    if (failed.ok()) {
      std::string holder;
      absl::StatusOr<bool> won = etcd_.PutIfAbsent(key, address, lease_, &holder);
      if (won.ok() && *won) {
        leading_ = true;
        spdlog::info("scheduler: leads job {} (etcd {}, key {}, lease {})", options_.job,
                     etcd_.endpoints(), key, lease_);
        return absl::OkStatus();
      }
      if (won.ok()) {
        // A standby keeps its own lease alive while it waits, to take the key at once.
        absl::StatusOr<absl::Duration> kept = etcd_.KeepAlive(lease_);
        if (!kept.ok()) lease_ = 0;
        if (holder != last_holder || absl::Now() > next_log) {
          spdlog::info("scheduler: a standby of job {}: the scheduler at {} leads it", options_.job,
                       holder);
          last_holder = holder;
          next_log = absl::Now() + absl::Seconds(30);
        }
      } else {
        failed = won.status();
        lease_ = 0;
      }
    }
    if (!failed.ok() && absl::Now() > next_log) {
      spdlog::warn("scheduler: electing job {}'s scheduler through etcd at {}: {}; retrying",
                   options_.job, etcd_.endpoints(), failed.ToString());
      next_log = absl::Now() + absl::Seconds(5);
    }
    stop->WaitForNotificationWithTimeout(options_.poll);
  }
  return absl::CancelledError("stopped before leading the job");
}

void SchedulerElection::KeepLeading(std::function<void(const std::string& why)> lost) {
  keeper_ = std::thread([this, lost = std::move(lost)] {
    absl::Time renewed = absl::Now();
    while (!stop_.WaitForNotificationWithTimeout(options_.lease / 3)) {
      const absl::StatusOr<absl::Duration> left = etcd_.KeepAlive(lease_);
      if (left.ok()) {
        renewed = absl::Now();
        continue;
      }
      if (absl::IsNotFound(left.status()) || absl::Now() - renewed > options_.lease) {
        leading_ = false;
        lost(absl::StrCat("lost the lead of job ", options_.job, ": etcd at ", etcd_.endpoints(),
                          " did not renew its lease (", left.status().ToString(),
                          "); another scheduler may lead it now"));
        return;
      }
    }
  });
}

}  // namespace kvstore
