#include "client/group_plan.h"

#include <algorithm>
#include <limits>

namespace kvstore {

// GroupPlan::Piece holds offsets within a member and within a part in 32 bits.
static_assert(kGroupMaxBytes < (int64_t{1} << 32) && kGroupMemberMaxBytes < kGroupMaxBytes);

namespace {

// RecordMembers fills the group's per-key lists (keys, infos, dtypes, shapes, bytes) and says
// whether the keys may form a group: distinct, each small and with a piece.
bool RecordMembers(absl::Span<const Key> keys, absl::Span<const KeyInfo* const> infos,
                   GroupPlan* group) {
  group->keys.assign(keys.begin(), keys.end());
  if (std::all_of(keys.begin(), keys.end(), [](const Key& key) { return key.is_int(); })) {
    group->int_keys.reserve(keys.size());
    for (const Key& key : keys) group->int_keys.push_back(key.int_key());
  }
  group->infos.reserve(keys.size());
  group->members.reserve(keys.size());
  bool eligible = true;
  for (size_t i = 0; i < keys.size(); ++i) {
    const KeyInfo& info = *infos[i];
    group->infos.push_back(&info);
    group->dtypes.push_back(info.dtype);
    group->dims_at.push_back(static_cast<uint32_t>(group->dims.size()));
    group->dims.insert(group->dims.end(), info.shape.begin(), info.shape.end());
    group->bytes += info.bytes;
    // Every key has a piece (a value of no elements, one empty chunk): checking a call goes
    // through the pieces.
    if (!group->members.insert(keys[i]).second || info.bytes > kGroupMemberMaxBytes ||
        info.chunks.empty()) {
      eligible = false;
    }
  }
  group->dims_at.push_back(static_cast<uint32_t>(group->dims.size()));
  return eligible && group->bytes <= kGroupMaxBytes;
}

// LayOutParts cuts the members into a part per server (in order of appearance), each chunk a
// piece packed after the part's previous ones, and finds each part's place in a bucket of the
// whole list (or kScattered).
void LayOutParts(int num_servers, GroupPlan* group) {
  std::vector<int> part_index(static_cast<size_t>(num_servers), -1);
  for (size_t i = 0; i < group->keys.size(); ++i) {
    const KeyInfo& info = *group->infos[i];
    const size_t element = DTypeSize(info.dtype);
    for (const Slice& chunk : info.chunks) {
      if (part_index[chunk.server] < 0) {
        part_index[chunk.server] = static_cast<int>(group->parts.size());
        group->parts.emplace_back().server = chunk.server;
        group->parts.back().offsets.push_back(0);
      }
      const uint32_t p = static_cast<uint32_t>(part_index[chunk.server]);
      GroupPlan::Part& part = group->parts[p];
      const size_t value_offset = static_cast<size_t>(chunk.offset) * element;
      const size_t bytes = static_cast<size_t>(chunk.count) * element;
      group->pieces.push_back(GroupPlan::Piece{
          static_cast<uint32_t>(i), p, static_cast<uint32_t>(value_offset),
          static_cast<uint32_t>(part.offsets.back()), static_cast<uint32_t>(bytes)});
      part.members.push_back(GroupPlan::Member{static_cast<uint32_t>(i), chunk, value_offset});
      part.offsets.push_back(part.offsets.back() + bytes);
    }
  }
  group->key_offsets.reserve(group->keys.size() + 1);
  group->key_offsets.push_back(0);
  for (size_t i = 0; i < group->keys.size(); ++i) {
    group->key_offsets.push_back(group->key_offsets.back() + group->infos[i]->bytes);
    group->one_dtype = group->one_dtype && group->dtypes[i] == group->dtypes[0];
  }
  for (GroupPlan::Part& part : group->parts) {
    const GroupPlan::Member& first = part.members.front();
    part.bucket_base = group->key_offsets[first.key] + first.value_offset;
    for (size_t j = 0; j < part.members.size(); ++j) {
      const GroupPlan::Member& m = part.members[j];
      if (group->key_offsets[m.key] + m.value_offset != part.bucket_base + part.offsets[j]) {
        part.bucket_base = GroupPlan::kScattered;
        break;
      }
    }
  }
}

// FindUniform sets `uniform` (one piece per key, in key order, one dtype and shape, each part a
// stretch of keys: part_first), `uniform_bytes` and `consecutive`.
void FindUniform(GroupPlan* group) {
  const size_t n = group->keys.size();
  group->uniform = group->pieces.size() == n && !group->int_keys.empty() && group->one_dtype;
  const size_t rank = group->dims_at[1];
  for (size_t i = 0; group->uniform && i < n; ++i) {
    const GroupPlan::Piece& piece = group->pieces[i];
    // Parts are numbered in order of appearance: a part's keys form a stretch when the part
    // index never goes back.
    if (i == 0 || piece.part != group->pieces[i - 1].part) group->part_first.push_back(i);
    group->uniform = piece.key == i && piece.value_offset == 0 &&
                     piece.part + 1 == group->part_first.size() &&
                     piece.bytes == group->pieces[0].bytes &&
                     piece.packed_offset == (i - group->part_first.back()) * size_t{piece.bytes} &&
                     group->dims_at[i + 1] - group->dims_at[i] == rank &&
                     std::equal(group->dims.begin() + group->dims_at[i],
                                group->dims.begin() + group->dims_at[i + 1], group->dims.begin());
  }
  if (!group->uniform) {
    group->part_first.clear();
    return;
  }
  group->uniform_bytes = group->pieces[0].bytes;
  group->consecutive = true;
  for (size_t i = 1; group->consecutive && i < n; ++i) {
    group->consecutive = group->int_keys[i - 1] < std::numeric_limits<int64_t>::max() &&
                         group->int_keys[i] == group->int_keys[i - 1] + 1;
  }
  group->part_first.push_back(n);
}

}  // namespace

GroupPlan::~GroupPlan() {
  const int64_t acknowledged = acknowledged_pushes.load(std::memory_order_relaxed);
  if (acknowledged == 0) return;
  for (const KeyInfo* info : infos) {
    info->acknowledged_pushes.fetch_add(acknowledged, std::memory_order_relaxed);
  }
}

std::shared_ptr<GroupPlan> MakeGroupPlan(absl::Span<const Key> keys,
                                         absl::Span<const KeyInfo* const> infos, int num_servers) {
  auto group = std::make_shared<GroupPlan>();
  if (!RecordMembers(keys, infos, group.get())) return nullptr;
  LayOutParts(num_servers, group.get());
  FindUniform(group.get());
  group->registered = std::make_unique<std::atomic<bool>[]>(group->parts.size());
  for (size_t p = 0; p < group->parts.size(); ++p) group->registered[p] = false;
  return group;
}

bool SameKeys(const GroupPlan& group, absl::Span<const Key> keys) {
  if (keys.size() != group.keys.size()) return false;
  if (group.int_keys.empty()) return std::equal(keys.begin(), keys.end(), group.keys.begin());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_int() || keys[i].int_key() != group.int_keys[i]) return false;
  }
  return true;
}

bool MatchesShape(const Tensor& t, DType dtype, const int64_t* dims, size_t rank) {
  if (!t.defined() || !t.device().is_cpu() || t.dtype() != dtype) return false;
  // A loop, not std::equal: that becomes a call to memcmp per key, for one or two dimensions.
  const Shape& shape = t.shape();
  if (shape.size() != rank) return false;
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] != dims[d]) return false;
  }
  return true;
}

}  // namespace kvstore
