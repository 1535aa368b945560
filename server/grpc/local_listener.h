// LocalListener: a kvserver's end of the shared-memory path for workers on its own host
// (common/local_channel.h has the wire; docs/colocated.md the design and its figures).
//
// It listens on a Unix socket; each worker connection gets a thread of its own (`kv-local`)
// that reads the hello and its shared region, then each request note, and hands the request -
// read in place from the worker's slot - to `handler`, the same handling the gRPC service runs
// (KVServerService::HandleLocal: signature check, view floor, engine). The handler answers when
// it is done, maybe later and on another thread (a dist_sync push is answered when its round is
// complete); the reply is copied into the request's slot (or sent inline when it does not fit)
// and announced by a reply note.
//
// Bad input never reaches the handler: a hello of another version, too many or too big slots,
// a region that is not a sealed memfd of the announced size, a peer of another user, a note
// naming a slot out of range or still busy, a method out of range or an inline request over
// `max_request_bytes` - each closes that connection with a log line naming the limit, and
// nothing else changes.
//
// Threading: thread-safe. Stop (also run by the destructor) closes the socket and every
// connection, joins their threads and removes the socket file; a handler's answer that comes
// later finds its connection closed and is dropped.
#ifndef KVSTORE_SERVER_GRPC_LOCAL_LISTENER_H_
#define KVSTORE_SERVER_GRPC_LOCAL_LISTENER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"

namespace kvstore {

class LocalListener {
 public:
  // Handler runs `request` of `method` (0 .. 2 * kNumServerMethods - 1: the Backup methods
  // follow the others), routed by `view_epoch`, and calls `done` exactly once, when `*response`
  // holds the reply or with the error. `request` is valid only during the call.
  using Handler =
      std::function<void(int method, const grpc::ByteBuffer& request, uint64_t view_epoch,
                         grpc::ByteBuffer* response, std::function<void(absl::Status)> done)>;

  // Start listens at `path` (a stale socket file there is replaced). `max_request_bytes`
  // bounds a request sent inline (a slot bounds the others).
  static absl::StatusOr<std::unique_ptr<LocalListener>> Start(std::string path,
                                                              int64_t max_request_bytes,
                                                              Handler handler);
  ~LocalListener();
  LocalListener(const LocalListener&) = delete;
  LocalListener& operator=(const LocalListener&) = delete;

  const std::string& path() const { return path_; }
  // connections returns how many workers' connections were accepted so far (tests, logs).
  int connections() const;
  void Stop();

 private:
  class Connection;

  LocalListener(std::string path, UniqueFd socket, int64_t max_request_bytes, Handler handler);
  void Accept();

  const std::string path_;
  UniqueFd socket_;
  const int64_t max_request_bytes_;
  const Handler handler_;
  std::thread accepting_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int accepted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_LOCAL_LISTENER_H_
