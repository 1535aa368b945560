// Controller: runs the commands a worker sends with SendCommandToServers(head, body) (and
// `kvctl command HEAD BODY`), once on every server.
//
// Built-in heads:
//   0  kCommandSetUpdater  body "NAME [CONFIG]": replace the updater with the registry's NAME
//                          (e.g. "sgd lr=0.1 momentum=0.9"); replies with the updater's name.
//   1  kCommandStats       replies "keys=N bytes=M updater=NAME".
//   2  kCommandPing        replies "server R: BODY" (R: this server's rank).
//   3  kCommandSetOptimizer body: a serialized proto::OptimizerConfig (the SDK's SetOptimizer);
//                          replaces the updater with that optimizer (between dist_sync
//                          rounds); replies with the optimizer's name.
//   4  kCommandCheckpoint  body: a directory DIR relative to the server's checkpoint root
//                          (server/core/checkpoint_root.h). Writes the shard - values,
//                          updater and its state - to ROOT/DIR/server-R.ckpt atomically
//                          (common/state_file.h); replies with that path. `kvserver --restore
//                          DIR` resumes from it. A DIR that would leave the root is refused.
//   5  kCommandSaveOptimizerStates  replies with the serialized proto::UpdaterState.
//   6  kCommandLoadOptimizerStates  body: a serialized proto::UpdaterState; the server keeps
//                          the parts of the keys it holds.
//   7-12                   The steps of a checkpoint set, sent by the scheduler's coordinator
//                          (server/scheduler/core/checkpoint_coordinator.h, checkpoint_set.h):
//   7  kCommandCutBegin    body "ID": freeze (EngineCuts::Begin); replies the highest
//                          round started.
//   8  kCommandCutLimit    body "ID ROUND": EngineCuts::Limit(ROUND).
//   9  kCommandCutWrite    body "ID ROUND JOB DIR": when every key has reached ROUND, snapshot,
//                          let the held pushes go on, write PendingFileName(R) in DIR and reply
//                          "written BYTES CRC32"; until then reply "waiting: " and the key
//                          still behind (nothing written).
//  10  kCommandCutCommit   body "DIR": remove DIR/MANIFEST, rename the pending file over
//                          server-R.ckpt.
//  11  kCommandCutPublish  body "DIR\n" + serialized proto::CheckpointManifest: write
//                          DIR/MANIFEST atomically.
//  12  kCommandCutAbort    body "ID DIR": end the cut (held pushes go on) and remove the
//                          pending file; with the body "remove DIR", remove this server's files
//                          of the set in DIR and DIR itself when empty (keeping the last K).
//  13  kCommandMaxRound    replies the highest round any key has started (periodic
//                          checkpoints every N rounds).
//  14  kCommandCopyOut     a copy of this shard for a replacement server joining the job (a
//                          job with replicas; checkpoint_coordinator.h), after steps 7 and 8:
//                          "cut ID ROUND EPOCH": once every key has reached ROUND, refuse
//                          from then on writes routed by a view older than EPOCH
//                          (common/view_epoch.h; the pushes the cut holds too), describe the
//                          shard (each chunk's round, the applied request ids; no values'
//                          bytes) as the header of a stream (server/core/shard_stream.h) and
//                          reply "copied BYTES CRC32 HEAD": the stream's length, its header's
//                          CRC-32 and length - until then "waiting: " and the key behind;
//                          "send ID ADDRESS BACKUP": send the stream, its values read from
//                          the engine as they go, server to server into the server at ADDRESS
//                          (its backup engine when BACKUP is 1) through the copy sender
//                          (SetCopySender: pages of command 15 "put", signed by this server)
//                          and reply "sent BYTES" (the request handler runs it on a thread of
//                          its own); "end ID": drop it; "abort ID": drop it, end the cut and
//                          refuse nothing (the join failed).
//  15  kCommandCopyIn      on the replacement server: "begin BYTES FROM [HEAD]": start
//                          receiving a copy of BYTES bytes (at most the server's memory budget)
//                          whose pages node FROM (the server sending it) may put - with HEAD,
//                          a stream whose header is HEAD bytes long, placed into the engine
//                          (which must hold no key) as it arrives; "put OFFSET [CRC32]\n" +
//                          bytes: place a page of it, in any order (the header's pages first),
//                          its CRC-32 checked when given; "load BYTES CRC32": check that every
//                          byte arrived and the copy's size and CRC (a stream's header's),
//                          restore it (values, rounds, updater and state, applied request
//                          ids) into this server's engine, which must hold no key but the
//                          stream's, and reply "loaded N keys".
//                          Only the scheduler begins and loads a copy; a page comes from the
//                          scheduler or from the node the begin named (copy_sender()).
//                          Adding or draining servers while the job runs (docs/state.md;
//                          server/scheduler/core/server_rescaler.h) uses these verbs too:
//                          14 "cutparts ID ROUND EPOCH": "cut", keeping the copy whole for
//                          "part" (replies "cut N keys"); "part ID RANK SERVERS": the
//                          part of it that server RANK of SERVERS needs (CheckpointPartFor),
//                          kept for "sendpart" (replies "part BYTES CRC32"); "sendpart ID
//                          RANK ADDRESS BACKUP": send that part to the server at ADDRESS (its
//                          backup engine when BACKUP is 1) as "send" does (replies "sent
//                          BYTES"); "keeppart ID RANK SERVERS": cut the
//                          part for RANK, this server's new rank, and stage it here as
//                          "stage" would (its own part: nothing is sent);
//                          15 "stage BYTES CRC32": as "load" checks it, keep the part received
//                          beside the others staged; "merge RANK SERVERS": merge the parts
//                          staged into this server's shard as server RANK of SERVERS
//                          (ReshardCheckpoint with pieces), kept for "swap" (replies "merged
//                          N keys"); "swap EPOCH": serve that shard from now on, refusing every
//                          request routed by a view older than EPOCH (SetShardSwapper: the
//                          daemon builds a new backend); "retire EPOCH": a drained server
//                          refuses every request routed by an older view; "unstage": drop what
//                          was staged and merged (the rescale failed).
// Heads from kFirstCustomCommand up go to the custom controller given to the kvserver
// (KVServerOptions::custom_controller, MXNet's `kvstore_server._controller`): a function
// (head, body) -> StatusOr<reply>. Other heads, or custom heads without a custom controller, are
// InvalidArgument naming the head.
//
// Threading: Run may be called from several threads; the engine is thread-safe and the custom
// controller must be.
#ifndef KVSTORE_SERVER_CORE_CONTROLLER_H_
#define KVSTORE_SERVER_CORE_CONTROLLER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/partitioner.h"
#include "common/server_commands.h"
#include "common/store/updater.h"
#include "proto/kvstore.pb.h"
#include "server/core/checkpoint_root.h"
#include "server/core/copy_source.h"
#include "server/core/server_engine.h"
#include "server/core/shard_stream.h"
#include "server/core/table_engine.h"

