// SchedulerElection: the schedulers of one job - a leader and its standbys - elect the one that
// serves through etcd (`scheduler --etcd=ENDPOINTS --job=NAME`). Each candidate holds a lease
// and tries to create the job's key, SchedulerKey(job) (common/scheduler_endpoint.h), holding
// its address, under that lease; the one
// that creates it leads and keeps its lease alive. The others try again every poll until the
// leader's lease lapses (it died, or lost etcd) and the key goes with it; one of them then takes
// over, and the job's kvservers, which find the scheduler through the key, register again with
// it (docs/reliability.md, "The scheduler restarted"). etcd holds the leader's address and
// nothing else.
//
// Threading: Campaign and KeepLeading are called once, from one thread; the keep-alive runs
// on a thread of its own, joined by the destructor (which also revokes a leader's lease).
#ifndef KVSTORE_SERVER_SCHEDULER_SCHEDULER_ELECTION_H_
#define KVSTORE_SERVER_SCHEDULER_SCHEDULER_ELECTION_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/etcd_client.h"

namespace kvstore {

class SchedulerElection {
 public:
  struct Options {
    std::string job;  // The job's name; its key is SchedulerKey(job).
    // The leader's lease: a standby takes over this long after the leader's last keep-alive
    // (etcd may raise it to its minimum, about 2 s for etcd 3.4's defaults).
    absl::Duration lease = absl::Seconds(1);
    // How often a standby tries to take the key.
    absl::Duration poll = absl::Milliseconds(100);
  };

  SchedulerElection(EtcdClient etcd, Options options)
      : etcd_(std::move(etcd)), options_(std::move(options)) {}
  ~SchedulerElection();
  SchedulerElection(const SchedulerElection&) = delete;
  SchedulerElection& operator=(const SchedulerElection&) = delete;

  // Campaign blocks until this candidate leads with `address` published (OK), `stop` is
  // notified (Cancelled), or the job is over (NotFound: its leader said so, Finish). It logs
  // the leader it waits behind, and etcd's errors (retried) at most every few seconds.
  absl::Status Campaign(const std::string& address, absl::Notification* stop);
  // Finish records in etcd that the job is over (the key OverKeyOf(job), under no lease), so
  // that its standbys stop too, then steps down. A leader calls it when its job ended well.
  absl::Status Finish();
  static std::string OverKeyOf(const std::string& job);
  // KeepLeading keeps the leader's lease alive from now on, every third of its time to live,
  // on a thread of its own; `lost` runs once (on that thread) when the lease has lapsed or etcd
  // has not renewed it for the lease's time: another scheduler may lead, so this one must stop.
  void KeepLeading(std::function<void(const std::string& why)> lost);

 private:
  EtcdClient etcd_;
  const Options options_;
  int64_t lease_ = 0;
  std::atomic<bool> leading_{false};  // Written by Campaign, Finish and the keep-alive thread.
  absl::Notification stop_;
  std::thread keeper_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_SCHEDULER_ELECTION_H_
