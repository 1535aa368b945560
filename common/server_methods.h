// ServerMethod: the kvserver's request methods, named once for every transport.
//
// The gRPC transport sends each as the raw method of proto/kvstore.proto's KVServer service
// (GrpcMethodPath); the in-process transport hands it to the same request handler the gRPC
// service runs. The order is the service's.
#ifndef KVSTORE_COMMON_SERVER_METHODS_H_
#define KVSTORE_COMMON_SERVER_METHODS_H_

namespace kvstore {

enum class ServerMethod {
  kInit,
  kPush,
  kPull,
  kPushPull,
  kRowSparsePull,
  kCommand,
  kTableInit,
  kTablePush,
  kTablePull
};
inline constexpr int kNumServerMethods = 9;

// GrpcMethodPath returns the method's full gRPC name, e.g. "/kvstore.proto.KVServer/Push", or,
// for the backup copy a kvserver holds of the previous rank's shard (a job with replicas), the
// Backup method: "/kvstore.proto.KVServer/BackupPush". The service lists the nine methods, then
// their nine Backup methods, in this order.
inline const char* GrpcMethodPath(ServerMethod method, bool backup = false) {
  static constexpr const char* kPaths[2 * kNumServerMethods] = {
      "/kvstore.proto.KVServer/Init",
      "/kvstore.proto.KVServer/Push",
      "/kvstore.proto.KVServer/Pull",
      "/kvstore.proto.KVServer/PushPull",
      "/kvstore.proto.KVServer/RowSparsePull",
      "/kvstore.proto.KVServer/Command",
      "/kvstore.proto.KVServer/TableInit",
      "/kvstore.proto.KVServer/TablePush",
      "/kvstore.proto.KVServer/TablePull",
      "/kvstore.proto.KVServer/BackupInit",
      "/kvstore.proto.KVServer/BackupPush",
      "/kvstore.proto.KVServer/BackupPull",
      "/kvstore.proto.KVServer/BackupPushPull",
      "/kvstore.proto.KVServer/BackupRowSparsePull",
      "/kvstore.proto.KVServer/BackupCommand",
      "/kvstore.proto.KVServer/BackupTableInit",
      "/kvstore.proto.KVServer/BackupTablePush",
      "/kvstore.proto.KVServer/BackupTablePull"};
  return kPaths[static_cast<int>(method) + (backup ? kNumServerMethods : 0)];
}

// Mutates is true for the methods that change a server's state (every copy of a shard gets
// them in a job with replicas); false for reads, which one copy answers.
inline bool Mutates(ServerMethod method) {
  return method != ServerMethod::kPull && method != ServerMethod::kRowSparsePull &&
         method != ServerMethod::kTablePull;
}

// Framed is true for the methods whose requests are frames (common/wire_frame.h): a header
// message and a payload after it (Init, Push, PushPull, TablePush); the others' requests are
// plain messages.
inline bool Framed(ServerMethod method) {
  return method == ServerMethod::kInit || method == ServerMethod::kPush ||
         method == ServerMethod::kPushPull || method == ServerMethod::kTablePush;
}

// ServerMethodLabel returns the method's name in metrics and timelines: "init", "push",
// "pull", "push_pull", "row_sparse_pull", "command", "table_init", "table_push" or
// "table_pull".
inline const char* ServerMethodLabel(ServerMethod method) {
  static constexpr const char* kLabels[kNumServerMethods] = {
      "init",    "push",       "pull",       "push_pull", "row_sparse_pull",
      "command", "table_init", "table_push", "table_pull"};
  return kLabels[static_cast<int>(method)];
}

}  // namespace kvstore

#endif  // KVSTORE_COMMON_SERVER_METHODS_H_
