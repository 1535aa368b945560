#include "client/op_queue.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "common/named_thread.h"

namespace kvstore {

OpQueue::OpQueue(Options options, Start start) : options_(options), start_(std::move(start)) {
  dispatcher_ = NamedThread("kv-dispatch", [this] { Dispatch(); });
}

OpQueue::~OpQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  dispatcher_.join();
}

void OpQueue::Enqueue(Op op) {
  absl::MutexLock lock(&mu_);
  const uint64_t seq = next_seq_++;
  for (const Key& key : op.keys) unfinished_[key].push_back(seq);
  if (op.group != nullptr) group_ops_.emplace(seq, op.group);
  live_.insert(seq);
  queued_.emplace(seq, std::move(op));
  changed_.SignalAll();
}

bool OpQueue::InGroupBefore(uint64_t seq, const Key& key) const {
  for (const auto& [group_seq, group] : group_ops_) {
    if (group_seq >= seq) break;
    if (group->members.contains(key)) return true;
  }
  return false;
}

bool OpQueue::Ready(uint64_t seq, const Op& op) const {
  // A key-group operation waits for every earlier operation (checking its members one by one
  // against the queue would cost what the group saves).
  if (op.group != nullptr) return *live_.begin() == seq;
  for (const Key& key : op.keys) {
    if (unfinished_.at(key).front() != seq) return false;
    if (!group_ops_.empty() && InGroupBefore(seq, key)) return false;
  }
  return true;
}

void OpQueue::Dispatch() {
  mu_.Lock();
  while (true) {
    if (stopping_ && queued_.empty()) break;
    auto best = queued_.end();
    if (inflight_ < options_.max_inflight) {
      for (auto it = queued_.begin(); it != queued_.end(); ++it) {
        if ((best == queued_.end() || it->second.priority > best->second.priority) &&
            Ready(it->first, it->second)) {
          best = it;
        }
      }
    }
    if (best == queued_.end()) {
      changed_.Wait(&mu_);
      continue;
    }
    // Fusion: other ready operations of the same kind and priority travel with this one, one
    // request per server, while the payload stays small. Ready operations never share a key.
    std::vector<std::pair<uint64_t, std::vector<Key>>> fused;
    const Kind kind = best->second.kind;
    const int priority = best->second.priority;
    const CompressionParams compression = best->second.compression;
    int64_t bytes = best->second.bytes;
    if (best->second.group != nullptr) {
      Op op = std::move(best->second);
      const uint64_t seq = best->first;
      queued_.erase(best);
      ++inflight_;
      mu_.Unlock();
      start_(std::move(op), [this, seq](absl::Status status) {
        const std::pair<uint64_t, std::vector<Key>> done[] = {{seq, {}}};
        Complete(done, status);
      });
      mu_.Lock();
      continue;
    }
    Op op;
    op.kind = kind;
    op.priority = priority;
    op.compression = compression;
    op.queued = best->second.queued;
    op.work = std::move(best->second.work);
    fused.emplace_back(best->first, std::move(best->second.keys));
    queued_.erase(best);
    const bool dense = kind == Kind::kPush || kind == Kind::kPull || kind == Kind::kPushPull;
    const bool fusable = kind == Kind::kPull || options_.fuse_pushes;
    if (dense && fusable && bytes < options_.fusion_bytes) {
      for (auto it = queued_.begin(); it != queued_.end();) {
        Op& other = it->second;
        if (other.kind != kind || other.priority != priority || other.group != nullptr ||
            other.compression != compression || bytes + other.bytes > options_.fusion_bytes ||
            !Ready(it->first, other)) {
          ++it;
          continue;
        }
        bytes += other.bytes;
        for (KeyWork& entry : other.work) op.work.push_back(std::move(entry));
        fused.emplace_back(it->first, std::move(other.keys));
        it = queued_.erase(it);
      }
    }
    inflight_ += static_cast<int>(fused.size());
    mu_.Unlock();
    auto complete = [this, fused = std::move(fused)](absl::Status status) {
      Complete(fused, status);
    };
    op.bytes = bytes;
    start_(std::move(op), std::move(complete));
    mu_.Lock();
  }
  mu_.Unlock();
}

