// The built-in controller command heads every kvserver runs (server/core/controller.h says
// what each does), named once for the controller, the scheduler and the SDK that send them.
#ifndef KVSTORE_COMMON_SERVER_COMMANDS_H_
#define KVSTORE_COMMON_SERVER_COMMANDS_H_

namespace kvstore {

inline constexpr int kCommandSetUpdater = 0;
inline constexpr int kCommandStats = 1;
inline constexpr int kCommandPing = 2;
inline constexpr int kCommandSetOptimizer = 3;
inline constexpr int kCommandCheckpoint = 4;
inline constexpr int kCommandSaveOptimizerStates = 5;
inline constexpr int kCommandLoadOptimizerStates = 6;
inline constexpr int kCommandCutBegin = 7;
inline constexpr int kCommandCutLimit = 8;
inline constexpr int kCommandCutWrite = 9;
inline constexpr int kCommandCutCommit = 10;
inline constexpr int kCommandCutPublish = 11;
inline constexpr int kCommandCutAbort = 12;
inline constexpr int kCommandMaxRound = 13;
inline constexpr int kCommandCopyOut = 14;
inline constexpr int kCommandCopyIn = 15;
// Heads from here up go to a kvserver's custom controller.
inline constexpr int kFirstCustomCommand = 16;
// The scheduler's own command (the Command RPC; no kvserver runs it): body "RANK" drains server
// RANK from the running job (kvctl servers drain; server/scheduler/core/server_rescaler.h).
inline constexpr int kCommandDrainServer = -1;

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SERVER_COMMANDS_H_
