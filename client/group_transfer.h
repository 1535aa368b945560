// TransferGroup: how a key-group push, pull or push-pull travels (group_plan.h): one request
// per part, carrying the group's id and the part's packed bytes, and the member list as well
// while the server may not have it. A server that answers that it does not know the group (it
// restarted) is sent the list once more. A pull's reply is copied into the outputs in one piece
// per part when they lie back to back, else member by member. A push's packed arrays go back
// to the group's spares when the operation completes.
//
// Threading: runs on the dispatcher's thread; `done` runs once, on the transport's completion
// thread.
#ifndef KVSTORE_CLIENT_GROUP_TRANSFER_H_
#define KVSTORE_CLIENT_GROUP_TRANSFER_H_

#include <memory>

#include "client/group_plan.h"
#include "client/server_caller.h"

namespace kvstore {

// TransferGroup runs `kind` (kPush, kPull or kPushPull) of the group with `work` and calls
// `done` once with the first error, naming the server.
void TransferGroup(const TransferContext& ctx, Kind kind, std::shared_ptr<GroupPlan> group,
                   GroupWork work, OpDone done);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GROUP_TRANSFER_H_
