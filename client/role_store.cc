#include "client/role_store.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/role_daemon.h"

namespace kvstore {

RoleStore::~RoleStore() {
  bool served;
  {
    absl::MutexLock lock(&mu_);
    served = served_;
  }
  if (served) return;
  spdlog::info(
      "{} process: the store was released without RunServer; serving until the job "
      "ends",
      env_.role.value_or("worker"));
  const absl::Status status = RunServer();
  if (!status.ok()) spdlog::error("{}: {}", env_.role.value_or("worker"), status.ToString());
}

absl::Status RoleStore::RunServer(const Controller& controller) {
  {
    absl::MutexLock lock(&mu_);
    if (served_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RunServer: this ", env_.role.value_or("worker"), " process has already served"));
    }
    served_ = true;
  }
  CustomController custom;
  if (controller) custom = controller;
  return RunRoleDaemon(env_, std::move(custom));
}

void RoleStore::ServeAndExit(const char* call) {
  const std::string role = env_.role.value_or("worker");
  spdlog::info(
      "{} process (DMLC_ROLE={}): {} called on its store; serving as the job's {} "
      "until the job ends, then exiting",
      role, role, call, role);
  const absl::Status status = RunServer();
  if (!status.ok()) {
    spdlog::error("{}: {}", role, status.ToString());
    std::fprintf(stderr, "%s: %s\n", role.c_str(), status.ToString().c_str());
    std::exit(1);
  }
  std::exit(0);
}

}  // namespace kvstore
