// KeyGroups: a kvserver engine's key groups (a part of ServerEngine, server_engine.h).
//
// A worker that pushes or pulls one long list of small keys again and again registers the list
// once under an id of its own (Register), then sends only that id and the members' bytes packed
// back to back in member order (Push), or receives them so (Pull). Each member names exactly
// one whole chunk of a key this server holds, checked as the engine's Push would check it;
// members are distinct. Registering an id again replaces it; a node keeps its last
// ServerEngine::kMaxGroupsPerNode groups. A group push is exactly the push of its members (the
// same rounds, updates, request ids and errors); the lookups, checks and headers per key are
// what it saves.
//
// Arenas: a group whose members are small and in no arena yet gets one - one buffer holding the
// members' values back to back - so that a push that needs no round is one update per run of
// one dtype and a pull one copy. Group rounds (key_group_rounds.cc): in dist_sync with several
// workers, a group in an arena pushed whole by every worker keeps one round for the whole
// group instead of one per member.
//
// Threading: thread-safe. Its state is guarded by the engine's lock, which it takes itself; the
// engine calls its group-round hooks (CheckRound, SplitRounds, SplitAllRounds, open_rounds)
// with that lock held. Data moves under the arenas' and chunks' locks, taken after the
// engine's, never while holding one.
#ifndef KVSTORE_SERVER_CORE_KEY_GROUPS_H_
#define KVSTORE_SERVER_CORE_KEY_GROUPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/core/engine_values.h"
#include "server/core/node_groups.h"
#include "server/core/server_engine.h"

namespace kvstore {

class KeyGroups {
 public:
  using Done = engine::Done;
  using Ack = GroupAck;

  explicit KeyGroups(ServerEngine* engine) : engine_(*engine) {}

  // Register: NotFound / InvalidArgument naming the key as for the engine's Push,
  // InvalidArgument for a repeated member, ResourceExhausted when the group would take the
  // engine over its memory budget (a group holds its members' list and, once pulled, a buffer
  // of its packed size); nothing is registered then.
  absl::Status Register(uint64_t node_id, uint64_t group_id, absl::Span<const ValueSlice> members)
      ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Push: as the engine's Push; FailedPrecondition naming the group when the node has not
  // registered it (the sender registers it again), InvalidArgument when `bytes` is not the
  // group's size. With Ack::kOrdered, `done` may run with OK before the update is applied, once
  // it is sure to succeed and holds the lock of every value it changes: anything that reads
  // them afterwards (a pull on any thread, a checkpoint) waits for it. That is the case for a
  // group held in an arena, pushed outside dist_sync rounds, with a piecewise updater, when its
  // arena is not busy; otherwise, and always with Ack::kApplied, `done` runs once the update is
  // applied. `done` must not read the group's values with kOrdered (it runs under their lock).
  void Push(uint64_t node_id, uint64_t request_id, uint64_t group_id, const ByteChunks& bytes,
            Done done, Ack ack = Ack::kApplied);
  // Pull returns the members' stored elements packed in member order: the first `bytes` bytes
  // of `buffer`, which the next pull of the group reuses once this handle is released.
  absl::StatusOr<PackedGroup> Pull(uint64_t node_id, uint64_t group_id) const
      ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // InArena is true when the node's group `group_id` is applied through an arena. A group gets
  // one when none of its members is in an arena yet and each is at most 64 KiB, or when its
  // members lie in one arena in its order (another worker's registration of the same list).
  bool InArena(uint64_t node_id, uint64_t group_id) const ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // rounds_done counts the dist_sync rounds completed for a whole group at once. A round in
  // which some member is also pushed on its own (the engine's Push, or a group not laid out the
  // same) goes member by member from then on; both give the same values, rounds and
  // acknowledgements.
  int64_t rounds_done() const ABSL_LOCKS_EXCLUDED(engine_.mu_);

