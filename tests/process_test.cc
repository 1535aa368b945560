#include "tests/process.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace kvstore::testing {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", getpid());
}

// Shell runs `script` with /bin/sh, its output in a log named after `name`.
absl::StatusOr<std::unique_ptr<Process>> Shell(const std::string& name, const std::string& script,
                                               ProcessOptions options = {}) {
  options.log_path = TempPath(name + ".log");
  return Process::Start(name, {"/bin/sh", "-c", script}, std::move(options));
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

TEST_CASE("Process: exit code and output are captured; env adds and replaces variables",
          "[process]") {
  setenv("KV_PROCESS_TEST_KEPT", "kept", 1);
  setenv("KV_PROCESS_TEST_REPLACED", "old", 1);
  auto process = Shell("child",
                       "echo out $KV_PROCESS_TEST_KEPT $KV_PROCESS_TEST_REPLACED "
                       "$KV_PROCESS_TEST_ADDED; echo err >&2; exit 3",
                       {{{"KV_PROCESS_TEST_REPLACED", "new"}, {"KV_PROCESS_TEST_ADDED", "added"}}});
  REQUIRE(process.ok());
  auto code = (*process)->Wait(absl::Seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 3);
  CHECK((*process)->exit_code() == 3);
  const std::string output = (*process)->output();
  INFO(output);
  CHECK(absl::StrContains(output, "out kept new added"));
  CHECK(absl::StrContains(output, "err"));
}

TEST_CASE("Process: a program that cannot run is an error naming the process and the program",
          "[process]") {
  auto process = Process::Start("ghost", {"/nonexistent/program", "--flag"});
  REQUIRE(!process.ok());
  INFO(process.status().ToString());
  CHECK(absl::StrContains(process.status().message(), "ghost"));
  CHECK(absl::StrContains(process.status().message(), "/nonexistent/program"));
  CHECK(absl::IsInvalidArgument(Process::Start("empty", {}).status()));
}

TEST_CASE("Process: a wait past its timeout kills the process and names it", "[process]") {
  auto process = Shell("sleeper", "exec sleep 60");
  REQUIRE(process.ok());
  const pid_t pid = (*process)->pid();
  CHECK_FALSE((*process)->Exited(absl::Milliseconds(50)));
  const absl::Time start = absl::Now();
  auto code = (*process)->Wait(absl::Milliseconds(200));
  CHECK(absl::Now() - start < absl::Seconds(10));
  REQUIRE(absl::IsDeadlineExceeded(code.status()));
  CHECK(absl::StrContains(code.status().message(), "sleeper"));
  CHECK(absl::StrContains(code.status().message(), absl::StrCat(pid)));
  CHECK((*process)->exit_code() == 128 + SIGKILL);
  CHECK_FALSE(Alive(pid));
}

TEST_CASE("Process: Kill ends the child and what it started; the destructor does too",
          "[process]") {
  for (const bool by_destructor : {false, true}) {
    INFO("by destructor: " << by_destructor);
    const std::string pid_file = TempPath("grandchild.pid");
    std::remove(pid_file.c_str());
    auto process = Shell("parent", absl::StrCat("sleep 60 & echo $! > ", pid_file, "; wait"));
    REQUIRE(process.ok());
    int grandchild = 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadTextFile(pid_file)), &grandchild) &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    REQUIRE(grandchild > 0);
    const pid_t pid = (*process)->pid();
    REQUIRE(Alive(grandchild));
    if (by_destructor) {
      process->reset();
    } else {
      (*process)->Kill();
      CHECK((*process)->exit_code() == 128 + SIGKILL);
    }
    CHECK_FALSE(Alive(pid));
    // The grandchild is reparented and reaped by init: poll until it is gone.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (Alive(grandchild) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    CHECK_FALSE(Alive(grandchild));
  }
}

TEST_CASE("Process: output is forwarded without a log", "[process]") {
  auto process = Process::Start("quiet", {"/bin/sh", "-c", "exit 0"});
  REQUIRE(process.ok());
  CHECK((*process)->Wait(absl::Seconds(30)).value_or(-1) == 0);
  CHECK((*process)->output().empty());
  CHECK_FALSE((*process)->WaitForOutput("anything", absl::ZeroDuration()));
}

TEST_CASE("Process: WaitForOutput and WaitForPortFile; an early exit is named", "[process]") {
  const std::string port_file = TempPath("port");
  std::remove(port_file.c_str());
  auto server = Shell("server", absl::StrCat("echo READY; echo 4321 > ", port_file, ".tmp; mv ",
                                             port_file, ".tmp ", port_file, "; exec sleep 60"));
  REQUIRE(server.ok());
  CHECK((*server)->WaitForOutput("READY", absl::Seconds(30)));
  auto port = (*server)->WaitForPortFile(port_file, absl::Seconds(30));
  REQUIRE(port.ok());
  CHECK(*port == 4321);

  auto failing = Shell("failing", "exit 5");
  REQUIRE(failing.ok());
  auto none = (*failing)->WaitForPortFile(TempPath("never"), absl::Seconds(30));
  INFO(none.status().ToString());
  CHECK(absl::IsFailedPrecondition(none.status()));
  CHECK(absl::StrContains(none.status().message(), "failing"));
  CHECK(absl::StrContains(none.status().message(), "exited with 5"));

  auto silent = (*server)->WaitForPortFile(TempPath("never"), absl::Milliseconds(50));
  CHECK(absl::IsDeadlineExceeded(silent.status()));
  CHECK(absl::StrContains(silent.status().message(), "server"));
}

}  // namespace
}  // namespace kvstore::testing
