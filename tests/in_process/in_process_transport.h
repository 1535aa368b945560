// InProcessServerTransport: the ServerTransport of a job whose servers run in this process
// (in_process_job.h): a request is handed, as its frame, to the server's request handler
// (server/core/request_handler.h) - the same decoding, checks, engine calls and encoding as a
// kvserver behind gRPC, without a socket, a connection or gRPC's threads.
//
// Replies run on a completion thread of the transport's own ("kv-completion"), as they do
// over gRPC, so a worker's code runs on the same threads with either transport. A request
// still unanswered at its deadline (a dist_sync push whose round waits for a worker that never
// pushes) completes with DeadlineExceeded; its late answer is dropped.
//
// Threading: as ServerTransport.
#ifndef KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_TRANSPORT_H_
#define KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_TRANSPORT_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/server_transport.h"
#include "server/core/server_backend.h"

namespace kvstore {

// InProcessServer: one server of an in-process job - its backend once the job has assembled
// (null before: requests are answered UNAVAILABLE). Thread-safe.
class InProcessServer {
 public:
  void SetBackend(std::shared_ptr<ServerBackend> backend);
  std::shared_ptr<ServerBackend> backend() const;

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<ServerBackend> backend_ ABSL_GUARDED_BY(mu_);
};

class InProcessServerTransport final : public ServerTransport {
 public:
  // `servers` (in rank order) must outlive the transport. Starts the completion thread.
  explicit InProcessServerTransport(std::vector<const InProcessServer*> servers);
  ~InProcessServerTransport() override;

  void Send(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
            absl::Time deadline, uint64_t view_epoch, Done done) override;
  absl::Status Probe(int s, ServerMethod method, const grpc::ByteBuffer& request,
                     absl::Time deadline) override;
  void Close() override;

 private:
  struct Completions;

  const std::vector<const InProcessServer*> servers_;
  // Shared with the handlers' callbacks, which may outlive the transport.
  const std::shared_ptr<Completions> completions_;
  std::thread completer_;
};

}  // namespace kvstore

#endif  // KVSTORE_TESTS_IN_PROCESS_IN_PROCESS_TRANSPORT_H_