  // Hooks of the engine's round machinery, called with the engine's lock held (not analysed
  // across the two classes: each asserts the lock). CheckRound is the engine's CheckRound for
  // a chunk in an open group round; SplitRounds turns the open group rounds holding any of
  // `chunks` into rounds per member (before a push of those chunks one by one); SplitAllRounds
  // splits every open group round that can be; open_rounds counts the open group rounds;
  // MaxRoundStarted is the highest round a member of an open group round has started (0 when
  // none is open): the rounds every worker has joined stay whole through SplitAllRounds, and a
  // member's own count (Chunk::rounds_started) does not show them until they complete.
  absl::Status CheckRound(const Key& key, const engine::Chunk& chunk, uint64_t node_id) const;
  void SplitRounds(absl::Span<engine::Chunk* const> chunks);
  void SplitAllRounds();
  int64_t open_rounds() const;
  int64_t MaxRoundStarted() const;

 private:
  using Arena = engine::Arena;
  using Chunk = engine::Chunk;
  using ChunkLock = engine::ChunkLock;
  using Group = engine::Group;
  using GroupRound = engine::GroupRound;
  using PushCall = engine::PushCall;

  // PlaceInArena gives a new group the arena of its members (moving them into a new one when
  // none is in an arena yet and all are small), or none when they are placed otherwise.
  void PlaceInArena(Group* group, absl::Span<const ValueSlice> members)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_.mu_);
  // FindPushed checks the sender and finds the group a push names, with the push's size.
  absl::Status FindPushed(uint64_t node_id, uint64_t group_id, const ByteChunks& bytes,
                          std::shared_ptr<const Group>* group) const
      ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // Find returns a node's registered group, FailedPrecondition naming it otherwise.
  absl::StatusOr<std::shared_ptr<const Group>> Find(uint64_t node_id, uint64_t group_id) const
      ABSL_SHARED_LOCKS_REQUIRED(engine_.mu_);
  // MergeMembers merges a group push member by member (each chunk's MergeSpan), adding the
  // members whose round completed (or that were applied) to `*completed`; the first error.
  absl::Status MergeMembers(const Group& group, const ByteChunks& bytes,
                            const std::shared_ptr<Updater>& updater,
                            std::vector<Chunk*>* completed);
  // PushRound takes a group push into its group's round when it can, returning false (nothing
  // done) when the push must go member by member.
  bool PushRound(uint64_t node_id, uint64_t request_id, const std::shared_ptr<const Group>& group,
                 const ByteChunks& bytes, const std::shared_ptr<Updater>& updater, Done* done)
      ABSL_LOCKS_EXCLUDED(engine_.mu_);
  // JoinRound registers a group push in its group's round (opening it when needed): false when
  // the push must go member by member; true with `*call` and `*round` set, or with `*call` null
  // when the engine's BeginPush answered it (`*error`, and `*done` still to run).
  bool JoinRound(uint64_t node_id, uint64_t request_id, const std::shared_ptr<const Group>& group,
                 Done* done, std::shared_ptr<GroupRound>* round, std::shared_ptr<PushCall>* call,
                 absl::Status* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_.mu_);
  // CloseRound settles a group round whose updater has run: answers its pushes with `error`,
  // counts the members' rounds and closes it.
  void CloseRound(const std::shared_ptr<GroupRound>& round, const Group& group,
                  const absl::Status& error) ABSL_LOCKS_EXCLUDED(engine_.mu_);

  ServerEngine& engine_;
  NodeGroups<Group> groups_ ABSL_GUARDED_BY(engine_.mu_){ServerEngine::kMaxGroupsPerNode};
  // The open group rounds (each counts once among the engine's open rounds too), and the group
  // rounds completed so far.
  int64_t open_rounds_ ABSL_GUARDED_BY(engine_.mu_) = 0;
  int64_t rounds_done_ ABSL_GUARDED_BY(engine_.mu_) = 0;
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_KEY_GROUPS_H_