namespace kvstore {

// CheckpointFileName returns "server-RANK.ckpt", the name of a server's checkpoint file.
std::string CheckpointFileName(int rank);
// CheckpointPath returns DIR/server-RANK.ckpt.
std::string CheckpointPath(const std::string& dir, int rank);

// JobShape: what a checkpoint records of the job, checked again on restore.
struct JobShape {
  int num_servers = 1;
  std::string mode;
  int64_t chunk_bytes = 0;
  // The job's bound above which values are split over the servers (common/partitioner.h): a
  // restore that re-places a set places keys with it.
  int64_t big_value_bound = kDefaultBigValueBound;
};

using CustomController =
    std::function<absl::StatusOr<std::string>(int head, absl::string_view body)>;

// CopySender sends `copy` into the server at `address` (its backup engine with `backup`) as
// command 15 "put" pages, signed by this server, and returns once every page was accepted; the
// first error names the page and the server. It blocks; the gRPC daemon's is
// server/grpc/shard_copy_sender.h.
using CopySender =
    std::function<absl::Status(const std::string& address, bool backup, const CopySource& copy)>;

class Controller {
 public:
  // The engine and registry must outlive the controller.
  Controller(ServerEngine* engine, const UpdaterRegistry* registry, CustomController custom,
             int rank)
      : engine_(engine), registry_(registry), custom_(std::move(custom)), rank_(rank) {
    spec_.set_registry_name("assign");  // The engine's default; the daemon records --updater.
  }

