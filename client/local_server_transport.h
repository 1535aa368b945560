// LocalServerTransport: a worker's ServerTransport that reaches the kvservers on its own host
// through shared memory (common/local_channel.h; the kvserver's end is server/grpc/
// local_listener.h) and every other one through another transport, gRPC's.
//
// A kvserver advertises its Unix socket and its host's boot id when it registers; a target
// whose server advertised this host's id gets `connections` local connections, each with a
// region of kSlots slots of kSlotBytes, which requests take in turn. A request is copied once
// into a free slot (none free: it waits for one, in order); the reply is read in place from the
// slot and handed to `done` as a ByteBuffer over it, after which the slot is free again. Every
// other target - another host, no local path advertised, a connection refused (logged), or a
// server that moved (Retarget: a replacement joined) - goes through `fallback`, which also
// runs every Probe. The requests are the very bytes the gRPC path sends: signatures, view
// epochs, request ids and errors are the same, and so is everything the caller does with them.
//
// Threading: as ServerTransport. Each connection has a reader thread (`kv-local-read`) that
// runs the `done` of its requests, and answers with DeadlineExceeded a request that has no
// reply by its deadline (its slot stays taken until the reply comes). A connection that fails
// answers its requests, and every later one, with Unavailable.
#ifndef KVSTORE_CLIENT_LOCAL_SERVER_TRANSPORT_H_
#define KVSTORE_CLIENT_LOCAL_SERVER_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/server_caller.h"
#include "client/server_transport.h"

namespace kvstore {

class LocalServerTransport final : public ServerTransport {
 public:
  // Slots a connection's region has, and bytes a slot: a request of up to 1 MiB of chunks
  // (client/chunk_requests.h) and its header fits, and so does a pull's reply.
  static constexpr uint32_t kSlots = 16;
  static constexpr uint64_t kSlotBytes = (1 << 20) + (64 << 10);

  // Wrap returns `fallback` as it is when no target's server is on this host, else a transport
  // that takes the local path to those that are. `targets` as ReplicaTargets gives them.
  static std::unique_ptr<ServerTransport> Wrap(const std::vector<ServerAddress>& targets,
                                               int connections,
                                               std::unique_ptr<ServerTransport> fallback);
  ~LocalServerTransport() override;

  void Send(int s, ServerMethod method, std::shared_ptr<const grpc::ByteBuffer> request,
            absl::Time deadline, uint64_t view_epoch, Done done) override;
  absl::Status Retarget(int s, const std::string& address) override;
  absl::Status Probe(int s, ServerMethod method, const grpc::ByteBuffer& request,
                     absl::Time deadline) override;
  void Close() override;

  // local_targets returns how many targets take the local path now.
  int local_targets() const;

 private:
  class Connection;
  struct Target {
    std::vector<std::unique_ptr<Connection>> connections;  // Empty: the fallback's.
    std::unique_ptr<std::atomic<bool>> local;              // Cleared by Retarget.
    std::unique_ptr<std::atomic<uint64_t>> next;
    bool backup = false;
  };

  explicit LocalServerTransport(std::unique_ptr<ServerTransport> fallback);

  std::vector<Target> targets_;
  std::unique_ptr<ServerTransport> fallback_;
  bool closed_ = false;
};

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_LOCAL_SERVER_TRANSPORT_H_
