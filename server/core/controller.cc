#include "server/core/controller.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/proto_convert.h"
#include "common/state_file.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"
#include "common/store/updater_state.h"
#include "server/core/checkpoint_reshard.h"
#include "server/core/checkpoint_set.h"
#include "server/core/engine_cuts.h"
#include "server/core/engine_state.h"
#include "server/core/shard_encoding.h"
namespace kvstore {

absl::StatusOr<std::string> Controller::Run(int head, absl::string_view body) {
  switch (head) {
    case kCommandSetUpdater: {
      body = absl::StripAsciiWhitespace(body);
      const size_t space = body.find(' ');
      const absl::string_view name = body.substr(0, space);
      const absl::string_view config =
          space == absl::string_view::npos ? absl::string_view() : body.substr(space + 1);
      ASSIGN_OR_RETURN(std::unique_ptr<Updater> updater, registry_->Create(name, config));
      engine_->SetUpdater(std::move(updater));
      proto::UpdaterSpec spec;
      spec.set_registry_name(std::string(name));
      spec.set_registry_config(std::string(config));
      SetUpdaterSpec(std::move(spec));
      return std::string(name);
    }
    case kCommandStats: {
      const ShardStore::Stats stats = engine_->stats();
      return absl::StrCat("keys=", stats.num_keys, " bytes=", stats.num_bytes,
                          " updater=", engine_->updater_name());
    }
    case kCommandPing:
      return absl::StrCat("server ", rank_, ": ", body);
    case kCommandSetOptimizer: {
      proto::OptimizerConfig config;
      if (!config.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return absl::InvalidArgumentError(
            "SetOptimizer: the body is not a serialized OptimizerConfig");
      }
      const OptimizerConfig typed = OptimizerConfigFromProto(config);
      ASSIGN_OR_RETURN(std::unique_ptr<Updater> optimizer, MakeOptimizer(typed));
      RETURN_IF_ERROR(CheckKeepsState(typed, engine_->updater_name()));
      const std::string name(optimizer->name());
      engine_->SetUpdater(std::move(optimizer), typed.keep_state);
      proto::UpdaterSpec spec;
      *spec.mutable_optimizer() = config;
      spec.mutable_optimizer()->clear_keep_state();  // A restored server loads the state.
      SetUpdaterSpec(std::move(spec));
      return name;
    }
    case kCommandCheckpoint:
      return Checkpoint(std::string(absl::StripAsciiWhitespace(body)));
    case kCommandSaveOptimizerStates: {
      ASSIGN_OR_RETURN(UpdaterStateData state, engine_->state().SaveUpdaterState());
      proto::UpdaterState message;
      UpdaterStateToProto(state, &message);
      return SerializeWhole(message, absl::StrCat("the optimizer state of server ", rank_));
    }
    case kCommandLoadOptimizerStates: {
      proto::UpdaterState message;
      if (!message.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return absl::InvalidArgumentError(
            "LoadOptimizerStates: the body is not a serialized UpdaterState");
      }
      ASSIGN_OR_RETURN(UpdaterStateData state, UpdaterStateFromProto(message));
      RETURN_IF_ERROR(engine_->state().LoadUpdaterState(state));
      return absl::StrCat("loaded the state of ", state.optimizer);
    }
    case kCommandCutBegin:
    case kCommandCutLimit:
    case kCommandCutWrite:
    case kCommandCutCommit:
    case kCommandCutPublish:
    case kCommandCutAbort:
      return RunCut(head, body);
    case kCommandMaxRound:
      return absl::StrCat(engine_->cuts().MaxRoundStarted());
    case kCommandCopyOut:
    case kCommandCopyIn:
      return RunCopy(head, body);
    default:
      if (head >= kFirstCustomCommand && custom_) return custom_(head, body);
      return absl::InvalidArgumentError(absl::StrCat(
          "no controller for command head ", head,
          " (built in: 0 set updater, 1 stats, 2 ping, 3 set optimizer, 4 checkpoint, 5 save "
          "and 6 load optimizer states, 7-15 the scheduler's checkpoint sets and shard copies; ",
          kFirstCustomCommand, " and up need a custom controller)"));
  }
}

std::string CheckpointFileName(int rank) { return absl::StrCat("server-", rank, ".ckpt"); }

std::string CheckpointPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, dir.empty() || dir.back() == '/' ? "" : "/", CheckpointFileName(rank));
}

absl::StatusOr<ConfinedDirectory> Controller::CheckpointDirectory(const std::string& dir,
                                                                  bool create) const {
  if (checkpoint_root_ == nullptr) {
    return absl::FailedPreconditionError(
        "this server has no checkpoint root: it neither writes nor restores checkpoints");
  }
  return checkpoint_root_->OpenDirectory(dir, create);
}

