#include "client/server_caller.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

absl::Status ServerCaller::ServerError(int s, const absl::Status& status) const {
  return absl::Status(status.code(), absl::StrCat("server ", servers_[s].rank, " at ",
                                                  servers_[s].address, ": ", status.message()));
}

void ServerCaller::Call(int s, ServerMethod method,
                        std::shared_ptr<const grpc::ByteBuffer> request,
                        ServerTransport::Done done) {
  if (observer_) {
    const size_t request_bytes = request->Length();
    done = [this, s, method, request_bytes, sent = absl::Now(),
            done = std::move(done)](absl::Status status, grpc::ByteBuffer* reply) {
      observer_(s, method, request_bytes, reply != nullptr ? reply->Length() : 0, sent,
                absl::Now(), status.code());
      done(std::move(status), reply);
    };
  }
  Attempt(s, method, std::move(request), std::move(done), 0);
}

void ServerCaller::Attempt(int s, ServerMethod method,
                           std::shared_ptr<const grpc::ByteBuffer> request,
                           ServerTransport::Done done, int attempt) {
  const absl::Time deadline = absl::Now() + policy_.rpc_timeout;
  transport_->Send(
      s, method, request, deadline,
      [this, s, method, request, done = std::move(done), attempt](absl::Status status,
                                                                  grpc::ByteBuffer* reply) {
        if (status.ok()) {
          done(status, reply);
          return;
        }
        // The SDK never cancels its own data calls: a cancelled one was cancelled by the
        // server, which is stopping (SIGTERM, shutdown). Retried as for a server that is down,
        // under the same request id (applied at most once).
        if (absl::IsCancelled(status)) {
          status = absl::UnavailableError(absl::StrCat(
              "the server cancelled the call (it is stopping): ", status.message()));
        }
        if (absl::IsUnavailable(status) && attempt < policy_.max_retries) {
          const absl::Duration backoff = std::min(
              policy_.retry_backoff * (1 << std::min(attempt, 16)), absl::Seconds(2));
          timer_->After(backoff, [this, s, method, request, done, attempt] {
            Attempt(s, method, request, done, attempt + 1);
          });
          return;
        }
        if (absl::IsUnavailable(status)) {
          status = absl::UnavailableError(absl::StrCat("unreachable after ", attempt + 1,
                                                       " attempts: ", status.message()));
        } else if (absl::IsDeadlineExceeded(status)) {
          status = absl::DeadlineExceededError(absl::StrCat(
              "no answer within ", absl::FormatDuration(policy_.rpc_timeout), " (",
              GrpcMethodPath(method),
              "; in dist_sync a push waits for every worker's push of the key)"));
        }
        done(ServerError(s, status), nullptr);
      });
}

absl::Status ServerCaller::WaitForServers(const TransferContext& ctx, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  proto::PullRequest empty;
  SetSender(ctx, &empty);
  const grpc::ByteBuffer request = EncodeMessage(empty);
  for (int s = 0; s < num_servers(); ++s) {
    while (true) {
      const absl::Status status = transport_->Probe(
          s, ServerMethod::kPull, request, std::min(give_up, absl::Now() + absl::Seconds(10)));
      if (status.ok()) break;
      if (!absl::IsUnavailable(status) || absl::Now() >= give_up) {
        return ServerError(s, absl::Status(status.code(),
                                           absl::StrCat("not ready within ",
                                                        absl::FormatDuration(timeout), ": ",
                                                        status.message())));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvstore
