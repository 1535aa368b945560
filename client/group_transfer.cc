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
#include "common/wire_frame.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

void TransferGroup(const TransferContext& ctx, Kind kind, std::shared_ptr<GroupPlan> group,
                   GroupWork work, OpDone done) {
  struct State : Replies {
    std::shared_ptr<GroupPlan> group;
    GroupWork work;
    OpDone done;
  };
  auto state = std::make_shared<State>();
  state->remaining = group->parts.size();
  state->group = std::move(group);
  state->work = std::move(work);
  state->done = std::move(done);
  const GroupPlan& g = *state->group;
  if (g.parts.empty()) {
    state->done(absl::OkStatus());
    return;
  }
  const bool sends = kind != Kind::kPull;
  const bool receives = kind != Kind::kPush;
  const ServerMethod method = kind == Kind::kPush   ? ServerMethod::kPush
                              : kind == Kind::kPull ? ServerMethod::kPull
                                                    : ServerMethod::kPushPull;
  const uint64_t request_id = sends ? ctx.next_request_id->fetch_add(g.parts.size()) : 0;
  // Frame builds part p's request, listing the members when the server may not have them.
  auto frame = [ctx, state, kind, sends, request_id](size_t p, bool list) {
    const GroupPlan& g = *state->group;
    const GroupPlan::Part& part = g.parts[p];
    auto fill = [&](auto message) -> absl::StatusOr<grpc::ByteBuffer> {
      SetSender(ctx, &message);
      message.set_group_id(g.id);
      if constexpr (!std::is_same_v<decltype(message), proto::PullRequest>) {
        message.set_request_id(request_id + p);
      }
      if (list) {
        message.mutable_tensors()->Reserve(static_cast<int>(part.members.size()));
        for (const GroupPlan::Member& m : part.members) {
          const KeyInfo& info = *g.infos[m.key];
          FillHeader(g.keys[m.key], info.dtype, info.shape, m.chunk, message.add_tensors());
        }
      }
      if (!sends) return EncodeMessage(message);
      const PayloadPart payload{state->work.packed[p], 0, part.offsets.back()};
      return EncodeFrame(message, absl::MakeConstSpan(&payload, 1));
    };
    switch (kind) {
      case Kind::kPush:
        return fill(proto::PushRequest());
      case Kind::kPull:
        return fill(proto::PullRequest());
      default:
        return fill(proto::PushPullRequest());
    }
  };
  auto finish = [state](absl::Status status) {
    if (!state->Record(status)) return;
    if (!state->work.packed.empty() && !state->work.direct) {
      absl::MutexLock lock(&state->group->spare_mu);
      if (state->group->spare.size() < 2) {
        state->group->spare.push_back(std::move(state->work.packed));
      }
    }
    state->done(state->error);
  };
  // Send sends part p; a server that does not know the group gets the member list once more.
  auto send = std::make_shared<std::function<void(size_t, bool)>>();
  *send = [ctx, state, frame, finish, receives, method, send_weak = std::weak_ptr(send)](
              size_t p, bool retried) {
    const GroupPlan& g = *state->group;
    const bool list = !g.registered[p].load();
    absl::StatusOr<grpc::ByteBuffer> request = frame(p, list);
    if (!request.ok()) {
      finish(request.status());
      return;
    }
    const int s = g.parts[p].server;
    ctx.caller->Call(
        s, method, std::make_shared<grpc::ByteBuffer>(*std::move(request)),
        [ctx, state, finish, receives, p, s, list, retried, send = send_weak.lock()](
            absl::Status status, grpc::ByteBuffer* reply) {
          const GroupPlan& g = *state->group;
          if (status.code() == absl::StatusCode::kFailedPrecondition && !list && !retried &&
              absl::StrContains(status.message(), "no key group")) {
            g.registered[p] = false;  // The server lost it (it restarted): list it again.
            (*send)(p, true);
            return;
          }
          if (status.ok() && list) g.registered[p] = true;
          if (status.ok() && receives) {
            proto::PullResponse header;
            absl::StatusOr<Payload> payload = DecodeFrame(*reply, &header);
            status = payload.status();
            const GroupPlan::Part& part = g.parts[p];
            if (status.ok() && payload->size() != part.offsets.back()) {
              status = absl::InternalError(absl::StrCat("key group reply holds ", payload->size(),
                                                        " bytes, expected ", part.offsets.back()));
            }
            if (status.ok() && state->work.out_bases[p] != nullptr) {
              status = payload->CopyTo(0, part.offsets.back(), state->work.out_bases[p]);
            }
            for (size_t j = 0;
                 status.ok() && state->work.out_bases[p] == nullptr && j < part.members.size();
                 ++j) {
              const size_t begin = part.offsets[j], bytes = part.offsets[j + 1] - begin;
              const GroupPlan::Member& m = part.members[j];
              void* out = state->work.out_data[m.key] + m.value_offset;
              status = payload->CopyTo(begin, bytes, out);
            }
            if (!status.ok()) status = ctx.caller->ServerError(s, status);
          }
          finish(status);
        });
  };
  for (size_t p = 0; p < g.parts.size(); ++p) (*send)(p, false);
}

}  // namespace kvstore
