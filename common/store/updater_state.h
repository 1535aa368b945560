// Saved updater state (optimizer moments, counts, master weights) on the wire and in files.
#ifndef KVSTORE_COMMON_STORE_UPDATER_STATE_H_
#define KVSTORE_COMMON_STORE_UPDATER_STATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/store/updater.h"
#include "proto/kvstore.pb.h"

namespace kvstore {

void UpdaterStateToProto(const UpdaterStateData& state, proto::UpdaterState* out);
// InvalidArgument naming the part for a key or dtype that does not parse.
absl::StatusOr<UpdaterStateData> UpdaterStateFromProto(const proto::UpdaterState& state);

// SaveOptimizerStateFile / LoadOptimizerStateFile: `state` in a state file of kind
// kUpdaterState (common/state_file.h); errors name the file.
absl::Status SaveOptimizerStateFile(const std::string& path, const UpdaterStateData& state);
absl::StatusOr<UpdaterStateData> LoadOptimizerStateFile(const std::string& path);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_STORE_UPDATER_STATE_H_
