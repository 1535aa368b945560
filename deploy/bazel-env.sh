# Sourced by the project's scripts: runs Bazel with a disk cache under the home folder, so fresh
# clones on the same machine reuse earlier build results.
KV_DISK_CACHE="${KV_DISK_CACHE:-$HOME/.cache/kvstore/bazel-disk-cache}"
mkdir -p "$KV_DISK_CACHE"

# kv_bazel COMMAND [ARGS...]: bazel COMMAND with the shared cache.
kv_bazel() {
  local command="$1"
  shift
  bazel "$command" --disk_cache="$KV_DISK_CACHE" "$@"
}
