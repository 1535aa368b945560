// Tests of CommandFanOut: which server copies a command reaches, whose reply answers for a
// shard, errors naming the server, and commands held while paused. The channel here is a table
// of replies by address, answering on threads of its own as gRPC's would.
#include "server/scheduler/core/command_fan_out.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/scheduler/core/server_failover.h"
namespace kvstore {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A job of `servers` servers (addresses 127.0.0.1:20000 + rank) and one worker, registered.
std::unique_ptr<SchedulerCore> Job(int servers, int replicas) {
  SchedulerOptions options;
  options.num_servers = servers;
  options.num_workers = 1;
  options.replicas = replicas;
  options.register_timeout = absl::Seconds(10);
  std::unique_ptr<SchedulerCore> core = SchedulerCore::Create(options).value();
  std::vector<std::unique_ptr<absl::Notification>> done;
  for (int i = 0; i <= servers; ++i) {
    done.push_back(std::make_unique<absl::Notification>());
    const bool server = i < servers;
    core->Register(server ? NodeRole::kServer : NodeRole::kWorker, server ? i : -1,
                   server ? absl::StrCat("127.0.0.1:", 20000 + i) : "", "host", kStart,
                   [n = done.back().get()](absl::StatusOr<Registration>) { n->Notify(); });
  }
  for (auto& n : done) REQUIRE(n->WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(core->view().ok());
  return core;
}

// Table: replies "R@ADDRESS[/backup]" by address, or the error set for it, each on a thread.
class Table : public ServerCommandChannel {
 public:
  void Send(const std::string& address, bool backup, int head, const std::string& body,
            Reply done) override {
    {
      absl::MutexLock lock(&mu_);
      sent_.insert(absl::StrCat(address, backup ? "/backup" : ""));
      last_head_ = head;
      last_body_ = body;
    }
    absl::StatusOr<std::string> reply = absl::StrCat("R@", address, backup ? "/backup" : "");
    if (auto it = errors_.find(address); it != errors_.end()) reply = it->second;
    threads_.emplace_back([reply, done = std::move(done)]() mutable { done(std::move(reply)); });
  }
  ~Table() override {
    for (std::thread& t : threads_) t.join();
  }
  std::set<std::string> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  std::map<std::string, absl::Status> errors_;
  int last_head_ = -1;
  std::string last_body_;

 private:
  absl::Mutex mu_;
  std::set<std::string> sent_;
  std::vector<std::thread> threads_;
};

absl::StatusOr<std::vector<std::string>> FanOutAndWait(CommandFanOut* commands, int head,
                                                       const std::string& body) {
  absl::Notification finished;
  absl::StatusOr<std::vector<std::string>> result;
  commands->FanOut(head, body, [&](absl::StatusOr<std::vector<std::string>> replies) {
    result = std::move(replies);
    finished.Notify();
  });
  REQUIRE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return result;
}

TEST_CASE("CommandFanOut: every server, one reply per shard in rank order", "[scheduler]") {
  auto core = Job(3, 1);
  Table table;
  CommandFanOut commands(core.get(), &table);
  auto replies = FanOutAndWait(&commands, 2, "hello");
  INFO(replies.status().ToString());
  REQUIRE(replies.ok());
  CHECK(*replies ==
        std::vector<std::string>{"R@127.0.0.1:20000", "R@127.0.0.1:20001", "R@127.0.0.1:20002"});
  CHECK(table.sent().size() == 3);
  CHECK(table.last_head_ == 2);
  CHECK(table.last_body_ == "hello");
}

TEST_CASE(
    "CommandFanOut: with replicas, backups too; a dead server's shard answered by its "
    "backup",
    "[scheduler]") {
  auto core = Job(3, 2);
  Table table;
  CommandFanOut commands(core.get(), &table);
  auto all = FanOutAndWait(&commands, 1, "");
  REQUIRE(all.ok());
  CHECK(table.sent().size() == 6);          // 3 primaries and 3 backups.
  CHECK((*all)[1] == "R@127.0.0.1:20001");  // The primary's reply wins.
  REQUIRE(core->failover().DeclareServerDead(1, "test", kStart + absl::Seconds(1)).ok());
  Table after;
  CommandFanOut again(core.get(), &after);
  auto replies = FanOutAndWait(&again, 1, "");
  REQUIRE(replies.ok());
  CHECK((*replies)[1] == "R@127.0.0.1:20002/backup");
  CHECK(after.sent().count("127.0.0.1:20001") == 0);
  // CallServer of the dead rank reaches its backup, and says so in an error.
  CHECK(*again.CallServer(1, 5, "x") == "R@127.0.0.1:20002/backup");
  after.errors_["127.0.0.1:20002"] = absl::DeadlineExceededError("slow");
  const absl::Status error = again.CallServer(1, 5, "x").status();
  CHECK(absl::IsDeadlineExceeded(error));
  CHECK(error.message() == "server 2 at 127.0.0.1:20002 (backup of shard 1): slow");
}

TEST_CASE("CommandFanOut: the first error names its server; no servers, UNAVAILABLE",
          "[scheduler]") {
  auto core = Job(2, 1);
  Table table;
  table.errors_["127.0.0.1:20001"] = absl::FailedPreconditionError("refused");
  CommandFanOut commands(core.get(), &table);
  auto replies = FanOutAndWait(&commands, 0, "sgd");
  CHECK(absl::IsFailedPrecondition(replies.status()));
  CHECK(replies.status().message() == "server 1 at 127.0.0.1:20001: refused");
  CHECK(absl::IsInvalidArgument(commands.CallServer(7, 0, "").status()));
  const absl::Status address = commands.CallAddress("127.0.0.1:20001", false, 0, "").status();
  CHECK(address.message() == "the server at 127.0.0.1:20001: refused");
}

TEST_CASE("CommandFanOut: requests held while paused run, in order, when resumed", "[scheduler]") {
  auto core = Job(1, 1);
  Table table;
  CommandFanOut commands(core.get(), &table);
  std::vector<int> ran;
  CHECK(!commands.HoldWhilePaused([&] { ran.push_back(0); }));
  commands.Pause(true);
  CHECK(commands.HoldWhilePaused([&] { ran.push_back(1); }));
  CHECK(commands.HoldWhilePaused([&] { ran.push_back(2); }));
  CHECK(ran.empty());
  commands.Pause(false);
  CHECK(ran == std::vector<int>{1, 2});
  CHECK(!commands.HoldWhilePaused([&] { ran.push_back(3); }));
}

}  // namespace
}  // namespace kvstore
