// RoleStore: what KVStore::Create("dist_...") returns in a process started as the job's server
// or scheduler (DMLC_ROLE=server / scheduler), so that one program serves every role, as
// MXNet's launcher runs it.
//
// The store is the daemon of that role, not a worker: RunServer runs it (server/role_daemon.h)
// until the job ends. A program that does not look at its role is served for too: its first
// worker call (Init, Push, Pull, Wait, Barrier, SetOptimizer, ...) runs the daemon with the
// default controller and then ends the process - std::exit with 0 when the job ended cleanly
// (or a stop signal ended the daemon), 1 with the error logged otherwise - since nothing the
// program would do next as a worker makes sense. A store destroyed without having served
// serves first (blocking until the job ends), so that no server is missing from the job.
//
// Threading: RunServer runs once; calls from several threads serve once between them.
#ifndef KVSTORE_CLIENT_ROLE_STORE_H_
#define KVSTORE_CLIENT_ROLE_STORE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/kvstore.h"
#include "common/environment.h"

namespace kvstore {

class RoleStore final : public KVStore {
 public:
  RoleStore(std::string type, JobEnvironment env)
      : KVStore(std::move(type)), env_(std::move(env)) {}
  ~RoleStore() override;

  absl::Status RunServer(const Controller& controller = nullptr) override;

  int rank() const override { return env_.rank.value_or(-1); }
  int num_workers() const override { return env_.num_workers.value_or(1); }
  absl::Status Wait(absl::Span<const Key>) override { ServeAndExit("Wait"); }
  absl::Status WaitAll() override { ServeAndExit("WaitAll"); }
  absl::Status Barrier() override { ServeAndExit("Barrier"); }
  absl::Status SetUpdater(Updater) override { ServeAndExit("SetUpdater"); }
  absl::Status SaveOptimizerStates(const std::string&) override {
    ServeAndExit("SaveOptimizerStates");
  }
  absl::Status LoadOptimizerStates(const std::string&) override {
    ServeAndExit("LoadOptimizerStates");
  }
  absl::Status Checkpoint(const std::string&) override { ServeAndExit("Checkpoint"); }
  absl::Status SendCommandToServers(int, const std::string&) override {
    ServeAndExit("SendCommandToServers");
  }
  absl::StatusOr<int> NumDeadNodes(NodeGroup, absl::Duration) override {
    ServeAndExit("NumDeadNodes");
  }

 protected:
  absl::Status DoInit(absl::Span<const Key>, absl::Span<const Tensor>) override {
    ServeAndExit("Init");
  }
  absl::Status DoPush(absl::Span<const Key>, absl::Span<const Tensor>, int) override {
    ServeAndExit("Push");
  }
  absl::Status DoPull(absl::Span<const Key>, absl::Span<Tensor* const>, int) override {
    ServeAndExit("Pull");
  }
  absl::Status DoPushPull(absl::Span<const Key>, absl::Span<const Tensor>,
                          absl::Span<Tensor* const>, int) override {
    ServeAndExit("PushPull");
  }
  absl::Status DoPushBucket(absl::Span<const Key>, const Tensor&, int) override {
    ServeAndExit("PushBucket");
  }
  absl::Status DoPullBucket(absl::Span<const Key>, Tensor*, int) override {
    ServeAndExit("PullBucket");
  }
  absl::Status DoPushPullBucket(absl::Span<const Key>, const Tensor&, Tensor*, int) override {
    ServeAndExit("PushPullBucket");
  }
  absl::Status DoIntKeyBucket(absl::Span<const int64_t>, const Tensor*, Tensor*, int) override {
    ServeAndExit("a bucket call");
  }
  absl::StatusOr<std::pair<DType, Shape>> StoredSpec(const Key&) const override {
    return absl::FailedPreconditionError("a server or scheduler process stores no keys");
  }
  absl::Status DoSetGradientCompression(const CompressionParams&) override {
    ServeAndExit("SetGradientCompression");
  }
  absl::Status DoSetOptimizer(const OptimizerConfig&) override { ServeAndExit("SetOptimizer"); }
  absl::Status DoPushRowSparse(absl::Span<const Key>, absl::Span<const RowSparse>, int) override {
    ServeAndExit("Push");
  }
  absl::Status DoRowSparsePull(absl::Span<const Key>, absl::Span<RowSparse* const>,
                               absl::Span<const std::vector<int64_t>>, int) override {
    ServeAndExit("RowSparsePull");
  }

 private:
  // ServeAndExit runs the daemon with the default controller, then ends the process.
  [[noreturn]] void ServeAndExit(const char* call);

  const JobEnvironment env_;
  absl::Mutex mu_;
  bool served_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_ROLE_STORE_H_