namespace {
// Empty per-key maps with more slots than this are given back.
constexpr size_t kShrinkAbove = 4096;
}  // namespace

void OpQueue::Complete(absl::Span<const std::pair<uint64_t, std::vector<Key>>> ops,
                       const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (const auto& [seq, keys] : ops) {
    --inflight_;
    live_.erase(seq);
    if (auto it = group_ops_.find(seq); it != group_ops_.end()) {
      if (!status.ok()) group_errors_.emplace_back(it->second, status);
      group_ops_.erase(it);
    }
    for (const Key& key : keys) {
      auto it = unfinished_.find(key);
      if (it != unfinished_.end()) {
        auto& queue = it->second;
        queue.erase(std::find(queue.begin(), queue.end(), seq));
        if (queue.empty()) unfinished_.erase(it);
      }
      if (!status.ok()) key_errors_.emplace(key, status);
    }
  }
  // A call with many keys (an Init of 100,000) leaves the map that large but empty; every later
  // small operation would then touch a table of megabytes.
  if (unfinished_.empty() && unfinished_.capacity() > kShrinkAbove) unfinished_ = {};
  if (key_errors_.empty() && key_errors_.capacity() > kShrinkAbove) key_errors_ = {};
  // One wake-up for the whole batch: waiters re-check once, not once per operation.
  changed_.SignalAll();
}

absl::Status OpQueue::Wait(absl::Span<const Key> keys) {
  absl::MutexLock lock(&mu_);
  auto busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Key& key : keys) {
      if (unfinished_.contains(key)) return true;
      if (!group_ops_.empty() && InGroupBefore(next_seq_, key)) return true;
    }
    return false;
  };
  SpinWhile(busy);
  while (busy()) changed_.Wait(&mu_);
  absl::Status first;
  for (const Key& key : keys) {
    auto it = key_errors_.find(key);
    if (it == key_errors_.end()) continue;
    if (first.ok()) first = it->second;
    key_errors_.erase(it);
  }
  for (auto it = group_errors_.begin(); it != group_errors_.end();) {
    const bool member = std::any_of(
        keys.begin(), keys.end(), [&](const Key& key) { return it->first->members.contains(key); });
    if (!member) {
      ++it;
      continue;
    }
    if (first.ok()) first = it->second;
    it = group_errors_.erase(it);
  }
  return first;
}

namespace {
// Wait and WaitAll spin (yielding) this long before sleeping, when at most kSpinMaxOps
// operations are in flight.
constexpr absl::Duration kWaitSpin = absl::Microseconds(250);
constexpr size_t kSpinMaxOps = 2;
}  // namespace

template <typename Busy>
void OpQueue::SpinWhile(Busy busy) {
  // Only for a few operations in flight: a round trip then takes about as long as the sleep
  // and wake-up the spin avoids (tens of microseconds each on a VM); many operations finish
  // later and the waiter sleeps.
  if (live_.size() > kSpinMaxOps) return;
  const absl::Time until = absl::Now() + kWaitSpin;
  while (busy() && absl::Now() < until) {
    mu_.Unlock();
    std::this_thread::yield();
    mu_.Lock();
  }
}

absl::Status OpQueue::WaitAll() {
  absl::MutexLock lock(&mu_);
  auto busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !live_.empty() || inflight_ > 0; };
  SpinWhile(busy);
  while (busy()) changed_.Wait(&mu_);
  absl::Status first;
  for (const auto& [key, status] : key_errors_) {
    if (first.ok()) first = status;
  }
  for (const auto& [group, status] : group_errors_) {
    if (first.ok()) first = status;
  }
  key_errors_.clear();
  group_errors_.clear();
  return first;
}

}  // namespace kvstore
