// CallWhileUnreachable: a call to a peer that may not be up yet (a worker's or kvserver's
// registration with a scheduler that launchers start at the same moment), retried while the
// peer cannot be reached, with a progress line every few seconds that names the peer and
// gRPC's reason ("Connection refused", "Name resolution failed"), and a final error that
// names them too - never a silent wait for the whole timeout.
//
// Threading: runs on the caller's thread; blocks until the call succeeds, fails otherwise, or
// `deadline` passes.
#ifndef KVSTORE_COMMON_UNREACHABLE_RETRY_H_
#define KVSTORE_COMMON_UNREACHABLE_RETRY_H_

#include <grpcpp/support/status.h>

#include <functional>
#include <string>

#include "absl/time/time.h"

namespace kvstore {

// CallWhileUnreachable runs `attempt(deadline)` - one call, failing fast (no wait_for_ready),
// with `deadline` as its own - again after a short backoff (100 ms doubling to `max_backoff`,
// 1 s unless given) while it
// returns UNAVAILABLE and `deadline` has not passed. Every `progress_every` of waiting it calls
// `progress` with a line such as "the scheduler at HOST:PORT is not reachable yet (...);
// retrying for 115 s more". Returns the first other status; at the deadline, DEADLINE_EXCEEDED
// naming `peer` and the last reason.
grpc::Status CallWhileUnreachable(const std::string& peer, absl::Time deadline,
                                  const std::function<grpc::Status(absl::Time)>& attempt,
                                  const std::function<void(const std::string&)>& progress,
                                  absl::Duration progress_every = absl::Seconds(5),
                                  absl::Duration max_backoff = absl::Seconds(1));

}  // namespace kvstore

#endif  // KVSTORE_COMMON_UNREACHABLE_RETRY_H_
