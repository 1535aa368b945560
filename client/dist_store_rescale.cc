// DistStore: following the job's servers when they change while it runs (dist_store.h, "When
// the job's servers change").
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/dist_store.h"
#include "client/server_caller.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/view_epoch.h"

namespace kvstore {

void DistStore::OnRouting(const JobState& state) {
  absl::MutexLock lock(&rescale_mu_);
  const bool other_count = !state.servers.empty() && state.servers.size() != servers_now_.size();
  if (membership_->view().replicas > 1) {
    if (!other_count) {
      // Dead servers and replacements: the caller routes around them itself.
      caller_->ApplyView(state.view_epoch, state.servers, state.dead_servers);
    } else {
      caller_->Supersede(state.view_epoch);
    }
  }
  if (state.view_epoch <= heard_epoch_ || state.servers.empty()) return;
  heard_epoch_ = state.view_epoch;
  heard_servers_ = state.servers;
  heard_dead_ = state.dead_servers;
  // Followed at once, not only when a server refuses a request: a drained server exits soon.
  // (With replicas, a view of as many servers is the caller's own to follow.)
  if (membership_->view().replicas <= 1 || other_count) {
    needed_epoch_ = std::max(needed_epoch_, heard_epoch_);
  }
  rescale_changed_.SignalAll();
}

bool DistStore::NeedsSwitch(const absl::Status& status, uint64_t epoch, uint64_t* needed) {
  if (status.ok()) return false;
  if (const std::optional<uint64_t> required = RequiredViewEpoch(status)) {
    *needed = *required;
    return true;
  }
  // A server that was drained may be gone already: an operation that failed after a view of
  // other servers was heard of goes again on that view. (With replicas, a view of as many
  // servers - a replacement joined - is the caller's own to follow.)
  absl::MutexLock lock(&rescale_mu_);
  const bool other_servers =
      membership_->view().replicas <= 1 || heard_servers_.size() != servers_now_.size();
  if (heard_epoch_ > epoch && other_servers && !absl::IsInvalidArgument(status) &&
      !absl::IsNotFound(status)) {
    *needed = heard_epoch_;
    return true;
  }
  return false;
}

void DistStore::Enter() {
  absl::MutexLock lock(&rescale_mu_);
  while (switching_) rescale_changed_.Wait(&rescale_mu_);
  ++active_;
}

void DistStore::Leave() {
  absl::MutexLock lock(&rescale_mu_);
  --active_;
  rescale_changed_.SignalAll();
}

absl::Status DistStore::Ungroup(Op* op, std::vector<std::unique_ptr<Tensor>>* outputs) const {
  const GroupPlan& group = *op->group;
  const GroupWork& work = op->group_work;
  const bool pushes = op->kind != Kind::kPull;
  const bool pulls = op->kind != Kind::kPush;
  std::vector<Tensor> values;
  std::vector<Tensor*> outs;
  for (size_t i = 0; i < group.keys.size(); ++i) {
    const uint32_t first = group.dims_at[i];
    const Shape shape(group.dims.begin() + first, group.dims.begin() + group.dims_at[i + 1]);
    if (pushes) values.push_back(Tensor::Zeros(group.dtypes[i], shape));
    if (pulls) outputs->push_back(std::make_unique<Tensor>());
  }
  // Each member's bytes, from where the group's packing put them (pushes), or to where its
  // outputs are (pulls).
  for (size_t p = 0; p < group.parts.size(); ++p) {
    const GroupPlan::Part& part = group.parts[p];
    for (size_t j = 0; j < part.members.size(); ++j) {
      const GroupPlan::Member& m = part.members[j];
      const size_t bytes = part.offsets[j + 1] - part.offsets[j];
      if (pushes) {
        std::memcpy(static_cast<uint8_t*>(values[m.key].data()) + m.value_offset,
                    static_cast<const uint8_t*>(work.packed[p].data()) + part.offsets[j], bytes);
      }
      if (pulls && m.value_offset == 0) {
        uint8_t* base =
            !work.out_data.empty() ? work.out_data[m.key] : work.out_bases[p] + part.offsets[j];
        const uint32_t first = group.dims_at[m.key];
        *(*outputs)[m.key] = Tensor::Borrow(
            base, group.dtypes[m.key],
            Shape(group.dims.begin() + first, group.dims.begin() + group.dims_at[m.key + 1]));
      }
    }
  }
  for (const std::unique_ptr<Tensor>& out : *outputs) outs.push_back(out.get());
  ASSIGN_OR_RETURN(op->work, keys_->Plan(group.keys, values, outs));
  op->keys = group.keys;
  op->group = nullptr;
  op->group_work = GroupWork();
  return absl::OkStatus();
}

void DistStore::Run(Op op, OpDone done, int reroutes) {
  Enter();
  const uint64_t epoch = caller_->view_epoch();
  if (op.group != nullptr && op.group->num_servers != caller_->num_servers()) {
    // Packed for the servers of an earlier view: sent key by key to those of this one (the
    // next call of the list forms a group over them). The outputs' views live with `done`.
    auto outputs = std::make_shared<std::vector<std::unique_ptr<Tensor>>>();
    if (const absl::Status ungrouped = Ungroup(&op, outputs.get()); !ungrouped.ok()) {
      Leave();
      return done(ungrouped);
    }
    done = [outputs, done = std::move(done)](absl::Status status) { done(std::move(status)); };
  }
  // The operation is kept to be sent again; its transfer takes a copy.
  auto kept = std::make_shared<Op>(op);
  OpDone finished = [this, kept, done = std::move(done), reroutes,
                     epoch](absl::Status status) mutable {
    uint64_t needed = 0;
    if (reroutes < ServerCaller::kMaxReroutes && NeedsSwitch(status, epoch, &needed)) {
      return Park(std::move(*kept), std::move(done), reroutes + 1, needed);
    }
    Leave();
    done(std::move(status));
  };
  Transfer(std::move(op), std::move(finished));
}

void DistStore::Park(Op op, OpDone done, int reroutes, uint64_t needed) {
  absl::MutexLock lock(&rescale_mu_);
  --active_;
  parked_.push_back(Parked{std::move(op), std::move(done), reroutes});
  needed_epoch_ = std::max(needed_epoch_, needed);
  rescale_changed_.SignalAll();
}

absl::Status DistStore::Rerouted(const std::function<absl::Status()>& call) {
  for (int reroutes = 0;; ++reroutes) {
    if (!rescalable_) return call();
    Enter();
    const uint64_t epoch = caller_->view_epoch();
    absl::Status status = call();
    uint64_t needed = 0;
    const bool again = reroutes < ServerCaller::kMaxReroutes && NeedsSwitch(status, epoch, &needed);
    {
      absl::MutexLock lock(&rescale_mu_);
      --active_;
      if (again) needed_epoch_ = std::max(needed_epoch_, needed);
      rescale_changed_.SignalAll();
    }
    if (!again) return status;
    // Wait for the switch to that view (bounded by the call timeout), then send again.
    const absl::Time give_up = absl::Now() + options_.rpc_timeout;
    absl::MutexLock lock(&rescale_mu_);
    while (!stopping_ && caller_->view_epoch() < needed &&
           !rescale_changed_.WaitWithDeadline(&rescale_mu_, give_up)) {
    }
    if (caller_->view_epoch() < needed) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(options_.rpc_timeout), " for the job's view epoch ",
          needed, " (its servers changed); this worker has epoch ", caller_->view_epoch(),
          " (after: ", status.message(), ")"));
    }
  }
}