  // Run executes one command and returns its reply.
  absl::StatusOr<std::string> Run(int head, absl::string_view body);

  // SetJob records what checkpoints write about the job (the daemon calls it once).
  void SetJob(JobShape job) { job_ = std::move(job); }
  // SetTables gives the controller the server's tables (docs/tables.md), which checkpoints
  // and copies then carry beside the engine's values. `tables` must outlive the controller.
  void SetTables(TableEngine* tables) { tables_ = tables; }

  // SetCheckpointRoot sets the directory checkpoints are written under and restored from (the
  // daemon calls it once, before serving). Without one, both are FailedPrecondition.
  void SetCheckpointRoot(std::shared_ptr<const CheckpointRoot> root) {
    checkpoint_root_ = std::move(root);
  }
  // SetCopySender sets how this server sends a copy it holds to another server (command 14
  // "send"); without one, "send" is FailedPrecondition. Call once, before serving.
  void SetCopySender(CopySender sender) { copy_sender_ = std::move(sender); }
  // ShardSwapper makes the server serve `shard` as server `rank` of `num_servers`, refusing
  // every request routed by a view older than `epoch` (command 15 "swap"): the kvserver daemon
  // builds a new backend around it. Without one, "swap" is FailedPrecondition. Call once,
  // before serving.
  using ShardSwapper = std::function<absl::Status(const proto::ShardCheckpoint& shard, int rank,
                                                  int num_servers, uint64_t epoch)>;
  void SetShardSwapper(ShardSwapper swapper) { swapper_ = std::move(swapper); }
  // copy_sender returns the node the copy being received may come from (command 15 "begin
  // BYTES FROM"), 0 when none: the request handler lets that node put its pages.
  uint64_t copy_sender() const {
    absl::MutexLock lock(&cut_mu_);
    return copy_in_from_;
  }
  // SetUpdaterSpec records how the current updater was made (the daemon's --updater).
  void SetUpdaterSpec(proto::UpdaterSpec spec);

  // Restore verifies the checkpoint set in `dir` below the checkpoint root
  // (VerifyCheckpointSet: manifest, every file present against it), checks it against the job,
  // restores the values into the engine and installs the checkpoint's updater with its state.
  // Errors name the file and what does not match; a `dir` that would leave the root is
  // InvalidArgument or PermissionDenied naming it and the root.
  absl::Status Restore(const std::string& dir);

  // LoadShard restores `shard` (a shard merged by a rescale, "swap") into this controller's
  // engine, which holds nothing yet: values with their chunks' rounds, updater and state,
  // tables. Errors as Restore's, naming `what`.
  absl::Status LoadShard(const proto::ShardCheckpoint& shard, const std::string& what) {
    return RestoreShard(shard, what);
  }
  // restored_round / restored_checkpoint: the round and id of the set Restore restored (-1
  // and "" when none).
  int64_t restored_round() const { return restored_round_; }

  // AbandonCut ends what the scheduler left half done when it died (a server registering again
  // with a scheduler restarted in place, controller_cut.cc): a checkpoint set's cut (the pushes
  // it holds go on) and this server's files of that set not yet published (a pending file, or
  // a file committed without its manifest), a shard copy taken for a join or a rescale (as its
  // abort does), and a rescale's parts received. Returns what it ended ("" when nothing was open),
  // or the error of a file removal.
  absl::StatusOr<std::string> AbandonCut();
  // published returns the checkpoint sets this server published last (at most
  // kPublishedKept, oldest first): a server presents them when it registers again, so that a
  // restarted scheduler continues the job's checkpoint ids and periodic sets.
  std::vector<proto::PublishedCheckpoint> published() const;
  static constexpr size_t kPublishedKept = 64;
  const std::string& restored_checkpoint() const { return restored_checkpoint_; }
  // restored_from names what Restore read: this server's file, or the set it re-placed.
  const std::string& restored_from() const { return restored_from_; }

