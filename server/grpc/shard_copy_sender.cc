#include "server/grpc/shard_copy_sender.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/server_commands.h"
#include "common/server_methods.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

ShardCopySender::ShardCopySender(Options options) : options_(std::move(options)) {
  if (!options_.node_token.empty()) {
    signer_ = std::make_unique<RequestSigner>(options_.node_id, options_.node_token,
                                              options_.signed_payloads);
  }
}

std::shared_ptr<grpc::GenericStub> ShardCopySender::StubFor(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::GenericStub>& stub = stubs_[address];
  if (stub == nullptr) {
    stub = std::make_shared<grpc::GenericStub>(MakeChannel(address, options_.credentials));
  }
  return stub;
}

absl::Status ShardCopySender::Send(const std::string& address, bool backup,
                                   absl::string_view copy) const {
  const std::shared_ptr<grpc::GenericStub> stub = StubFor(address);
  const size_t page_bytes = std::max<size_t>(options_.page_bytes, 1);
  const size_t pages = (copy.size() + page_bytes - 1) / page_bytes;
  const char* method = GrpcMethodPath(ServerMethod::kCommand, backup);
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  // Shared with the calls' callbacks, which may still be returning when Send does.
  struct Progress {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    absl::Status failed ABSL_GUARDED_BY(mu);
  };
  auto progress = std::make_shared<Progress>();
  const std::string receiver =
      absl::StrCat("the server at ", address, backup ? " (its backup shard)" : "");
  for (size_t page = 0; page < pages; ++page) {
    {
      absl::MutexLock lock(&progress->mu);
      const int limit = options_.pages_in_flight;
      auto room = [&progress, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress->mu) {
        return progress->in_flight < limit || !progress->failed.ok();
      };
      progress->mu.Await(absl::Condition(&room));
      if (!progress->failed.ok()) break;
      ++progress->in_flight;
    }
    const size_t offset = page * page_bytes;
    const absl::string_view bytes = copy.substr(offset, page_bytes);
    proto::ServerCommandRequest command;
    command.set_node_id(options_.node_id);
    command.set_head(kCommandCopyIn);
    std::string* body = command.mutable_body();
    *body = absl::StrCat("put ", offset, "\n");
    body->append(bytes.data(), bytes.size());
    auto call = std::make_shared<Call>();
    call->request = EncodeMessage(command);
    if (signer_ != nullptr) {
      call->request = signer_->Sign({ServerMethod::kCommand, backup, address, 0}, call->request);
    }
    call->context.set_deadline(GrpcDeadline(absl::Now() + options_.page_timeout));
    stub->UnaryCall(&call->context, method, grpc::StubOptions(), &call->request, &call->reply,
                    [progress, call, receiver, offset, size = bytes.size(),
                     total = copy.size()](grpc::Status status) {
                      absl::MutexLock lock(&progress->mu);
                      --progress->in_flight;
                      if (!status.ok() && progress->failed.ok()) {
                        progress->failed =
                            absl::Status(FromGrpcStatus(status).code(),
                                         absl::StrCat("sending ", size, " bytes at ", offset,
                                                      " of a copy of ", total, " bytes to ",
                                                      receiver, ": ", status.error_message()));
                      }
                    });
  }
  absl::MutexLock lock(&progress->mu);
  auto idle = [&progress]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress->mu) { return progress->in_flight == 0; };
  progress->mu.Await(absl::Condition(&idle));
  return progress->failed;
}

}  // namespace kvstore
