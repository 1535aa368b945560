#include "server/scheduler/core/barriers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstore {

absl::StatusOr<std::optional<Barriers::Passed>> Barriers::Enter(int group, uint64_t node_id,
                                                                absl::Time now,
                                                                absl::Duration timeout, Done* done,
                                                                uint64_t sequence,
                                                                std::vector<Done>* passed_before) {
  if (auto open = open_.find(Key(group)); open != open_.end()) {
    const std::vector<uint64_t>& entered = open->second.entered;
    if (std::find(entered.begin(), entered.end(), node_id) != entered.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", node_id, " is already in this barrier"));
    }
  }
  if (sequence > 0 && passed_before != nullptr) {
    // A member got through this barrier: it passed before (a retry after a restart).
    for (const auto& [member, count] : through_[Key(group)]) {
      if (count >= sequence) {
        passed_before->push_back(std::move(*done));
        *done = nullptr;
        return std::optional<Passed>();
      }
    }
    // Entering barrier n, this node got through n - 1.
    for (Done& released : Through(group, node_id, sequence - 1)) {
      passed_before->push_back(std::move(released));
    }
  }
  Barrier& barrier = open_[Key(group)];
  if (barrier.entered.empty()) {
    barrier.opened = now;
    barrier.deadline = now + timeout;
  }
  barrier.entered.push_back(node_id);
  barrier.sequence.push_back(sequence);
  barrier.done.push_back(std::move(*done));
  *done = nullptr;
  if (Entered(barrier.entered) != Living(group)) return std::optional<Passed>();
  Passed passed{Key(group), barrier.entered.size(), now - barrier.opened, std::move(barrier.done)};
  open_.erase(Key(group));
  return std::optional<Passed>(std::move(passed));
}

std::vector<Barriers::Done> Barriers::Through(int group, uint64_t node_id, uint64_t count) {
  std::vector<Done> released;
  if (count == 0) return released;
  uint64_t& through = through_[Key(group)][node_id];
  through = std::max(through, count);
  auto it = open_.find(Key(group));
  if (it == open_.end()) return released;
  // Entries waiting for a barrier this node got through: it passed.
  Barrier& barrier = it->second;
  for (size_t i = 0; i < barrier.entered.size();) {
    if (barrier.sequence[i] == 0 || barrier.sequence[i] > count) {
      ++i;
      continue;
    }
    released.push_back(std::move(barrier.done[i]));
    barrier.entered.erase(barrier.entered.begin() + i);
    barrier.sequence.erase(barrier.sequence.begin() + i);
    barrier.done.erase(barrier.done.begin() + i);
  }
  if (barrier.entered.empty()) open_.erase(it);
  return released;
}

std::vector<Barriers::Passed> Barriers::Left(uint64_t node_id) {
  left_.insert(node_id);
  std::vector<Passed> passed;
  for (auto it = open_.begin(); it != open_.end();) {
    Barrier& barrier = it->second;
    if (barrier.entered.empty() || Entered(barrier.entered) != Living(it->first)) {
      ++it;
      continue;
    }
    passed.push_back(Passed{it->first, static_cast<size_t>(Entered(barrier.entered)),
                            absl::ZeroDuration(), std::move(barrier.done)});
    it = open_.erase(it);
  }
  return passed;
}

std::vector<Barriers::Expired> Barriers::Expire(absl::Time now) {
  std::vector<Expired> expired;
  for (auto it = open_.begin(); it != open_.end();) {
    if (now <= it->second.deadline) {
      ++it;
      continue;
    }
    expired.push_back(
        Expired{it->first, std::move(it->second.entered), std::move(it->second.done)});
    it = open_.erase(it);
  }
  return expired;
}

std::vector<Barriers::Done> Barriers::TakeAll() {
  std::vector<Done> all;
  for (auto& [group, barrier] : open_) {
    for (Done& done : barrier.done) all.push_back(std::move(done));
  }
  open_.clear();
  return all;
}

int Barriers::Size(int group) const {
  return ((group & kGroupServers) ? num_servers_ : 0) +
         ((group & kGroupWorkers) ? num_workers_ : 0);
}

int Barriers::Living(int group) const {
  return Size(group) - ((group & kGroupWorkers) ? static_cast<int>(left_.size()) : 0);
}

int Barriers::Entered(const std::vector<uint64_t>& entered) const {
  int living = 0;
  for (uint64_t id : entered) living += !left_.contains(id);
  return living;
}

std::vector<std::pair<int, std::vector<uint64_t>>> Barriers::Open() const {
  std::vector<std::pair<int, std::vector<uint64_t>>> open;
  for (const auto& [group, barrier] : open_) {
    if (!barrier.entered.empty()) open.emplace_back(group, barrier.entered);
  }
  return open;
}

}  // namespace kvstore
