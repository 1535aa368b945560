// GroupPlan: how a list of distinct small keys travels as one packed array per server (a key
// group, DistOptions::group_min_keys; the protocol is described in proto/kvstore.proto, "Key
// groups", and docs/distributed.md).
//
// A plan is made once per list (MakeGroupPlan) from the keys' records and reused by every call
// with the same list: it holds, per server holding members (a part), the members in list order
// and where each one's bytes lie in the part's packed array, and the flat dtypes and shapes a
// call's tensors are checked against (group_check.h). GroupWork is one call's data.
//
// Threading: a plan is immutable once made, except `registered` (atomic: whether each server
// has the member list), `acknowledged_pushes` (atomic) and the spare packed arrays (under
// spare_mu).
#ifndef KVSTORE_CLIENT_GROUP_PLAN_H_
#define KVSTORE_CLIENT_GROUP_PLAN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/key_info.h"

namespace kvstore {

// A member of a key group travels whole in its server's packed array; bigger values take the
// per-key path, which cuts them into chunks.
inline constexpr int64_t kGroupMemberMaxBytes = 64 << 10;
// A group's packed arrays together stay under this (one gRPC message per part).
inline constexpr int64_t kGroupMaxBytes = 256 << 20;

struct GroupPlan {
  GroupPlan() = default;
  GroupPlan(const GroupPlan&) = delete;
  GroupPlan& operator=(const GroupPlan&) = delete;
  // Adds acknowledged_pushes to each member's KeyInfo::acknowledged_pushes.
  ~GroupPlan();

  uint64_t id = 0;
  // The servers it was planned over (GroupCache::For): a plan of another count is planned
  // again before it runs (the job's servers changed).
  int num_servers = 0;
  std::vector<Key> keys;
  std::vector<int64_t> int_keys;      // The keys, when all are integers (compared faster).
  std::vector<const KeyInfo*> infos;  // KeyTable never drops a record.
  // The keys' dtypes and shapes, flat, so that a call's values are checked without touching
  // every KeyInfo: key i has dtypes[i] and the dimensions dims[dims_at[i], dims_at[i + 1]).
  std::vector<DType> dtypes;
  std::vector<uint32_t> dims_at;
  std::vector<int64_t> dims;
  // Buckets: where key i's value starts in a bucket of the list (the last entry is the
  // bucket's size), and whether all keys share one dtype (the bucket's).
  std::vector<size_t> key_offsets;
  bool one_dtype = true;
  absl::flat_hash_set<Key> members;
  // A member: one chunk of a key (a small key is one chunk) and where it starts in the
  // key's value. Per server holding members: its members in list order and where each one's
  // bytes start in its packed array (the last entry is the array's size).
  struct Member {
    uint32_t key = 0;  // Index into keys.
    Slice chunk;
    size_t value_offset = 0;
  };
  static constexpr size_t kScattered = ~size_t{0};
  struct Part {
    int server = 0;
    std::vector<Member> members;
    std::vector<size_t> offsets;
    // Where the part's members lie back to back in a bucket of the list, or kScattered.
    size_t bucket_base = kScattered;
  };
  std::vector<Part> parts;
  // Every member in key order, for packing: its part and its offset there. 32-bit offsets
  // (a member is at most 64 KiB, a group's arrays at most 256 MiB): a call's check reads
  // every piece, and 20 bytes a piece is less memory to read than 40.
  struct Piece {
    uint32_t key = 0;
    uint32_t part = 0;
    uint32_t value_offset = 0;
    uint32_t packed_offset = 0;
    uint32_t bytes = 0;
  };
  std::vector<Piece> pieces;
  // Uniform: integer keys, all of one dtype and shape and each one piece, and each part's
  // keys a stretch of the list (part p: keys [part_first[p], part_first[p + 1])). Key i of
  // part p is then at (i - part_first[p]) * uniform_bytes in its part, and a call's check
  // reads only the call's keys and values and int_keys; when the keys are consecutive
  // integers (key i is int_keys[0] + i), not even int_keys.
  bool uniform = false;
  bool consecutive = false;
  size_t uniform_bytes = 0;
  std::vector<size_t> part_first;
  int64_t bytes = 0;
  // Per part: whether the server has the member list (sent with the first request).
  std::unique_ptr<std::atomic<bool>[]> registered;
  // Pushes of the whole list the servers acknowledged: one count for the group rather than one
  // per member on every push (100,000 atomic adds on scattered records cost more than the
  // push). A member's acknowledged pushes are its own count plus those of the groups holding
  // it (GroupCache::AddAcknowledged); a plan adds its count to its members when it goes.
  std::atomic<int64_t> acknowledged_pushes{0};
  // Packed arrays of finished pushes, reused by the next ones.
  absl::Mutex spare_mu;
  std::vector<std::vector<Tensor>> spare ABSL_GUARDED_BY(spare_mu);
};

// GroupWork: a key-group operation's data. Pushes: per part, the bytes to send - an array
// packed on the caller's thread, or (`direct`) the caller's own memory when the values
// already lie back to back in the part's order (views of one buffer, or a bucket). Pulls:
// per part, where the reply goes in one piece when the outputs lie back to back (else null:
// member by member, into out_data).
struct GroupWork {
  std::vector<Tensor> packed;
  bool direct = false;
  std::vector<uint8_t*> out_bases;
  std::vector<uint8_t*> out_data;  // Per key: its output's memory (when a part needs it).
};

// MakeGroupPlan plans the list `keys` (records `infos`, in order) over `num_servers` servers,
// or returns null when the list cannot form a group: a repeated key, a member above
// kGroupMemberMaxBytes, or more than kGroupMaxBytes in all. The plan's id is left 0.
std::shared_ptr<GroupPlan> MakeGroupPlan(absl::Span<const Key> keys,
                                         absl::Span<const KeyInfo* const> infos, int num_servers);

// SameKeys is true when `keys` is the group's list; SameKey when `key` is its key i.
bool SameKeys(const GroupPlan& group, absl::Span<const Key> keys);
inline bool SameKey(const GroupPlan& group, size_t i, const Key& key) {
  return group.int_keys.empty() ? key == group.keys[i]
                                : key.is_int() && key.int_key() == group.int_keys[i];
}
// MatchesShape is true when `t` is a CPU tensor of `dtype` and the shape dims[0, rank);
// Matches when it is one of the dtype and shape of the group's key i.
bool MatchesShape(const Tensor& t, DType dtype, const int64_t* dims, size_t rank);
inline bool Matches(const GroupPlan& group, size_t i, const Tensor& t) {
  const uint32_t first = group.dims_at[i];
  return MatchesShape(t, group.dtypes[i], group.dims.data() + first, group.dims_at[i + 1] - first);
}

}  // namespace kvstore

#endif  // KVSTORE_CLIENT_GROUP_PLAN_H_