void DistStore::RescaleLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&rescale_mu_);
      while (!stopping_ && needed_epoch_ <= caller_->view_epoch()) {
        rescale_changed_.Wait(&rescale_mu_);
      }
      if (stopping_) return;
    }
    SwitchServers();
  }
}

void DistStore::SwitchServers() {
  const absl::Time give_up = absl::Now() + options_.rpc_timeout;
  uint64_t needed = 0;
  {
    absl::MutexLock lock(&rescale_mu_);
    needed = needed_epoch_;
  }
  // The view, from the scheduler: heartbeats may not have brought it yet.
  absl::Status status;
  while (true) {
    {
      absl::MutexLock lock(&rescale_mu_);
      if (heard_epoch_ >= needed || stopping_) break;
    }
    if (absl::Now() > give_up) {
      status = absl::DeadlineExceededError(
          absl::StrCat("waited ", absl::FormatDuration(options_.rpc_timeout),
                       " for the scheduler's view epoch ", needed, " (the job's servers changed)"));
      break;
    }
    const absl::Status refreshed = membership_->RefreshRouting();
    if (!refreshed.ok()) {
      SdkLogger()->warn("worker {}: asking the scheduler for the new view: {}", rank(),
                        refreshed.ToString());
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  uint64_t epoch = 0;
  std::vector<ServerAddress> servers;
  std::vector<int> dead;
  std::vector<ServerAddress> now;
  {
    absl::MutexLock lock(&rescale_mu_);
    epoch = heard_epoch_;
    servers = heard_servers_;
    dead = heard_dead_;
    now = servers_now_;
  }
  // The same servers: the same addresses; with replicas as many servers (the caller follows a
  // replacement at a new address itself).
  const bool replicas = membership_->view().replicas > 1;
  const auto same = [replicas](const std::vector<ServerAddress>& a,
                               const std::vector<ServerAddress>& b) {
    if (replicas) return a.size() == b.size();
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const ServerAddress& x, const ServerAddress& y) {
                        return x.rank == y.rank && x.address == y.address;
                      });
  };
  if (status.ok() && epoch > caller_->view_epoch() && same(servers, now)) {
    // The same servers at a later epoch (a rescale failed): routed by it from now on, while
    // the operations running go on - the servers accept both epochs.
    caller_->ApplyView(epoch, servers, dead);
    absl::MutexLock lock(&rescale_mu_);
    servers_now_ = servers;
  } else if (status.ok() && epoch > caller_->view_epoch()) {
    // Other servers: once no operation runs on the old ones (each is refused there), none
    // starts until the keys are placed over the new ones.
    absl::MutexLock lock(&rescale_mu_);
    while (active_ > 0 && !stopping_ && !rescale_changed_.WaitWithDeadline(&rescale_mu_, give_up)) {
    }
    if (active_ > 0) {
      status = absl::DeadlineExceededError(
          absl::StrCat("the job's servers changed (view epoch ", epoch, "), and ", active_,
                       " operations still ran on the old ones after ",
                       absl::FormatDuration(options_.rpc_timeout)));
    } else {
      switching_ = true;
    }
  }
  {
    bool reach = false;
    {
      absl::MutexLock lock(&rescale_mu_);
      reach = switching_;
    }
    if (reach) status = Reach(epoch, servers, dead);
  }
  std::vector<Parked> parked;
  {
    absl::MutexLock lock(&rescale_mu_);
    if (!status.ok()) {
      // Nothing will get them further: they fail, and later ones are tried on the old view.
      needed_epoch_ = caller_->view_epoch();
    }
    switching_ = false;
    parked.swap(parked_);
    rescale_changed_.SignalAll();
  }
  for (Parked& entry : parked) {
    if (!status.ok()) {
      entry.done(status);
      continue;
    }
    Run(std::move(entry.op), std::move(entry.done), entry.reroutes);
  }
}

