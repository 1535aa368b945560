// ServerJoiner: brings a replacement kvserver into a running job with replicas - the scheduler's
// side of SchedulerCore::JoinServer.
//
// A kvserver of rank D holds two shards: its own (primary; the other copy is the backup on
// server D+1) and the backup of shard D-1 (the primary on server D-1). When D has died and a
// new server has registered in its place, Join copies both from their living copies:
//   1. cut:   both living copies are frozen (controller command 7), then limited to the higher
//             of the rounds they have started (8); once every key of one has completed it
//             (command 14 "cut"), its copy is described (the header of a stream whose values
//             are read from its engine as they are sent) and, from that moment, it refuses writes
//             routed by a view older than the join's epoch (common/view_epoch.h) - the pushes
//             the cut held too;
//   2. move:  the new server is told to expect the copy from the server holding it (15
//             "begin BYTES FROM HEAD"), that server sends it there directly, in pages, several
//             at once (14 "send"; server/grpc/shard_copy_sender.h), which the new server places
//             into its engine as they arrive (server/core/shard_stream.h), and the copy is
//             loaded (15 "load": every byte, the size and the CRC-32s checked; rounds, updater
//             and state, applied request ids);
//   3. publish: ServerFailover::CompleteJoin: the server is alive at its address and the view
//             at the join's epoch. Workers learn it from heartbeats (or at once, when a refusal
//             sends them to the scheduler) and send the refused writes again, under the same
//             request ids, to both copies.
// Controller commands of workers (a new optimizer) wait while a join runs (`pause`), so
// that both copies get them. Any error ends the join: the living copies refuse nothing more
// (14 "abort"), the new server stays dead and is told why (ServerFailover::FailJoin), and the
// error names the step and the server.
//
// Threading: Join blocks; run it on the checkpoint coordinator's thread (RunExclusive), so
// that it never overlaps a checkpoint's cut.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_SERVER_JOINER_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_SERVER_JOINER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

class ServerJoiner {
 public:
  // ShardCall sends controller command `head` with `body` to the living copy of shard `shard`
  // the scheduler routes to (SchedulerService::CallServer); AddressCall sends it to the
  // server at `address`, its backup engine when `backup`. Both block and name the server.
  using ShardCall =
      std::function<absl::StatusOr<std::string>(int shard, int head, const std::string& body)>;
  using AddressCall = std::function<absl::StatusOr<std::string>(
      const std::string& address, bool backup, int head, const std::string& body)>;
  // Pause holds workers' controller commands (true) or lets them go on (false).
  using Pause = std::function<void(bool)>;

  // `core` must outlive the joiner. `cut_timeout` bounds each copy's wait for its keys to
  // reach the cut's round, and the wait for the new server to serve.
  ServerJoiner(SchedulerCore* core, ShardCall to_shard, AddressCall to_address, Pause pause,
               absl::Duration cut_timeout)
      : core_(core),
        to_shard_(std::move(to_shard)),
        to_address_(std::move(to_address)),
        pause_(std::move(pause)),
        cut_timeout_(cut_timeout) {}

  // Join copies the shards of rank `registration.rank` into the server at `address` that
  // registered as `registration` and publishes it; on error it is failed (see the top).
  absl::Status Join(const Registration& registration, const std::string& address);

 private:
  // FreezeCopy freezes the living copy of `shard` for copy `id` (controller command 7) and
  // returns the highest round it has started; LimitCopy lets its keys go on to `round` (8).
  absl::StatusOr<int64_t> FreezeCopy(int shard, const std::string& id);
  absl::Status LimitCopy(int shard, const std::string& id, int64_t round);
  // TakeCopy asks for the copy once (command 14 "cut"): the "copied BYTES CRC32" reply, or ""
  // while a key is still short of `round`; DeadlineExceeded past `deadline`.
  absl::StatusOr<std::string> TakeCopy(int shard, const std::string& id, int64_t round,
                                       uint64_t epoch, absl::Time deadline);
  // MoveCopy has the copy `copied` describes sent into the new server's engine (`backup`) by
  // the server holding it, and loads it there.
  absl::Status MoveCopy(int shard, const std::string& id, int64_t round, const std::string& copied,
                        const std::string& address, bool backup);

  SchedulerCore* const core_;
  const ShardCall to_shard_;
  const AddressCall to_address_;
  const Pause pause_;
  const absl::Duration cut_timeout_;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_SERVER_JOINER_H_
