#include "client/group_cache.h"

#include "absl/hash/hash.h"

namespace kvstore {
namespace {

// Fingerprint hashes a key list; a list of integer keys hashes alike as Keys and as integers.
template <typename List, typename Value>
uint64_t FingerprintOf(const List& keys, Value value) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ keys.size();
  for (const auto& key : keys) {
    h = (h ^ value(key)) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

uint64_t Fingerprint(absl::Span<const Key> keys) {
  return FingerprintOf(keys, [](const Key& key) {
    return key.is_int() ? static_cast<uint64_t>(key.int_key())
                        : absl::Hash<std::string>()(key.str_key());
  });
}

uint64_t Fingerprint(absl::Span<const int64_t> keys) {
  return FingerprintOf(keys, [](int64_t key) { return static_cast<uint64_t>(key); });
}

}  // namespace

std::shared_ptr<GroupPlan> GroupCache::ForInts(absl::Span<const int64_t> keys) {
  {
    absl::MutexLock lock(&mu_);
    if (last_ != nullptr && absl::MakeConstSpan(last_->int_keys) == keys) return last_;
  }
  const uint64_t fingerprint = Fingerprint(keys);
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(fingerprint);
  if (it == groups_.end() || it->second == nullptr ||
      absl::MakeConstSpan(it->second->int_keys) != keys) {
    return nullptr;
  }
  last_ = it->second;
  return last_;
}

std::shared_ptr<GroupPlan> GroupCache::Recent(size_t n) {
  absl::MutexLock lock(&mu_);
  if (last_ == nullptr || last_->keys.size() != n) return nullptr;
  return last_;
}

void GroupCache::AddAcknowledged(absl::flat_hash_map<const KeyInfo*, int64_t>* extra) {
  absl::MutexLock lock(&mu_);
  for (const auto& [fingerprint, group] : groups_) {
    if (group == nullptr) continue;
    const int64_t acknowledged = group->acknowledged_pushes.load(std::memory_order_relaxed);
    if (acknowledged == 0) continue;
    for (const KeyInfo* info : group->infos) (*extra)[info] += acknowledged;
  }
}

std::shared_ptr<GroupPlan> GroupCache::For(absl::Span<const Key> keys, const KeyTable& table) {
  {
    absl::MutexLock lock(&mu_);
    if (last_ != nullptr && SameKeys(*last_, keys)) return last_;
  }
  const uint64_t fingerprint = Fingerprint(keys);
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(fingerprint);
    if (it != groups_.end()) {
      const std::shared_ptr<GroupPlan>& group = it->second;
      if (group != nullptr && SameKeys(*group, keys)) {
        last_ = group;
        return group;
      }
      return nullptr;  // A list that cannot form a group, or another list with the same print.
    }
  }
  const std::vector<const KeyInfo*> infos = table.InfosOf(keys);
  if (infos.empty()) return nullptr;
  const int servers = num_servers();
  std::shared_ptr<GroupPlan> group = MakeGroupPlan(keys, infos, servers);
  absl::MutexLock lock(&mu_);
  if (servers != num_servers_) return nullptr;  // Reset meanwhile: the per-key path runs.
  if (groups_.size() >= kMaxGroups) groups_.erase(groups_.begin());
  groups_[fingerprint] = group;
  if (group == nullptr) return nullptr;
  group->id = next_id_++;
  group->num_servers = servers;
  last_ = group;
  return group;
}

void GroupCache::Reset(int num_servers) {
  absl::flat_hash_map<uint64_t, std::shared_ptr<GroupPlan>> forgotten;
  std::shared_ptr<GroupPlan> last;
  {
    absl::MutexLock lock(&mu_);
    forgotten.swap(groups_);
    last.swap(last_);
    num_servers_ = num_servers;
  }
  // The plans are released here, outside the lock: each adds its count to its members.
}

}  // namespace kvstore
