// ShardCopySender: how a kvserver sends a copy of a shard it holds straight to another kvserver
// (controller command 14 "send", server/core/controller.h): a replacement server joining the
// job receives its shards from the servers that hold their living copies, not through the
// scheduler (server/scheduler/core/server_joiner.h).
//
// Send reads the copy (server/core/copy_source.h) page by page, each of at most
// Options::page_bytes and ended where the source says, and keeps Options::pages_in_flight of
// them travelling at once, each a command 15 "put OFFSET CRC32\n" + bytes on the receiver's Command
// method (BackupCommand for its backup engine), sent under this server's node id and, in a job
// with a secret, signed with its node token (common/request_signature.h). The receiver takes
// pages only from the node the scheduler named when it began the copy (command 15 "begin"),
// and checks each page's CRC-32. The source's head (a streamed shard's header) is accepted
// whole before any later page is read.
// Every page has a deadline; the first error stops the sending and is returned, naming the
// page and the receiver. Nothing is retried: the scheduler fails the join, and the copy is
// sent again by the next one.
//
// Threading: Send blocks and may be called from several threads. The sender keeps one channel
// per receiver for its lifetime.
#ifndef KVSTORE_SERVER_GRPC_SHARD_COPY_SENDER_H_
#define KVSTORE_SERVER_GRPC_SHARD_COPY_SENDER_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/request_signature.h"
#include "server/core/copy_source.h"

namespace kvstore {

class ShardCopySender {
 public:
  struct Options {
    uint64_t node_id = 0;
    // This server's node token; empty in a job without a secret (nothing is signed).
    std::string node_token;
    bool signed_payloads = false;
    // The channel credentials of the job (ChannelCredentialsFor); null: plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    absl::Duration page_timeout = absl::Seconds(60);
    // A page fits in any kvserver's largest request (its header allowance alone is 16 MiB).
    size_t page_bytes = size_t{4} << 20;
    int pages_in_flight = 4;
  };

  explicit ShardCopySender(Options options);

  // Send sends `copy` into the server at `address` (its backup engine with `backup`) and
  // returns once every page was accepted, or the first error (the source's, naming the page,
  // or the receiver's).
  absl::Status Send(const std::string& address, bool backup, const CopySource& copy) const;

 private:
  // PageOf reads bytes [begin, end) of `copy` into a command 15 "put" request; the source's
  // error otherwise.
  absl::StatusOr<grpc::ByteBuffer> PageOf(const CopySource& copy, uint64_t begin,
                                          uint64_t end) const;
  // StubFor returns the stub of the server at `address`, made once: a channel dropped by its
  // last call's callback would be destroyed on one of gRPC's own threads.
  std::shared_ptr<grpc::GenericStub> StubFor(const std::string& address) const;

  const Options options_;
  // Signs every page (a job with a secret); its sequence only moves on, so it is shared.
  std::unique_ptr<RequestSigner> signer_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_GRPC_SHARD_COPY_SENDER_H_