  // MakeUpdater builds the updater `spec` describes.
  absl::StatusOr<std::unique_ptr<Updater>> MakeUpdater(const proto::UpdaterSpec& spec) const;

 private:
  absl::StatusOr<std::string> Checkpoint(const std::string& dir);
  // SplitFields cuts a command's `body` into `n` fields at spaces, the last keeping the rest
  // (a DIR); InvalidArgument showing `usage` otherwise (controller_cut.cc).
  static absl::StatusOr<std::vector<std::string>> SplitFields(absl::string_view body, size_t n,
                                                              absl::string_view usage);
  // RunCut runs the checkpoint set commands 7-12 (controller_cut.cc).
  absl::StatusOr<std::string> RunCut(int head, absl::string_view body);
  // The cut's steps with their own bodies: write this server's file once its keys are at the
  // cut's round, publish the manifest, abort (or remove a set).
  absl::StatusOr<std::string> CutWrite(absl::string_view body);
  absl::StatusOr<std::string> CutPublish(absl::string_view body);
  absl::StatusOr<std::string> CutAbort(absl::string_view body);
  // CutRound reads the "ID ROUND" leading a cut step's fields: the round, once ID is the
  // checkpoint being cut here; InvalidArgument or FailedPrecondition otherwise.
  absl::StatusOr<int64_t> CutRound(const std::vector<std::string>& fields);
  // RunCopy runs commands 14 and 15 (controller_copy.cc): CopyIn (15: "begin", "put", "load"), and
  // the copy-out steps of 14: CopyOutCut ("cut": describe the shard as a stream's header once
  // every key reached the round, refuse older views' writes from then on; "cutparts": snapshot
  // it), CopyOutSend ("send": stream it) and CopyOutEnd ("end", "abort": withdraw the copy;
  // abort also ends the cut and accepts older views again).
  absl::StatusOr<std::string> RunCopy(int head, absl::string_view body);
  absl::StatusOr<std::string> CopyIn(absl::string_view body);
  absl::StatusOr<std::string> CopyOutCut(absl::string_view body);
  absl::StatusOr<std::string> CopyOutSend(absl::string_view body);
  absl::StatusOr<std::string> CopyOutEnd(const std::string& verb, absl::string_view body);
  // The verbs of a rescale (controller_copy.cc): 14 "cutparts", "part", "sendpart"; 15
  // "stage", "merge", "swap", "retire", "unstage".
  absl::StatusOr<std::string> CopyOutParts(const std::string& verb, absl::string_view body);
  absl::StatusOr<std::string> RescaleIn(const std::string& verb, absl::string_view body);
  // PlacementOf reads a rescale's "RANK SERVERS" (`servers_field`): the placement over that
  // many servers with this job's bound; InvalidArgument naming both when RANK is not one of them.
  absl::StatusOr<Partitioner> PlacementOf(uint64_t rank, const std::string& servers_field) const;
  // TakeCopyIn checks the copy received against `bytes` and `crc` and decodes it (command 15
  // "load" and "stage").
  absl::StatusOr<proto::ShardCheckpoint> TakeCopyIn(uint64_t bytes, uint64_t crc);
  // RestoreShard restores `checkpoint` (checked against the job) into the engine; `what`
  // names where it came from in errors (a file's path). Its steps: CheckShard checks it against
  // the job; PartsOf reads its values' parts (their bytes borrowed from it with `with_data`,
  // else none); RestoreRest restores all but the values (the updater and its state, the
  // requests applied, the tables).
  absl::Status RestoreShard(const proto::ShardCheckpoint& checkpoint, const std::string& what);
  absl::Status CheckShard(const proto::ShardCheckpoint& checkpoint, const std::string& what) const;
  static absl::StatusOr<std::vector<StoredPart>> PartsOf(const proto::ShardCheckpoint& checkpoint,
                                                         const std::string& what, bool with_data);
  absl::Status RestoreRest(const proto::ShardCheckpoint& checkpoint, const UpdaterStateData& state,
                           const std::string& what);
  // BeginStream begins receiving a streamed shard (15 "begin BYTES FROM HEAD"; shard_stream.h)
  // into this server's empty engine.
  absl::StatusOr<std::string> BeginStream(uint64_t bytes, uint64_t head, uint64_t from);
  // AppliedToProto / AppliedFromProto: request ids applied (an engine's or the tables') as a
  // copied shard carries them.
  using AppliedIds = google::protobuf::RepeatedPtrField<proto::AppliedRequestIds>;
  static void AppliedToProto(const std::vector<AppliedRequests>& applied, AppliedIds* out);
  static std::vector<AppliedRequests> AppliedFromProto(const AppliedIds& ids);
  // MakeCheckpoint builds this server's ShardCheckpoint from a snapshot.
  proto::ShardCheckpoint MakeCheckpoint(const EngineSnapshot& snapshot);
  absl::StatusOr<ConfinedDirectory> CheckpointDirectory(const std::string& dir, bool create) const;
  ServerEngine* engine_;
  TableEngine* tables_ = nullptr;  // Optional.
  const UpdaterRegistry* registry_;
  CustomController custom_;
  int rank_;
  JobShape job_;
  std::shared_ptr<const CheckpointRoot> checkpoint_root_;
  absl::Mutex spec_mu_;
  proto::UpdaterSpec spec_ ABSL_GUARDED_BY(spec_mu_);
  // The checkpoint set being cut (its id), empty when none.
  int64_t restored_round_ = -1;  // Set once, by Restore, before serving.
  std::string restored_checkpoint_;
  std::string restored_from_;
  mutable absl::Mutex cut_mu_;
  std::string cut_id_ ABSL_GUARDED_BY(cut_mu_);
  // The directory the cut's file went to (from its write until published or aborted), and
  // whether it was committed there.
  std::string cut_dir_ ABSL_GUARDED_BY(cut_mu_);
  bool cut_committed_ ABSL_GUARDED_BY(cut_mu_) = false;
  std::deque<proto::PublishedCheckpoint> published_ ABSL_GUARDED_BY(cut_mu_);
  // Command 14: the copy taken (its cut's id and bytes); command 15: the copy received.
  // The copy is shared with a "send" in progress, so that the lock is not held while it goes.
  std::string copy_id_ ABSL_GUARDED_BY(cut_mu_);
  // A join's copy is streamed from the engine (withdrawn when it ends); one received is
  // streamed into it (`stream_in_`, from "begin BYTES FROM HEAD" to "load").
  std::shared_ptr<ShardStreamOut> copy_out_ ABSL_GUARDED_BY(cut_mu_);
  std::shared_ptr<ShardStreamIn> stream_in_ ABSL_GUARDED_BY(cut_mu_);
  uint64_t copy_floor_before_ ABSL_GUARDED_BY(cut_mu_) = 0;  // The engine's view floor before.
  std::unique_ptr<char[]> copy_in_ ABSL_GUARDED_BY(cut_mu_);
  uint64_t copy_in_bytes_ ABSL_GUARDED_BY(cut_mu_) = 0;
  uint64_t copy_in_received_ ABSL_GUARDED_BY(cut_mu_) = 0;
  uint64_t copy_in_from_ ABSL_GUARDED_BY(cut_mu_) = 0;
  CopySender copy_sender_;  // Set before serving; optional.
  ShardSwapper swapper_;    // Set before serving; optional.
  // A rescale: the copy kept whole ("cutparts") and the parts cut from it by target rank; the
  // parts received ("stage") and the shard merged from them ("merge").
  std::shared_ptr<const proto::ShardCheckpoint> parts_from_ ABSL_GUARDED_BY(cut_mu_);
  std::map<int, std::shared_ptr<const std::string>> parts_out_ ABSL_GUARDED_BY(cut_mu_);
  std::vector<proto::ShardCheckpoint> staged_ ABSL_GUARDED_BY(cut_mu_);
  // (The merged shard names its rank and number of servers.)
  std::optional<proto::ShardCheckpoint> merged_ ABSL_GUARDED_BY(cut_mu_);
};

}  // namespace kvstore

#endif  // KVSTORE_SERVER_CORE_CONTROLLER_H_
