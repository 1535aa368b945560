#include "client/group_transfer.h"

#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/gpu/staging.h"
#include "client/request_header.h"
#include "common/reduce.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {
namespace {

// GroupCall: one operation of a key group, a request per part (server). Alive while a request
// is in flight (each callback holds it).
class GroupCall : public Replies, public std::enable_shared_from_this<GroupCall> {
 public:
  GroupCall(const TransferContext& ctx, Kind kind, std::shared_ptr<GroupPlan> group, GroupWork work,
            OpDone done)
      : ctx_(ctx),
        kind_(kind),
        group_(std::move(group)),
        work_(std::move(work)),
        done_(std::move(done)),
        request_id_(kind != Kind::kPull ? ctx.next_request_id->fetch_add(group_->parts.size())
                                        : 0) {
    remaining = group_->parts.size();
  }

  void Start() {
    if (group_->parts.empty()) {
      done_(absl::OkStatus());
      return;
    }
    for (size_t p = 0; p < group_->parts.size(); ++p) Send(p, false);
  }

 private:
  // Send sends part p; a server that does not know the group gets the member list once more.
  void Send(size_t p, bool retried) {
    const bool list = !group_->registered[p].load();
    absl::StatusOr<grpc::ByteBuffer> request = Frame(p, list);
    if (!request.ok()) {
      Finish(request.status());
      return;
    }
    const int s = group_->parts[p].server;
    const ServerMethod method = kind_ == Kind::kPush   ? ServerMethod::kPush
                                : kind_ == Kind::kPull ? ServerMethod::kPull
                                                       : ServerMethod::kPushPull;
    ctx_.caller->Call(s, method, std::make_shared<grpc::ByteBuffer>(*std::move(request)),
                      [self = shared_from_this(), p, s, list, retried](absl::Status status,
                                                                       grpc::ByteBuffer* reply) {
                        self->Received(p, s, list, retried, std::move(status), reply);
                      });
  }

  void Received(size_t p, int s, bool list, bool retried, absl::Status status,
                grpc::ByteBuffer* reply) {
    if (status.code() == absl::StatusCode::kFailedPrecondition && !list && !retried &&
        absl::StrContains(status.message(), "no key group")) {
      group_->registered[p] = false;  // The server lost it (it restarted): list it again.
      Send(p, true);
      return;
    }
    if (status.ok() && list) group_->registered[p] = true;
    if (status.ok() && kind_ != Kind::kPush) {
      status = CopyReply(p, *reply);
      if (!status.ok()) status = ctx_.caller->ServerError(s, status);
    }
    Finish(status);
  }

  // Frame builds part p's request, listing the members when the server may not have them.
  absl::StatusOr<grpc::ByteBuffer> Frame(size_t p, bool list) const {
    switch (kind_) {
      case Kind::kPush:
        return Fill(proto::PushRequest(), p, list);
      case Kind::kPull:
        return Fill(proto::PullRequest(), p, list);
      default:
        return Fill(proto::PushPullRequest(), p, list);
    }
  }

  template <typename Message>
  absl::StatusOr<grpc::ByteBuffer> Fill(Message message, size_t p, bool list) const {
    const GroupPlan& g = *group_;
    const GroupPlan::Part& part = g.parts[p];
    SetSender(ctx_, &message);
    message.set_group_id(g.id);
    if constexpr (!std::is_same_v<Message, proto::PullRequest>) {
      message.set_request_id(request_id_ + p);
    }
    if (list) {
      message.mutable_tensors()->Reserve(static_cast<int>(part.members.size()));
      for (const GroupPlan::Member& m : part.members) {
        const KeyInfo& info = *g.infos[m.key];
        FillHeader(g.keys[m.key], info.dtype, info.shape, m.chunk, message.add_tensors());
      }
    }
    if (kind_ == Kind::kPull) return EncodeMessage(message);
    const PayloadPart payload{work_.packed[p], 0, part.offsets.back()};
    return EncodeFrame(message, absl::MakeConstSpan(&payload, 1));
  }

  // CopyReply copies part p's packed reply into the outputs (one copy into a bucket, or one per
  // member).
  absl::Status CopyReply(size_t p, const grpc::ByteBuffer& reply) {
    proto::PullResponse header;
    ASSIGN_OR_RETURN(Payload payload, DecodeFrame(reply, &header));
    const GroupPlan::Part& part = group_->parts[p];
    if (payload.size() != part.offsets.back()) {
      return absl::InternalError(absl::StrCat("key group reply holds ", payload.size(),
                                              " bytes, expected ", part.offsets.back()));
    }
    if (work_.out_bases[p] != nullptr) {
      return payload.CopyTo(0, part.offsets.back(), work_.out_bases[p]);
    }
    for (size_t j = 0; j < part.members.size(); ++j) {
      const size_t begin = part.offsets[j], bytes = part.offsets[j + 1] - begin;
      const GroupPlan::Member& m = part.members[j];
      RETURN_IF_ERROR(payload.CopyTo(begin, bytes, work_.out_data[m.key] + m.value_offset));
    }
    return absl::OkStatus();
  }

  void Finish(const absl::Status& status) {
    if (!Record(status)) return;
    if (!work_.packed.empty() && !work_.direct) {
      absl::MutexLock lock(&group_->spare_mu);
      if (group_->spare.size() < 2) group_->spare.push_back(std::move(work_.packed));
    }
    done_(error);
  }

  const TransferContext ctx_;
  const Kind kind_;
  const std::shared_ptr<GroupPlan> group_;
  GroupWork work_;
  OpDone done_;
  const uint64_t request_id_;
};

}  // namespace

void TransferGroup(const TransferContext& ctx, Kind kind, std::shared_ptr<GroupPlan> group,
                   GroupWork work, OpDone done) {
  std::make_shared<GroupCall>(ctx, kind, std::move(group), std::move(work), std::move(done))
      ->Start();
}

}  // namespace kvstore