absl::Status DistStore::Reach(uint64_t epoch, const std::vector<ServerAddress>& servers,
                              const std::vector<int>& dead) {
  JobView view = membership_->view();
  view.servers = servers;
  ASSIGN_OR_RETURN(std::unique_ptr<ServerTransport> transport, make_transport_(view));
  auto caller = std::make_unique<ServerCaller>(
      transport.get(), servers,
      CallPolicy{options_.rpc_timeout, options_.max_retries, options_.retry_backoff, view.replicas},
      timer_.get());
  caller->ApplyView(epoch, servers, dead);
  FailOver(caller.get());
  if (signer_ != nullptr) caller->set_signer(signer_.get());
  if (WorkerTelemetry* t = telemetry_.get()) {
    caller->set_observer([t](int server, ServerMethod method, size_t request_bytes,
                             size_t reply_bytes, absl::Time sent, absl::Time answered,
                             absl::StatusCode code) {
      t->RequestDone(server, method, request_bytes, reply_bytes, sent, answered, code);
    });
  }
  const int count = static_cast<int>(servers.size());
  ASSIGN_OR_RETURN(Partitioner partitioner, Partitioner::Create(count, view.big_value_bound));
  const size_t before = context_.window / std::max<size_t>(1, caller_->num_servers());
  keys_->Replace(std::move(partitioner));
  groups_->Reset(count);
  context_.caller = caller.get();
  context_.window = before * static_cast<size_t>(count);
  SdkLogger()->info("worker {}: the job's servers changed: {} servers at view epoch {}", rank(),
                    count, epoch);
  absl::MutexLock lock(&rescale_mu_);
  retired_transports_.push_back(std::move(transport_));
  retired_callers_.push_back(std::move(caller_));
  transport_ = std::move(transport);
  caller_ = std::move(caller);
  servers_now_ = servers;
  return absl::OkStatus();
}

}  // namespace kvstore