void Controller::SetUpdaterSpec(proto::UpdaterSpec spec) {
  absl::MutexLock lock(&spec_mu_);
  spec_ = std::move(spec);
}

absl::StatusOr<std::unique_ptr<Updater>> Controller::MakeUpdater(
    const proto::UpdaterSpec& spec) const {
  if (spec.has_optimizer()) return MakeOptimizer(OptimizerConfigFromProto(spec.optimizer()));
  return registry_->Create(spec.registry_name(), spec.registry_config());
}

void Controller::AppliedToProto(const std::vector<AppliedRequests>& applied, AppliedIds* out) {
  for (const AppliedRequests& node : applied) {
    proto::AppliedRequestIds* ids = out->Add();
    ids->set_node_id(node.node_id);
    *ids->mutable_request_ids() = {node.request_ids.begin(), node.request_ids.end()};
  }
}

std::vector<AppliedRequests> Controller::AppliedFromProto(const AppliedIds& ids) {
  std::vector<AppliedRequests> applied;
  for (const proto::AppliedRequestIds& node : ids) {
    applied.push_back({node.node_id(), std::vector<uint64_t>(node.request_ids().begin(),
                                                             node.request_ids().end())});
  }
  return applied;
}

proto::ShardCheckpoint Controller::MakeCheckpoint(const EngineSnapshot& snapshot) {
  proto::ShardCheckpoint checkpoint;
  checkpoint.set_server_rank(rank_);
  checkpoint.set_num_servers(job_.num_servers);
  checkpoint.set_mode(job_.mode);
  checkpoint.set_chunk_bytes(job_.chunk_bytes);
  for (const StoredPart& part : snapshot.parts) {
    proto::CheckpointValue* value = checkpoint.add_values();
    proto::TensorHeader* header = value->mutable_header();
    KeyToProto(part.layout.key, header->mutable_key());
    header->set_dtype(DTypeToProto(part.layout.dtype));
    for (int64_t d : part.layout.shape) header->add_shape(d);
    header->set_element_offset(part.layout.offset);
    header->set_element_count(part.layout.count);
    // Described only (EngineState::Describe): the bytes follow in a stream.
    if (part.data.defined()) {
      value->set_data(static_cast<const char*>(part.data.data()), part.data.byte_size());
    }
  }
  {
    absl::MutexLock lock(&spec_mu_);
    *checkpoint.mutable_updater() = spec_;
  }
  UpdaterStateToProto(snapshot.updater_state, checkpoint.mutable_updater_state());
  if (tables_ != nullptr) {
    for (proto::TableCheckpoint& piece : tables_->Snapshot()) {
      *checkpoint.add_tables() = std::move(piece);
    }
  }
  return checkpoint;
}

absl::StatusOr<std::string> Controller::Checkpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(const ConfinedDirectory directory, CheckpointDirectory(dir, /*create=*/true));
  ASSIGN_OR_RETURN(EngineSnapshot snapshot, engine_->state().Snapshot());
  ASSIGN_OR_RETURN(const std::string payload, EncodeShard(MakeCheckpoint(snapshot)));
  return directory.WriteStateFile(CheckpointFileName(rank_), StateKind::kShardCheckpoint, payload);
}

