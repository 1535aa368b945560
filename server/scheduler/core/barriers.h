// Barriers: the barriers open over node groups - servers (kGroupServers), workers
// (kGroupWorkers), or both - each with the nodes that have entered it, their callbacks and its
// deadline. A barrier passes once every member of its group that has not left the job has
// entered: workers that left an elastic job (Left) are not waited for.
//
// Counted barriers: a node may give each entry its count of barriers over the group (1, 2, ...;
// 0: not counted), and say how many it has got through (Through: a worker's heartbeats do).
// That makes a barrier retried across a scheduler restarted in place pass once: once a member
// is known to have got through barrier n (it entered n + 1, or said so), barrier n has passed
// before the restart, so the members still waiting in n - having retried it after the restart
// - are released, and a later entry of n is released at once.
//
// Threading: not thread-safe; SchedulerCore drives it under its lock. It never runs a
// callback: those of barriers that pass, expire or are ended are handed back, to be run once
// the lock is released.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_BARRIERS_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_BARRIERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvstore {

// Group bits, as in the protocol: servers 2, workers 4 (the scheduler, 1, never waits).
inline constexpr int kGroupServers = 2;
inline constexpr int kGroupWorkers = 4;
inline constexpr int kGroupAll = 7;

class Barriers {
 public:
  using Done = std::function<void(absl::Status)>;
  // A barrier that has passed: the nodes that entered it (count), how long it was open, and
  // the callbacks to run with OK.
  struct Passed {
    int group = 0;
    size_t entered = 0;
    absl::Duration waited;
    std::vector<Done> done;
  };
  // A barrier past its deadline: the nodes that entered it and the callbacks to fail.
  struct Expired {
    int group = 0;
    std::vector<uint64_t> entered;
    std::vector<Done> done;
  };

  Barriers(int num_servers, int num_workers)
      : num_servers_(num_servers), num_workers_(num_workers) {}
  // set_num_servers: the job's servers changed (a server added or drained while it runs).
  void set_num_servers(int num_servers) { num_servers_ = num_servers; }

  // Enter adds node `node_id` to the barrier over `group` (opened now, with a deadline of
  // now + timeout, by its first node), taking `*done`. InvalidArgument, `*done` left to the
  // caller, when the node is in it already; the barrier, when this entry makes it pass.
  // `sequence` is the node's count of this barrier (0: not counted; see the top): the
  // callbacks of the entries that a counted entry shows to have passed before - this one's,
  // or those of members waiting for an earlier count - go to `*passed_before` instead.
  absl::StatusOr<std::optional<Passed>> Enter(int group, uint64_t node_id, absl::Time now,
                                              absl::Duration timeout, Done* done,
                                              uint64_t sequence = 0,
                                              std::vector<Done>* passed_before = nullptr);
  // Through records that node `node_id` has got through `count` barriers over `group` and
  // returns the callbacks of the counted entries that this shows to have passed.
  std::vector<Done> Through(int group, uint64_t node_id, uint64_t count);
  // Left records that worker `node_id` left the job and returns the barriers that now pass
  // (every other member has entered; `waited` is not set).
  std::vector<Passed> Left(uint64_t node_id);
  // Expire removes the barriers whose deadline is before `now`.
  std::vector<Expired> Expire(absl::Time now);
  // TakeAll removes every open barrier and returns their callbacks (the job ended).
  std::vector<Done> TakeAll();

  // Size: the members of `group`; Living: less the workers that left; Entered: the nodes in
  // the barrier that have not left. A barrier passes when Entered equals Living.
  int Size(int group) const;
  int Living(int group) const;
  int Entered(const std::vector<uint64_t>& entered) const;
  // Open lists each open barrier's group and the nodes in it, in group order.
  std::vector<std::pair<int, std::vector<uint64_t>>> Open() const;
  bool HasLeft(uint64_t node_id) const { return left_.contains(node_id); }

 private:
  struct Barrier {
    absl::Time opened;
    absl::Time deadline;
    std::vector<uint64_t> entered;
    std::vector<uint64_t> sequence;  // Each entry's count (0: not counted).
    std::vector<Done> done;
  };
  static int Key(int group) { return group & (kGroupServers | kGroupWorkers); }

  int num_servers_;
  const int num_workers_;
  absl::flat_hash_set<uint64_t> left_;  // Workers that left the job.
  std::map<int, Barrier> open_;         // By group.
  // How many barriers each node is known to have got through, by group (counted barriers).
  std::map<int, std::map<uint64_t, uint64_t>> through_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_BARRIERS_H_
