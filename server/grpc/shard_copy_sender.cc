#include "server/grpc/shard_copy_sender.h"

#include <grpc/slice.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/server_commands.h"
#include "common/server_methods.h"
#include "common/state_file.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {

// Progress: the pages of one Send in flight and the first error; shared with the calls'
// callbacks, which may still be returning when Send does.
struct Progress {
  absl::Mutex mu;
  int in_flight ABSL_GUARDED_BY(mu) = 0;
  absl::Status failed ABSL_GUARDED_BY(mu);

  // WaitIdle waits until no page is in flight; false when one failed.
  bool WaitIdle() {
    absl::MutexLock lock(&mu);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 0; };
    mu.Await(absl::Condition(&idle));
    return failed.ok();
  }
};

}  // namespace

ShardCopySender::ShardCopySender(Options options) : options_(std::move(options)) {
  if (!options_.node_token.empty()) {
    signer_ = std::make_unique<RequestSigner>(options_.node_id, options_.node_token,
                                              options_.signed_payloads);
  }
}

absl::StatusOr<grpc::ByteBuffer> ShardCopySender::PageOf(const CopySource& copy, uint64_t begin,
                                                         uint64_t end) const {
  // The command's other fields, then its body's tag and length, then the body: the text
  // "put OFFSET CRC32\n" (the CRC-32 in 10 digits, written once the bytes are read) and the
  // bytes. Serialized by hand so that the bytes are read once, into the request's one slice.
  proto::ServerCommandRequest fields;
  fields.set_node_id(options_.node_id);
  fields.set_head(kCommandCopyIn);
  const std::string serialized = fields.SerializeAsString();
  const std::string text = absl::StrCat("put ", begin, " ");
  constexpr size_t kCrcDigits = 10;
  const size_t body = text.size() + kCrcDigits + 1 + (end - begin);
  using google::protobuf::io::CodedOutputStream;
  const uint32_t tag = google::protobuf::internal::WireFormatLite::MakeTag(
      proto::ServerCommandRequest::kBodyFieldNumber,
      google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const size_t size = serialized.size() + CodedOutputStream::VarintSize32(tag) +
                      CodedOutputStream::VarintSize64(body) + body;
  grpc_slice slice = grpc_slice_malloc(size);
  uint8_t* at = GRPC_SLICE_START_PTR(slice);
  at = std::copy(serialized.begin(), serialized.end(), at);
  at = CodedOutputStream::WriteVarint32ToArray(tag, at);
  at = CodedOutputStream::WriteVarint64ToArray(body, at);
  at = std::copy(text.begin(), text.end(), at);
  char* bytes = reinterpret_cast<char*>(at) + kCrcDigits + 1;
  if (absl::Status read = copy.Read(begin, end, bytes); !read.ok()) {
    grpc_slice_unref(slice);
    return read;
  }
  const std::string crc = absl::StrFormat("%0*u\n", static_cast<int>(kCrcDigits),
                                          Crc32(absl::string_view(bytes, end - begin)));
  std::copy(crc.begin(), crc.end(), at);
  grpc::Slice owned(slice, grpc::Slice::STEAL_REF);
  return grpc::ByteBuffer(&owned, 1);
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
                                   const CopySource& copy) const {
  const std::shared_ptr<grpc::GenericStub> stub = StubFor(address);
  const uint64_t page_bytes = std::max<uint64_t>(options_.page_bytes, 1);
  const uint64_t total = copy.size();
  const uint64_t head = std::min(copy.head_bytes(), total);
  const char* method = GrpcMethodPath(ServerMethod::kCommand, backup);
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  auto progress = std::make_shared<Progress>();
  const std::string receiver =
      absl::StrCat("the server at ", address, backup ? " (its backup shard)" : "");
  for (uint64_t offset = 0; offset < total;) {
    // The head travels whole before any later page.
    if (offset == head && head > 0 && !progress->WaitIdle()) break;
    const uint64_t end =
        copy.PageEnd(offset, offset < head ? std::min(page_bytes, head - offset) : page_bytes);
    absl::StatusOr<grpc::ByteBuffer> page = PageOf(copy, offset, end);
    if (!page.ok()) {
      absl::MutexLock lock(&progress->mu);
      if (progress->failed.ok()) {
        progress->failed = absl::Status(
            page.status().code(),
            absl::StrCat("reading ", end - offset, " bytes at ", offset, " of a copy of ", total,
                         " bytes for ", receiver, ": ", page.status().message()));
      }
      break;
    }
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
    auto call = std::make_shared<Call>();
    call->request = *std::move(page);
    if (signer_ != nullptr) {
      call->request = signer_->Sign({ServerMethod::kCommand, backup, address, 0}, call->request);
    }
    call->context.set_deadline(GrpcDeadline(absl::Now() + options_.page_timeout));
    stub->UnaryCall(
        &call->context, method, grpc::StubOptions(), &call->request, &call->reply,
        [progress, call, receiver, offset, size = end - offset, total](grpc::Status status) {
          absl::MutexLock lock(&progress->mu);
          --progress->in_flight;
          if (!status.ok() && progress->failed.ok()) {
            progress->failed = absl::Status(
                FromGrpcStatus(status).code(),
                absl::StrCat("sending ", size, " bytes at ", offset, " of a copy of ", total,
                             " bytes to ", receiver, ": ", status.error_message()));
          }
        });
    offset = end;
  }
  progress->WaitIdle();
  absl::MutexLock lock(&progress->mu);
  return progress->failed;
}

}  // namespace kvstore
