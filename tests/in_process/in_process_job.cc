#include "tests/in_process/in_process_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/dist_store.h"
#include "common/named_thread.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"
#include "common/store/sgd_updater.h"
#include "server/core/checkpoint_root.h"
#include "server/core/server_backend.h"
#include "server/scheduler/core/scheduler_core.h"
#include "server/scheduler/core/server_failover.h"
#include "server/scheduler/core/worker_liveness.h"
namespace kvstore {
namespace {

std::string ServerAddressOf(int rank) { return absl::StrCat("in-process:", rank); }

// Waiting: the outcome of a call of the core that completes through a callback, shared with
// the callback, which may run after the waiter has given up.
template <typename T>
struct Waiting {
  T outcome;
  absl::Notification done;

  static std::shared_ptr<Waiting> Make() { return std::make_shared<Waiting>(); }
  // Wait returns the outcome, or DeadlineExceeded saying what was waited for.
  T Wait(absl::Time deadline, const std::string& what) {
    if (done.WaitForNotificationWithDeadline(deadline)) return outcome;
    return absl::DeadlineExceededError(
        absl::StrCat("no answer from the in-process scheduler ", what, " before the deadline"));
  }
};

}  // namespace

// Link: the SchedulerLink of the job's workers - calls of the core, on the caller's thread.
class InProcessJob::Link final : public SchedulerLink {
 public:
  explicit Link(InProcessJob* job) : job_(job) {}

  std::string name() const override { return "the in-process scheduler"; }

  absl::StatusOr<JobView> Register(const std::string& mode, int requested_rank,
                                   absl::Time deadline) override {
    auto waiting = Waiting<absl::StatusOr<Registration>>::Make();
    job_->core_->Register(
        NodeRole::kWorker, requested_rank, "", "in-process", absl::Now(),
        [waiting](absl::StatusOr<Registration> registration) {
          waiting->outcome = std::move(registration);
          waiting->done.Notify();
        },
        mode);
    ASSIGN_OR_RETURN(Registration registration, waiting->Wait(deadline, "while the job assembles"));
    {
      absl::MutexLock lock(&job_->mu_);
      RETURN_IF_ERROR(job_->setup_error_);
    }
    const ClusterView& view = registration.view;
    JobView job;
    job.node_id = registration.node_id;
    job.rank = registration.rank;
    job.num_workers = view.num_workers;
    job.mode = view.mode;
    job.heartbeat_interval = view.heartbeat_interval;
    for (const ServerEntry& server : view.servers) {
      job.servers.push_back(ServerAddress{server.rank, server.address});
    }
    job.big_value_bound = view.big_value_bound;
    job.chunk_bytes = view.chunk_bytes;
    return job;
  }

  absl::StatusOr<JobState> Heartbeat(uint64_t node_id, uint64_t barriers_passed,
                                     absl::Time /*deadline*/) override {
    ASSIGN_OR_RETURN(const bool over, job_->core_->Heartbeat(node_id, absl::Now(), {},
                                                             WorkerReport{"", barriers_passed}));
    return JobState{over, over ? job_->core_->job_failure() : std::string(),
                    job_->core_->failover().data_loss()};
  }

  absl::Status Barrier(uint64_t node_id, uint64_t sequence, absl::Time deadline) override {
    auto waiting = Waiting<absl::Status>::Make();
    job_->core_->Barrier(
        node_id, kGroupWorkers, absl::Now(),
        [waiting](absl::Status status) {
          waiting->outcome = std::move(status);
          waiting->done.Notify();
        },
        sequence);
    return waiting->Wait(deadline, "in a barrier");
  }

  absl::Status Finish(uint64_t node_id, absl::Time /*deadline*/,
                      const std::string& failure) override {
    return job_->core_->Finish(node_id, absl::Now(), failure);
  }

  absl::StatusOr<std::vector<std::string>> Command(uint64_t /*node_id*/, int head,
                                                   const std::string& body,
                                                   absl::Time /*deadline*/) override {
    std::vector<std::string> replies;
    for (size_t r = 0; r < job_->servers_.size(); ++r) {
      std::shared_ptr<ServerBackend> backend = job_->servers_[r]->backend();
      absl::StatusOr<std::string> reply =
          backend == nullptr ? absl::UnavailableError("the server is not set up yet")
                             : backend->controller->Run(head, body);
      if (!reply.ok()) {
        return absl::Status(
            reply.status().code(),
            absl::StrCat("server ", r, " at ", ServerAddressOf(r), ": ", reply.status().message()));
      }
      replies.push_back(*std::move(reply));
    }
    return replies;
  }

