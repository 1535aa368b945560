// KVServerService: the gRPC adapter of a kvserver. It receives calls and hands each to the
// transport-neutral request handler (request_handler.h), which decodes it, runs it on the
// ServerEngine or the Controller and encodes the reply; nothing else.
//
// Every method is a raw method of gRPC's async API: tensor-carrying requests arrive as the
// framed ByteBuffer described in proto/kvstore.proto, and the engine reads the payload from the
// received slices without a protobuf copy; pulled values go out as slices over the pulled
// tensors. Calls arrive on completion queues that each have one serving thread of the
// daemon's own (Serve), which reads, runs and answers them: no hand-off between threads, and
// no second poller woken on every event (gRPC's callback API keeps two threads polling one
// queue, and each event wakes the other; see docs/performance.md, entry 25). A dist_sync push
// is answered from the engine's completion callback, when its round is complete, so no
// handler ever blocks its thread.
//
// Until SetBackend is called (the server has not yet received the cluster view) every method
// answers UNAVAILABLE, which clients retry. The Backup methods run on the backup backend, the
// copy of the previous rank's shard a kvserver holds in a job with replicas; without one they
// answer FAILED_PRECONDITION.
#ifndef KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_
#define KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/request_signature.h"
#include "common/serving_tag.h"
#include "proto/kvstore.grpc.pb.h"
#include "server/core/request_handler.h"
#include "server/grpc/kvserver_metrics.h"

namespace kvstore {

using RawAsyncKVServerService = proto::KVServer::WithRawMethod_Init<
    proto::KVServer::WithRawMethod_Push<proto::KVServer::WithRawMethod_Pull<
        proto::KVServer::WithRawMethod_PushPull<proto::KVServer::WithRawMethod_RowSparsePull<
            proto::KVServer::WithRawMethod_Command<proto::KVServer::WithRawMethod_TableInit<
                proto::KVServer::WithRawMethod_TablePush<proto::KVServer::WithRawMethod_TablePull<
                    proto::KVServer::WithRawMethod_BackupInit<
                        proto::KVServer::WithRawMethod_BackupPush<
                            proto::KVServer::WithRawMethod_BackupPull<
                                proto::KVServer::WithRawMethod_BackupPushPull<
                                    proto::KVServer::WithRawMethod_BackupRowSparsePull<
                                        proto::KVServer::WithRawMethod_BackupCommand<
                                            proto::KVServer::WithRawMethod_BackupTableInit<
                                                proto::KVServer::WithRawMethod_BackupTablePush<
                                                    proto::KVServer::WithRawMethod_BackupTablePull<
                                                        proto::KVServer::Service>>>>>>>>>>>>>>>>>>;

class KVServerService final : public RawAsyncKVServerService {
 public:
  KVServerService() = default;

  // SetBackend starts serving with `backend`. With `verifier` (a job with a secret), every
  // request must carry a signature it accepts (common/request_signature.h) - checked first,
  // before anything of the request is acted on or any answer tells about this server - and
  // name the node that signed it; without, calls are not checked (HandleServerRequest).
  // Thread-safe.
  void SetBackend(std::shared_ptr<ServerBackend> backend,
                  std::shared_ptr<const RequestVerifier> verifier = nullptr,
                  std::shared_ptr<ServerBackend> backup = nullptr);
  std::shared_ptr<ServerBackend> backend() const;
  // backup returns the backup backend (null without replicas, or before SetBackend).
  std::shared_ptr<ServerBackend> backup() const;
  // SetMetrics makes every answered call counted in `metrics` (requests, bytes, latency,
  // errors; kvserver_metrics.h). Call before Serve; `metrics` must outlive the service.
  void SetMetrics(KVServerMetrics* metrics) { metrics_ = metrics; }

  // Serve asks for calls of every method on `cq` and runs them until the queue shuts down and
  // is drained. The daemon runs it on one thread per completion queue. Every tag on `cq` must
  // be a ServingTag (common/serving_tag.h): calls of other services asked for on the same
  // queue (the health service) are served by the same thread. After answering a call with a
  // small reply (under kSmallReplyBytes: any push, or a small pull) the thread polls `cq` for
  // `poll` before it sleeps: where idle CPUs halt (virtual machines), waking a sleeping thread
  // takes tens of microseconds, more than a small call's own work, and the next call of a
  // training loop, or the next chunk of a big push, tends to come within that time. A call with
  // a big reply never polls: the worker is still receiving it, and a polling thread would take
  // a CPU from that (docs/performance.md, entries 37 and 46).
  void Serve(grpc::ServerCompletionQueue* cq, absl::Duration poll);
  static constexpr size_t kSmallReplyBytes = 64 << 10;
  // StopServing makes the serving threads drop every later event: once it returns, no call is
  // asked for or answered any more, and the completion queues may be shut down. Call it after
  // the server's Shutdown.
  void StopServing();

  // HandleLocal runs a request that came another way than gRPC (the shared-memory path for
  // workers on this host, local_listener.h) exactly as a gRPC call of method `method_index` (the
  // Backup methods follow the others) is run - signature, view floor, backend - and counts it in
  // the metrics; `view_epoch` is what the transport says the request was routed by (a signed
  // request's own counts in a job with a secret). Contract as HandleServerRequest's.
  void HandleLocal(int method_index, const grpc::ByteBuffer& request, uint64_t view_epoch,
                   grpc::ByteBuffer* response, std::function<void(absl::Status)> done) const;

 private:
  class Call;

  // Dispatch runs one request of either transport: the signature checked first (a job with a
  // secret), then the backend chosen and the request handled. `unsigned_view_epoch` reads the
  // view an unsigned request was routed by, called only once the view floor is above 0.
  void Dispatch(int method_index, const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                std::function<void(absl::Status)> done,
                absl::FunctionRef<uint64_t()> unsigned_view_epoch) const;

  // Serving returns the backend a method runs on (the backup's for a Backup method), the
  // primary one, and the verifier of signatures.
  void Serving(bool backup, std::shared_ptr<ServerBackend>* backend,
               std::shared_ptr<ServerBackend>* primary,
               std::shared_ptr<const RequestVerifier>* verifier) const;

  mutable absl::Mutex mu_;
  std::shared_ptr<ServerBackend> backend_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ServerBackend> backup_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const RequestVerifier> verifier_ ABSL_GUARDED_BY(mu_);
  KVServerMetrics* metrics_ = nullptr;  // Set before serving; optional.
  absl::Mutex serving_mu_;
  bool stopped_ ABSL_GUARDED_BY(serving_mu_) = false;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_KVSERVER_SERVICE_H_
