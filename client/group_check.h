// Checking a call against a key group and preparing the bytes it sends and receives.
//
// A call that names a group's list (group_plan.h) is checked against the group's flat dtypes
// and shapes in one pass over its tensors, with no per-key lookup; its keys are compared on the
// same pass when the group was only guessed (GroupCache::Recent). A push's values are then
// packed into one array per part - or, when they already lie back to back in the part's order
// (views of one buffer, a bucket), sent from the caller's memory as they are; a pull's outputs
// are written in one copy per part when they lie so, else member by member.
//
// Threading: the functions run on the caller's thread (long lists on two threads, through
// `split`); a group's spare packed arrays are taken under its lock.
#ifndef KVSTORE_CLIENT_GROUP_CHECK_H_
#define KVSTORE_CLIENT_GROUP_CHECK_H_

#include "absl/types/span.h"
#include "client/group_plan.h"
#include "client/split_loop.h"

namespace kvstore {

// The outcome of checking a call against a group: kOtherKeys when the call's keys (compared
// when the group was guessed) are not the group's list, kMismatch when a tensor does not fit
// its key (the per-key path then reports it).
enum class GroupCheck { kOk, kMismatch, kOtherKeys };

// PackGroup checks a push's values (and its keys, unless `keys` is empty) against the group
// and fills work->packed with the bytes each part sends.
GroupCheck PackGroup(GroupPlan& group, absl::Span<const Key> keys, absl::Span<const Tensor> values,
                     SplitLoop* split, GroupWork* work);
// CheckGroupOutputs checks a pull's outputs (and its keys, unless `keys` is empty) against the
// group and fills work->out_bases and, when a part's outputs are scattered, work->out_data.
GroupCheck CheckGroupOutputs(const GroupPlan& group, absl::Span<const Key> keys,
                             absl::Span<Tensor* const> outs, SplitLoop* split, GroupWork* work);
// PrepareBucket prepares an operation on buckets: `in` pushed (or null), `out` pulled into (or
// null), each holding the list's values back to back. kMismatch when the keys do not share
// one dtype or a bucket is not of that dtype and the list's size.
GroupCheck PrepareBucket(GroupPlan& group, const Tensor* in, Tensor* out, GroupWork* work);

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GROUP_CHECK_H_