absl::Status Controller::CheckShard(const proto::ShardCheckpoint& checkpoint,
                                    const std::string& what) const {
  auto mismatch = [&](absl::string_view field, auto saved, auto now) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": written by a job with ", field, " ", saved, ", this job has ", now));
  };
  if (checkpoint.server_rank() != rank_) {
    return mismatch("this file for server rank", checkpoint.server_rank(), rank_);
  }
  if (checkpoint.num_servers() != job_.num_servers) {
    return mismatch("servers:", checkpoint.num_servers(), job_.num_servers);
  }
  if (checkpoint.mode() != job_.mode) return mismatch("mode", checkpoint.mode(), job_.mode);
  if (checkpoint.chunk_bytes() != job_.chunk_bytes) {
    return mismatch("chunk bytes", checkpoint.chunk_bytes(), job_.chunk_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredPart>> Controller::PartsOf(
    const proto::ShardCheckpoint& checkpoint, const std::string& what, bool with_data) {
  std::vector<StoredPart> parts;
  for (const proto::CheckpointValue& value : checkpoint.values()) {
    const proto::TensorHeader& h = value.header();
    StoredPart part;
    absl::StatusOr<Key> key = KeyFromProto(h.key());
    absl::StatusOr<DType> dtype = key.ok() ? DTypeFromProto(h.dtype()) : key.status();
    if (!dtype.ok()) return absl::DataLossError(absl::StrCat(what, ": ", dtype.status().message()));
    part.layout = ValueSlice{*key, *dtype, Shape(h.shape().begin(), h.shape().end()),
                             h.element_offset(), h.element_count()};
    const size_t expected =
        with_data ? static_cast<size_t>(std::max<int64_t>(h.element_count(), 0)) * DTypeSize(*dtype)
                  : 0;
    if (h.element_count() < 0 || value.data().size() != expected) {
      return absl::DataLossError(absl::StrCat(what, ": key ", key->Quoted(), " holds ",
                                              value.data().size(), " bytes for ", h.element_count(),
                                              " elements"));
    }
    if (with_data) {
      // The engine copies the bytes in (EngineState::Restore): the part only borrows them from
      // the checkpoint, which outlives it, and nothing writes through it.
      part.data =
          Tensor::Borrow(const_cast<char*>(value.data().data()), *dtype, {h.element_count()});
    }
    part.chunk_rounds.assign(value.chunk_rounds().begin(), value.chunk_rounds().end());
    parts.push_back(std::move(part));
  }
  return parts;
}

absl::Status Controller::RestoreShard(const proto::ShardCheckpoint& checkpoint,
                                      const std::string& what) {
  RETURN_IF_ERROR(CheckShard(checkpoint, what));
  ASSIGN_OR_RETURN(const std::vector<StoredPart> parts, PartsOf(checkpoint, what, true));
  absl::StatusOr<UpdaterStateData> state = UpdaterStateFromProto(checkpoint.updater_state());
  if (!state.ok()) return absl::DataLossError(absl::StrCat(what, ": ", state.status().message()));
  if (absl::Status s = engine_->state().Restore(parts); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  return RestoreRest(checkpoint, *state, what);
}

absl::Status Controller::RestoreRest(const proto::ShardCheckpoint& checkpoint,
                                     const UpdaterStateData& state, const std::string& what) {
  absl::StatusOr<std::unique_ptr<Updater>> updater = MakeUpdater(checkpoint.updater());
  if (!updater.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot make the checkpoint's updater: ", updater.status().message()));
  }
  engine_->SetUpdater(*std::move(updater));
  if (absl::Status s = engine_->state().LoadUpdaterState(state); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  SetUpdaterSpec(checkpoint.updater());
  engine_->state().LoadApplied(AppliedFromProto(checkpoint.applied()));
  if (checkpoint.tables_size() > 0) {
    if (tables_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": holds tables, and this server keeps none"));
    }
    if (absl::Status s = tables_->Restore(checkpoint.tables()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    tables_->LoadApplied(AppliedFromProto(checkpoint.table_applied()));
  }
  return absl::OkStatus();
}

absl::Status Controller::Restore(const std::string& dir) {
  ASSIGN_OR_RETURN(const ConfinedDirectory directory, CheckpointDirectory(dir, /*create=*/false));
  const std::string path = directory.PathOf(CheckpointFileName(rank_));
  ASSIGN_OR_RETURN(VerifiedSet set, VerifyCheckpointSet(directory, rank_, job_.num_servers,
                                                        job_.mode, job_.chunk_bytes));
  std::string what = path;
  if (set.reshard) {
    // Written by another number of servers (or placement, or chunk size): this server's part
    // of every key, re-placed from all the files.
    what = absl::StrCat(directory.path(), " (checkpoint ", set.manifest.checkpoint_id(), " of ",
                        set.manifest.num_servers(), " servers, re-placed for server ", rank_,
                        " of ", job_.num_servers, ")");
    ASSIGN_OR_RETURN(Partitioner partitioner,
                     Partitioner::Create(job_.num_servers, job_.big_value_bound));
    absl::StatusOr<proto::ShardCheckpoint> mine =
        ReshardCheckpoint(set.all, rank_, partitioner, job_.chunk_bytes);
    if (!mine.ok()) {
      return absl::Status(mine.status().code(), absl::StrCat(what, ": ", mine.status().message()));
    }
    set.own = *std::move(mine);
    set.all.clear();
  }
  RETURN_IF_ERROR(RestoreShard(set.own, what));
  if (set.manifest.round() >= 0) engine_->state().SetRoundsDone(set.manifest.round());
  restored_round_ = std::max<int64_t>(set.manifest.round(), 0);
  restored_checkpoint_ = set.manifest.checkpoint_id();
  restored_from_ = what;
  return absl::OkStatus();
}

}  // namespace kvstore
