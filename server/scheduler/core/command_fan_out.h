// CommandFanOut: the scheduler's controller commands to its kvservers, apart from any transport.
//
// - FanOut sends (head, body) to every living copy of each shard - its server, and in a job
//   with replicas its backup's engine - and answers once the last has replied: one reply per
//   shard, from its primary when that answered, else from its backup; the first error names
//   the server. UNAVAILABLE when no server is alive.
// - CallServer sends a command to the server of one rank (to the backup of its shard while it
//   is dead) and waits for the reply; CallAddress to one address. Errors name the server.
// - HoldWhilePaused holds a request while commands are paused (a join copying shards) and runs
//   the held ones when they resume, in order.
// The commands travel over a ServerCommandChannel: gRPC in the daemon (SchedulerService),
// anything that delivers a command in a test.
//
// Threading: thread-safe. FanOut's `done` runs on the thread that delivered the last reply;
// CallServer and CallAddress block (at most the channel's deadline): never call them from a
// channel's callback.
#ifndef KVSTORE_SERVER_SCHEDULER_CORE_COMMAND_FAN_OUT_H_
#define KVSTORE_SERVER_SCHEDULER_CORE_COMMAND_FAN_OUT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/scheduler/core/scheduler_core.h"

namespace kvstore {

// ServerCommandChannel: delivers one controller command to the kvserver at `address` (to its
// backup engine with `backup`) and calls `done` once, with the reply or the call's error.
// Thread-safe.
class ServerCommandChannel {
 public:
  using Reply = std::function<void(absl::StatusOr<std::string>)>;
  virtual ~ServerCommandChannel() = default;
  virtual void Send(const std::string& address, bool backup, int head, const std::string& body,
                    Reply done) = 0;
};

class CommandFanOut {
 public:
  // `core` and `channel` must outlive the fan-out.
  CommandFanOut(const SchedulerCore* core, ServerCommandChannel* channel)
      : core_(core), channel_(channel) {}
  CommandFanOut(const CommandFanOut&) = delete;
  CommandFanOut& operator=(const CommandFanOut&) = delete;

  using Replies = std::function<void(absl::StatusOr<std::vector<std::string>>)>;
  void FanOut(int head, const std::string& body, Replies done);

  absl::StatusOr<std::string> CallServer(int rank, int head, const std::string& body);
  absl::StatusOr<std::string> CallAddress(const std::string& address, bool backup, int head,
                                          const std::string& body);

  // Pause holds requests (true), or runs the held ones and lets later ones go on (false).
  void Pause(bool pause);
  // HoldWhilePaused keeps `retry` to run when commands resume and returns true while they are
  // paused; false (and `retry` dropped) otherwise.
  bool HoldWhilePaused(std::function<void()> retry);

 private:
  // Call sends one command and waits for its reply.
  absl::StatusOr<std::string> Call(const std::string& address, bool backup, int head,
                                   const std::string& body);

  const SchedulerCore* const core_;
  ServerCommandChannel* const channel_;
  absl::Mutex mu_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_SCHEDULER_CORE_COMMAND_FAN_OUT_H_
