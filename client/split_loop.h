// SplitLoop: runs a loop over a range on the calling thread and one helper thread at once.
//
// Checking a call of 100,000 keys reads every Tensor handle and Key the caller passed - about
// 10 MB, which one core reads from the last-level cache at 20-25 GB/s. Two cores read it in
// about half the time, and while the SDK's caller checks its values the job's other threads
// (the completion thread, the servers) have nothing to do.
//
// The range is cut into blocks that both threads take in turn, so Run never waits for the
// helper to wake up: when the helper has not started by the time the caller runs out of
// blocks, the caller has done them all. Concurrent Run calls are allowed; while the helper is
// busy with one, the others run on their own threads alone.
#ifndef KVSTORE_CLIENT_SPLIT_LOOP_H_
#define KVSTORE_CLIENT_SPLIT_LOOP_H_

#include <atomic>
#include <cstddef>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace kvstore {

class SplitLoop {
 public:
  SplitLoop() = default;
  SplitLoop(const SplitLoop&) = delete;
  SplitLoop& operator=(const SplitLoop&) = delete;
  // Joins the helper; no Run may be in progress.
  ~SplitLoop();

  // Calls body(begin, end) for consecutive blocks of at most `block` indices covering
  // [0, n), each exactly once, some on the calling thread and some on the helper (started on
  // first use), in no particular order; returns when all have returned. Below two blocks, or
  // while another Run holds the helper, everything runs on the calling thread.
  void Run(size_t n, size_t block, absl::FunctionRef<void(size_t, size_t)> body);

 private:
  struct Task {
    size_t n = 0;
    size_t block = 0;
    absl::FunctionRef<void(size_t, size_t)> body;
    std::atomic<size_t> next{0};  // The next block to take.
  };
  static void Drain(Task& task);
  void HelperLoop();
  bool HelperWanted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || task_ != nullptr;
  }

  std::atomic<bool> claimed_{false};  // A Run is using the helper.
  absl::Mutex mu_;
  Task* task_ ABSL_GUARDED_BY(mu_) = nullptr;     // Published by Run until it returns.
  bool helper_idle_ ABSL_GUARDED_BY(mu_) = true;  // False while the helper works on a task.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread helper_;  // Started by the first Run that uses it (under claimed_).
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_SPLIT_LOOP_H_
