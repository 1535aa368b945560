// CompletionThread: a gRPC completion queue and the one thread that polls it and runs what
// completes on it - the replies of a distributed store's calls to its servers
// (GrpcServerTransport).
//
// Each store starts one of its own unless DistOptions::completion_thread gives it one to share.
// Stores of one process should share one: gRPC polls every connection of a process from one
// thread at a time (its epoll1 engine), so with a queue and thread per store the thread that
// happens to poll reads the other stores' replies and wakes their threads to run them, one
// hand-off per read (docs/performance.md, entry 42). One process runs several stores when it
// is several workers (a benchmark, tests) or joins several jobs.
//
// Threading: Start and queue may be called from any thread. Every tag put on the queue must be
// a Completion; the thread runs each one's Complete. The destructor shuts the queue down and
// joins the thread: every call on the queue must have completed by then, and it must not run on
// the thread itself (a Completion that drops the last reference).
#ifndef KVSTORE_CLIENT_COMPLETION_THREAD_H_
#define KVSTORE_CLIENT_COMPLETION_THREAD_H_

#include <grpcpp/completion_queue.h>

#include <memory>
#include <thread>

namespace kvstore {

class CompletionThread {
 public:
  // Completion: what each tag on the queue is.
  class Completion {
   public:
    // Complete runs on the thread once the tag's operation is over (`ok` as gRPC reports it);
    // it may delete the object.
    virtual void Complete(bool ok) = 0;

   protected:
    ~Completion() = default;
  };

  // Start starts the thread ("kv-completion").
  static std::shared_ptr<CompletionThread> Start();
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  grpc::CompletionQueue* queue() { return &cq_; }

 private:
  CompletionThread() = default;

  grpc::CompletionQueue cq_;
  std::thread thread_;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_COMPLETION_THREAD_H_
