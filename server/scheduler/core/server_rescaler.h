// ServerRescaler: adds a server to, or drains one from, a running dist_sync job - the
// scheduler's side of a RescalePlan (server_scaling.h; docs/state.md, "Adding and draining
// servers while a job runs").
//
// Run moves the job from the plan's servers before to those after, with the same consistent
// cut a replacement's join uses (server_joiner.h), one controller command each step
// (server/core/controller.h, 7, 8, 14 and 15):
//   1. cut:     every old server's engines (with replicas, its backup of the previous shard
//               too) are frozen (7), then limited to the highest round any of them has started
//               (8); once every key of one has completed it, its copy is taken whole and from
//               then on it refuses writes routed by a view older than the plan's epoch, the
//               pushes the cut held too (14 "cutparts");
//   2. move:    for each engine after (in parallel; with replicas each server's backup of the
//               previous shard too), each old server cuts from its own shard's copy what the
//               new placement gives that engine's shard (14 "part": CheckpointPartFor) and sends it
//               there directly (15 "begin", 14 "sendpart"); the server checks and keeps it (15
//               "stage"; a server staying keeps its own part: 14 "keeppart") and, with every old
//               server's part, merges them into its new shard (15
//               "merge": ReshardCheckpoint);
//   3. swap:    every server after serves its new shard and refuses every request routed by
//               an older view (15 "swap"); a drained server refuses them too (15 "retire");
//   4. publish: ServerScaling::Complete - the view at the plan's epoch with the new servers.
//               Workers learn it when a server refuses them and send the refused operations
//               again, placed anew (client/dist_store.h).
// Workers' controller commands wait meanwhile (`pause`). An error before the swap ends the
// rescale: the old servers accept writes again (14 "abort"), what was staged is dropped (15
// "unstage"), and ServerScaling::Fail moves the view to the plan's epoch unchanged (the
// joining server is told why and exits). An error during the swap, after some server swapped,
// cannot be undone: the job fails, naming it.
//
// Threading: Run blocks; run it on the checkpoint coordinator's thread (RunExclusive), so that
// it never overlaps a checkpoint's cut or a join.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_SERVER_RESCALER_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_SERVER_RESCALER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_scaling.h"

namespace kvstore {

class ServerRescaler {
 public:
  // AddressCall sends controller command `head` with `body` to the server at `address`; it
  // blocks and names the server. Pause holds workers' controller commands (true) or lets them
  // go on (false).
  using AddressCall = std::function<absl::StatusOr<std::string>(
      const std::string& address, bool backup, int head, const std::string& body)>;
  using Pause = std::function<void(bool)>;

  // `core` must outlive the rescaler. `cut_timeout` bounds the wait for the old servers' keys
  // to reach the cut's round, and for a joining server to serve.
  ServerRescaler(SchedulerCore* core, AddressCall call, Pause pause, absl::Duration cut_timeout)
      : core_(core), call_(std::move(call)), pause_(std::move(pause)), cut_timeout_(cut_timeout) {}

  // Run carries out `plan` and publishes it, or fails it (see the top); the error names the
  // step and the server.
  absl::Status Run(const RescalePlan& plan);

 private:
  // Engine: a server's engine holding shard `shard` - its own, or with replicas the backup of
  // the previous rank's (`backup`).
  struct Engine {
    ServerEntry server;
    bool backup = false;
    int shard = 0;
  };
  // Engines lists `servers`' engines: each one's own and, with `replicas` 2, its backup.
  static std::vector<Engine> Engines(const std::vector<ServerEntry>& servers, int replicas);
  static std::string Name(const Engine& engine);
  // Cut freezes every old engine, limits them to the highest round started and takes each
  // one's copy; returns the cut's round.
  absl::StatusOr<int64_t> Cut(const RescalePlan& plan, const std::string& id);
  // Move has every old server send engine `to` of the new view its part of `to`'s shard, cut
  // from its own shard's copy (a server staying keeps its own: 14 "keeppart"), and merges them
  // there; `*between` adds the bytes sent.
  absl::Status Move(const RescalePlan& plan, const std::string& id, const Engine& to,
                    int64_t* between);
  // Call sends (head, body) to `engine` and prefixes an error with `step` and the engine.
  absl::StatusOr<std::string> Call(const Engine& engine, int head, const std::string& body,
                                   const std::string& step);

  SchedulerCore* const core_;
  const AddressCall call_;
  const Pause pause_;
  const absl::Duration cut_timeout_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_SERVER_RESCALER_H_
