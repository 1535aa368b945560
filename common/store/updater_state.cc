#include "common/store/updater_state.h"

#include "absl/strings/str_cat.h"
#include "common/proto_convert.h"
#include "common/state_file.h"
#include "common/status_macros.h"

namespace kvstore {

void UpdaterStateToProto(const UpdaterStateData& state, proto::UpdaterState* out) {
  out->set_optimizer(state.optimizer);
  out->set_num_update(state.num_update);
  for (const PartStateData& part : state.parts) {
    proto::PartState* p = out->add_parts();
    KeyToProto(part.key, p->mutable_key());
    p->set_offset(part.offset);
    p->set_count(part.count);
    p->set_updates(part.updates);
    p->set_m_schedule(part.m_schedule);
    p->set_dtype(DTypeToProto(part.dtype));
    for (const std::string& b : part.buffers) p->add_buffers(b);
    p->set_master(part.master);
  }
}

absl::StatusOr<UpdaterStateData> UpdaterStateFromProto(const proto::UpdaterState& state) {
  UpdaterStateData out;
  out.optimizer = state.optimizer();
  out.num_update = state.num_update();
  for (const proto::PartState& p : state.parts()) {
    PartStateData part;
    absl::StatusOr<Key> key = KeyFromProto(p.key());
    if (!key.ok()) return key.status();
    part.key = *key;
    absl::StatusOr<DType> dtype = DTypeFromProto(p.dtype());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("saved state of key ", part.key.Quoted(), ": ", dtype.status().message()));
    }
    part.dtype = *dtype;
    part.offset = p.offset();
    part.count = p.count();
    part.updates = p.updates();
    part.m_schedule = p.m_schedule();
    part.buffers.assign(p.buffers().begin(), p.buffers().end());
    part.master = p.master();
    out.parts.push_back(std::move(part));
  }
  return out;
}

absl::Status SaveOptimizerStateFile(const std::string& path, const UpdaterStateData& state) {
  proto::UpdaterState message;
  UpdaterStateToProto(state, &message);
  ASSIGN_OR_RETURN(const std::string payload,
                   SerializeWhole(message, absl::StrCat("the optimizer state for ", path)));
  return WriteStateFile(path, StateKind::kUpdaterState, payload);
}

absl::StatusOr<UpdaterStateData> LoadOptimizerStateFile(const std::string& path) {
  absl::StatusOr<std::string> payload = ReadStateFile(path, StateKind::kUpdaterState);
  if (!payload.ok()) return payload.status();
  proto::UpdaterState message;
  if (!message.ParseFromString(*payload)) {
    return absl::DataLossError(absl::StrCat(path, ": the optimizer state does not parse"));
  }
  absl::StatusOr<UpdaterStateData> state = UpdaterStateFromProto(message);
  if (!state.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", state.status().message()));
  }
  return state;
}

}  // namespace kvstore