  absl::StatusOr<int> NumDeadNodes(uint64_t /*node_id*/, int group, int timeout_s,
                                   absl::Time /*deadline*/) override {
    return job_->core_->liveness().NumDeadNodes(group, absl::Seconds(timeout_s), absl::Now());
  }

 private:
  InProcessJob* const job_;
};

absl::StatusOr<std::unique_ptr<InProcessJob>> InProcessJob::Start(InProcessJobOptions options) {
  std::unique_ptr<InProcessJob> job(new InProcessJob());
  job->options_ = std::move(options);
  RETURN_IF_ERROR(RegisterSgdUpdater(&job->registry_));
  RETURN_IF_ERROR(RegisterOptimizers(&job->registry_));
  if (!job->options_.updater.empty()) {
    RETURN_IF_ERROR(
        job->registry_.Create(job->options_.updater, job->options_.updater_config).status());
  }
  ASSIGN_OR_RETURN(job->checkpoint_root_, CheckpointRoot::Open(job->options_.checkpoint_root));
  SchedulerOptions scheduler;
  scheduler.num_servers = job->options_.num_servers;
  scheduler.num_workers = job->options_.num_workers;
  scheduler.big_value_bound = job->options_.big_value_bound;
  scheduler.chunk_bytes = job->options_.chunk_bytes;
  scheduler.register_timeout = job->options_.register_timeout;
  scheduler.barrier_timeout = job->options_.barrier_timeout;
  scheduler.heartbeat_interval = job->options_.heartbeat_interval;
  ASSIGN_OR_RETURN(job->core_, SchedulerCore::Create(scheduler));
  for (int r = 0; r < job->options_.num_servers; ++r) {
    job->servers_.push_back(std::make_unique<InProcessServer>());
  }
  InProcessJob* raw = job.get();
  for (int r = 0; r < job->options_.num_servers; ++r) {
    // Runs once the last worker has registered, on its thread, before any worker returns
    // from Register: the servers are set up when their workers learn of them.
    job->core_->Register(NodeRole::kServer, r, ServerAddressOf(r), "in-process", absl::Now(),
                         [raw](absl::StatusOr<Registration> registration) {
                           if (!registration.ok())
                             return;  // The workers' registrations fail alike.
                           const ClusterView& view = registration->view;
                           BackendSpec spec;
                           spec.rank = registration->rank;
                           spec.num_servers = view.num_servers;
                           spec.mode = view.mode;
                           spec.chunk_bytes = view.chunk_bytes;
                           spec.big_value_bound = view.big_value_bound;
                           spec.worker_node_ids = view.worker_node_ids;
                           spec.updater = raw->options_.updater;
                           spec.updater_config = raw->options_.updater_config;
                           spec.registry = &raw->registry_;
                           spec.checkpoint_root = raw->checkpoint_root_;
                           absl::StatusOr<std::shared_ptr<ServerBackend>> backend =
                               MakeServerBackend(spec);
                           absl::MutexLock lock(&raw->mu_);
                           raw->server_node_ids_.push_back(registration->node_id);
                           if (backend.ok()) {
                             raw->servers_[registration->rank]->SetBackend(*std::move(backend));
                           } else if (raw->setup_error_.ok()) {
                             raw->setup_error_ = backend.status();
                           }
                         });
  }
  job->maintainer_ = NamedThread("kv-job", [raw] { raw->Maintain(); });
  return job;
}

InProcessJob::~InProcessJob() {
  stop_.Notify();
  if (maintainer_.joinable()) maintainer_.join();
}

void InProcessJob::Maintain() {
  const absl::Duration interval = options_.heartbeat_interval;
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    const absl::Time now = absl::Now();
    core_->ExpireDeadlines(now);
    absl::MutexLock lock(&mu_);
    for (uint64_t id : server_node_ids_) core_->Heartbeat(id, now).IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<KVStore>> InProcessJob::NewWorker(const std::string& type,
                                                                 DistOptions options) {
  if (type != "dist_sync" && type != "dist_async" && type != "dist_sync_device" &&
      type != "dist_device_sync") {
    return absl::InvalidArgumentError(absl::StrCat(
        "an in-process job's workers are of a distributed type (dist_sync, dist_async, "
        "dist_sync_device), not \"",
        type, "\""));
  }
  std::vector<const InProcessServer*> servers;
  for (const auto& server : servers_) servers.push_back(server.get());
  ASSIGN_OR_RETURN(
      std::unique_ptr<DistStore> store,
      DistStore::Connect(
          type, options, std::make_unique<Link>(this),
          [servers](const JobView&) -> absl::StatusOr<std::unique_ptr<ServerTransport>> {
            return std::make_unique<InProcessServerTransport>(servers);
          }));
  return std::unique_ptr<KVStore>(std::move(store));
}

}  // namespace kvstore
