#!/usr/bin/env bash
# Installs a built KVStore SDK into a prefix: the public headers, the shared library, kvstore.pc
# and the CMake package KVStore. deploy/install-sdk.sh builds the library with Bazel and calls
# this; the SDK's install test calls it on the files Bazel hands the test.
#
#   install.sh [--libdir DIR] PREFIX LIBRARY VERSION SOURCE_ROOT
#
# PREFIX       where to install (created when missing); relocatable: the CMake package finds
#              its files relative to itself, kvstore.pc names PREFIX (pkg-config
#              --define-prefix relocates it).
# LIBRARY      the built libkvstore.so (//deploy/sdk:libkvstore.so).
# VERSION      the SDK's version, MAJOR.MINOR.PATCH (kVersion in common/flags_usage.h).
# SOURCE_ROOT  the folder holding client/ and common/ (the repository, or a test's runfiles).
# --libdir     the library folder below PREFIX (default: lib).
#
# Installed:
#   PREFIX/include/kvstore/client/kvstore.h and the project headers it includes (common/...);
#     programs add -IPREFIX/include/kvstore and write #include "client/kvstore.h", as in Bazel.
#   PREFIX/LIBDIR/libkvstore.so.VERSION, with links libkvstore.so.MAJOR (the soname) and
#     libkvstore.so.
#   PREFIX/LIBDIR/pkgconfig/kvstore.pc              pkg-config --cflags --libs kvstore
#   PREFIX/LIBDIR/pkgconfig/kvstore-c.pc            the same for C programs (client/c_api.h)
#   PREFIX/LIBDIR/cmake/KVStore/KVStoreConfig.cmake find_package(KVStore) -> KVStore::kvstore
#   PREFIX/LIBDIR/cmake/KVStore/KVStoreConfigVersion.cmake
# The headers use Abseil (status, statusor, strings, time, span, hash): both files declare it, so
# a program links the same Abseil as the library (Debian's libabsl-dev).
# Exits 0 on success, 2 on a usage error, 1 when a file is missing or cannot be written.
set -euo pipefail

# The public headers: client/kvstore.h and every project header it includes, transitively, and
# the C API's client/c_api.h.
HEADERS=(
  client/c_api.h
  client/kvstore.h
  common/compression.h
  common/key.h
  common/optimizer_config.h
  common/row_sparse.h
  common/security_options.h
  common/store/embedding_table.h
  common/tensor.h
)

usage() {
  echo "usage: $0 [--libdir DIR] PREFIX LIBRARY VERSION SOURCE_ROOT" >&2
  exit 2
}

libdir=lib
if [ "${1:-}" = "--libdir" ]; then
  [ $# -ge 2 ] || usage
  libdir=$2
  shift 2
fi
[ $# -eq 4 ] || usage
prefix=$1 library=$2 version=$3 root=$4
[[ "$version" =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]] || {
  echo "install.sh: version '$version' is not MAJOR.MINOR.PATCH" >&2
  exit 2
}
major=${BASH_REMATCH[1]}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$library" ] || { echo "install.sh: no library at $library" >&2; exit 1; }
for header in "${HEADERS[@]}"; do
  [ -f "$root/$header" ] || { echo "install.sh: no header $root/$header" >&2; exit 1; }
done

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
include_dir="$prefix/include/kvstore"
lib_dir="$prefix/$libdir"
mkdir -p "$include_dir" "$lib_dir/pkgconfig" "$lib_dir/cmake/KVStore"

for header in "${HEADERS[@]}"; do
  install -D -m 644 "$root/$header" "$include_dir/$header"
done
install -m 755 "$library" "$lib_dir/libkvstore.so.$version"
ln -sfn "libkvstore.so.$version" "$lib_dir/libkvstore.so.$major"
ln -sfn "libkvstore.so.$major" "$lib_dir/libkvstore.so"

# The CMake package finds the prefix from its own place: PREFIX/LIBDIR/cmake/KVStore.
up=$(echo "$libdir/cmake/KVStore" | awk -F/ '{ s = ""; for (i = 1; i <= NF; i++) if ($i != "") s = s "/.."; print substr(s, 2) }')
substitute() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
      -e "s|@MAJOR@|$major|g" -e "s|@PREFIX_FROM_CONFIG@|$up|g" "$1" > "$2"
  chmod 644 "$2"
}
substitute "$here/kvstore.pc.in" "$lib_dir/pkgconfig/kvstore.pc"
substitute "$here/kvstore-c.pc.in" "$lib_dir/pkgconfig/kvstore-c.pc"
substitute "$here/KVStoreConfig.cmake.in" "$lib_dir/cmake/KVStore/KVStoreConfig.cmake"
substitute "$here/KVStoreConfigVersion.cmake.in" "$lib_dir/cmake/KVStore/KVStoreConfigVersion.cmake"
echo "install.sh: KVStore SDK $version installed in $prefix"
