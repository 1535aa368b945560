#include "client/split_loop.h"

#include <algorithm>

#include "common/named_thread.h"

namespace kvstore {

SplitLoop::~SplitLoop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (helper_.joinable()) helper_.join();
}

void SplitLoop::Drain(Task& task) {
  while (true) {
    const size_t begin = task.next.fetch_add(1, std::memory_order_relaxed) * task.block;
    if (begin >= task.n) return;
    task.body(begin, std::min(task.n, begin + task.block));
  }
}

void SplitLoop::Run(size_t n, size_t block, absl::FunctionRef<void(size_t, size_t)> body) {
  block = std::max<size_t>(block, 1);
  if (n <= block || claimed_.exchange(true, std::memory_order_acquire)) {
    for (size_t begin = 0; begin < n; begin += block) body(begin, std::min(n, begin + block));
    return;
  }
  if (!helper_.joinable()) {
    helper_ = NamedThread("kv-split", [this] { HelperLoop(); });
  }
  Task task{n, block, body};
  {
    absl::MutexLock lock(&mu_);
    task_ = &task;  // Unlocking wakes the helper (it awaits task_ != nullptr).
  }
  Drain(task);
  // Every block is taken. Withdraw the task; if the helper took it, wait for its last block
  // (bounded by one block's work: it takes no more once `next` has passed the end).
  absl::MutexLock lock(&mu_);
  task_ = nullptr;
  mu_.Await(absl::Condition(&helper_idle_));
  claimed_.store(false, std::memory_order_release);
}

void SplitLoop::HelperLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &SplitLoop::HelperWanted));
    if (stopping_) return;
    Task* task = task_;
    task_ = nullptr;  // Taken once.
    helper_idle_ = false;
    mu_.Unlock();
    Drain(*task);
    mu_.Lock();
    helper_idle_ = true;
  }
}

}  // namespace kvstore
