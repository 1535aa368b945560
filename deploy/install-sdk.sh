#!/usr/bin/env bash
# Builds the client SDK as a shared library with Bazel and installs it, with its headers,
# kvstore.pc and the CMake package KVStore, into a prefix (docs/deploy.md):
#
#   bash deploy/install-sdk.sh [--libdir DIR] PREFIX      # e.g. /usr/local or $HOME/.local
#
# Then, in a CMake project:  find_package(KVStore)  target_link_libraries(t KVStore::kvstore)
# or with pkg-config:        g++ job.cc $(pkg-config --cflags --libs kvstore)
# (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig and CMAKE_PREFIX_PATH=PREFIX where PREFIX is not a
# standard one). The library is libkvstore.so (soname libkvstore.so.0), the SDK without tcmalloc:
# the program keeps its own allocator. It depends on Debian's gRPC, protobuf, Abseil, spdlog and
# OpenSSL shared libraries (deploy/install-deps.sh installs them). Run it from the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ "${1:-}" = "--libdir" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 [--libdir DIR] PREFIX" >&2; exit 2; }
  args=(--libdir "$2")
  shift 2
fi
[ $# -eq 1 ] || { echo "usage: $0 [--libdir DIR] PREFIX" >&2; exit 2; }
prefix=$1
case "$prefix" in /*) ;; *) prefix="$OLDPWD/$prefix" ;; esac

bash deploy/install-deps.sh
source deploy/bazel-env.sh
kv_bazel build //deploy/sdk:libkvstore.so
version=$(sed -n 's/.*kVersion\[\] = "\([0-9.]*\)";.*/\1/p' common/flags_usage.h)
bash deploy/sdk/install.sh "${args[@]}" "$prefix" "$(bazel info bazel-bin)/deploy/sdk/libkvstore.so" \
  "$version" "$PWD"
