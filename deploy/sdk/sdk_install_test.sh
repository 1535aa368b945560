#!/usr/bin/env bash
# The SDK outside Bazel: installs libkvstore.so, the headers, kvstore.pc and the CMake package
# into a prefix (deploy/sdk/install.sh, as deploy/install-sdk.sh does), then, in $TEST_TMPDIR:
#   1. the installed library has its soname, no tcmalloc (readelf) and exports only namespace
#      kvstore, and the prefix holds every file;
#   2. every installed header compiles alone against the prefix and the system headers only;
#   3. examples/sdk_consumer builds with CMake (find_package(KVStore)) and, separately, with
#      pkg-config; neither executable links tcmalloc; the CMake package still works when the
#      prefix is moved and refuses a request for a newer major version;
#   4. both run as the two workers of a job of real daemons (scheduler and 2 kvservers from
#      Bazel, deploy/launch.py, job secret in KV_SECRET_FILE) and check every pulled value
#      against float64 sums (seed printed; KV_TEST_SEED repeats a run);
#   5. the C API: client/c_api.h compiles as C99 alone, and examples/c_worker (C, built with
#      CMake's KVStore::c and with pkg-config kvstore-c) runs as the two workers of another such
#      job, checking its values against float64 sums.
# Prints "test cases: N | N passed | N failed" (tests/run_tests.sh counts it).
set -uo pipefail

root=$PWD   # the runfiles tree of the workspace
tmp=${TEST_TMPDIR:-$(mktemp -d)}
prefix="$tmp/prefix"
seed=${KV_TEST_SEED:-$(( (RANDOM << 15) | RANDOM ))}
version=$(sed -n 's/.*kVersion\[\] = "\([0-9.]*\)";.*/\1/p' common/flags_usage.h)
echo "sdk_install_test: seed $seed, version $version, prefix $prefix"

passed=0 failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
finish() {
  echo "test cases: $((passed + failed)) | $passed passed | $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

# 1. Install.
if ! bash deploy/sdk/install.sh "$prefix" deploy/sdk/libkvstore.so "$version" "$root"; then
  fail "install.sh exited non-zero"
  finish
fi
problems=()
for f in include/kvstore/client/kvstore.h include/kvstore/common/tensor.h \
         "lib/libkvstore.so.$version" lib/libkvstore.so.0 lib/libkvstore.so \
         include/kvstore/client/c_api.h lib/pkgconfig/kvstore-c.pc \
         lib/pkgconfig/kvstore.pc lib/cmake/KVStore/KVStoreConfig.cmake \
         lib/cmake/KVStore/KVStoreConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || problems+=("missing $f")
done
dynamic=$(readelf -d "$prefix/lib/libkvstore.so.$version")
grep -q 'Library soname: \[libkvstore.so.0\]' <<<"$dynamic" || problems+=("soname is not libkvstore.so.0")
grep -qi 'tcmalloc' <<<"$dynamic" && problems+=("libkvstore.so needs tcmalloc")
symbols=$(nm -DC --defined-only "$prefix/lib/libkvstore.so")
grep -q 'kvstore::KVStore::Create(' <<<"$symbols" ||
  problems+=("libkvstore.so does not export kvstore::KVStore::Create")
grep -q ' T kv_create@@KVSTORE_0$' <<<"$symbols" || problems+=("libkvstore.so does not export the C API's kv_create")
# Only the SDK's own symbols are exported (libkvstore.lds): no gRPC, Abseil or std instance.
foreign=$(grep -vE ' (kvstore::|(typeinfo|typeinfo name|vtable|VTT) for kvstore::|(non-virtual |virtual )?thunk to kvstore::|KVSTORE_0$|kv_[a-z0-9_]+@@KVSTORE_0$)' <<<"$symbols" | head -n 3)
[ -z "$foreign" ] || problems+=("libkvstore.so exports symbols outside namespace kvstore: $foreign")
if [ ${#problems[@]} -eq 0 ]; then pass "install: files, soname, no tcmalloc, only namespace kvstore exported"; else fail "install: ${problems[*]}"; fi

# 2. Headers self-contained: each compiles alone with only the prefix on the include path, from
# a folder where no source tree is in sight.
mkdir -p "$tmp/headers" && cd "$tmp/headers"
problems=()
while read -r header; do
  rel=${header#"$prefix/include/kvstore/"}
  if ! echo "#include \"$rel\"" | g++ -std=c++17 -fsyntax-only -I"$prefix/include/kvstore" -x c++ - \
       2>"$tmp/headers/err"; then
    problems+=("$rel: $(head -n 3 "$tmp/headers/err")")
  fi
done < <(find "$prefix/include/kvstore" -name '*.h' | sort)
# Every header the installed ones include in quotes is installed too, or a system header.
for inc in $(grep -ho '#include "[^"]*"' -r "$prefix/include/kvstore" | sed 's/#include "\(.*\)"/\1/' | sort -u); do
  [ -f "$prefix/include/kvstore/$inc" ] || [ -f "/usr/include/$inc" ] ||
    problems+=("$inc is included but neither installed nor a system header")
done
cd "$root"
if [ ${#problems[@]} -eq 0 ]; then pass "headers compile alone"; else fail "headers: ${problems[*]}"; fi

# 3. Build the consumer with CMake and with pkg-config.
cp -rL examples/sdk_consumer "$tmp/src"
if cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
     >"$tmp/cmake.log" 2>&1 &&
   cmake --build "$tmp/build" -j 2 >>"$tmp/cmake.log" 2>&1; then
  cmake_bin="$tmp/build/sdk_consumer"
  libs=$(ldd "$cmake_bin")   # (not piped into grep -q: with pipefail, ldd's SIGPIPE would count)
  if grep -q "$prefix/lib/libkvstore.so.0" <<<"$libs" && ! grep -qi tcmalloc <<<"$libs"; then
    pass "CMake find_package(KVStore) build"
  else
    fail "CMake build links: $(grep -E 'kvstore|tcmalloc' <<<"$libs")"
  fi
else
  fail "CMake build failed: $(tail -n 20 "$tmp/cmake.log")"
  cmake_bin=""
fi

# The CMake package: relocatable (a moved prefix is found where it now is) and versioned (a
# newer major version than installed is refused). Configure only.
cp -a "$prefix" "$tmp/moved"
mkdir -p "$tmp/probe"
cat > "$tmp/probe/CMakeLists.txt" <<'PROBE'
cmake_minimum_required(VERSION 3.16)
project(probe LANGUAGES CXX)
find_package(KVStore ${WANT} REQUIRED)
get_target_property(inc KVStore::kvstore INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(lib KVStore::kvstore IMPORTED_LOCATION)
message(STATUS "KVStore ${KVStore_VERSION} include=${inc} lib=${lib}")
PROBE
moved=$(cmake -S "$tmp/probe" -B "$tmp/probe/build1" -DCMAKE_PREFIX_PATH="$tmp/moved" -DWANT=0.1 2>&1)
newer=$(cmake -S "$tmp/probe" -B "$tmp/probe/build2" -DCMAKE_PREFIX_PATH="$prefix" -DWANT=1.0 2>&1)
newer_status=$?
if grep -q "KVStore $version include=$tmp/moved/include/kvstore lib=$tmp/moved/lib/libkvstore.so.$version" <<<"$moved" &&
   [ "$newer_status" -ne 0 ] && grep -q 'compatible with requested version "1.0"' <<<"$newer"; then
  pass "CMake package: relocatable, and find_package(KVStore 1.0) refuses $version"
else
  fail "CMake package: moved prefix: $(grep KVStore <<<"$moved"); version 1.0 request exited $newer_status: $(tail -n 5 <<<"$newer")"
fi

pc_bin="$tmp/pc/sdk_consumer"
mkdir -p "$tmp/pc"
if flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs kvstore 2>&1) &&
   g++ -std=c++17 -O2 "$tmp/src/sdk_consumer.cc" -o "$pc_bin" $flags -Wl,-rpath,"$prefix/lib" \
     2>"$tmp/pc.log"; then
  libs=$(ldd "$pc_bin")
  if grep -q "$prefix/lib/libkvstore.so.0" <<<"$libs" && ! grep -qi tcmalloc <<<"$libs"; then
    pass "pkg-config kvstore build"
  else
    fail "pkg-config build links: $(grep -E 'kvstore|tcmalloc' <<<"$libs")"
  fi
else
  fail "pkg-config build failed: $flags $(tail -n 20 "$tmp/pc.log")"
  pc_bin=""
fi

# The job secret of both jobs.
secret="$tmp/job.secret"
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$secret")

# run_job NAME DIR BIN0 BIN1 SHOW: runs BIN0 (worker 0) and BIN1 (worker 1), each with the seed
# and 3 rounds, as the two workers of a job of real daemons (scheduler, 2 kvservers, the job
# secret), logging into DIR/job.log; passes when the job exits 0 and both workers say their
# values match the float64 sums. SHOW: the pattern of the log lines to print.
run_job() {
  local name=$1 dir=$2 bin0=$3 bin1=$4 show=$5 rc matched
  cat > "$dir/worker.sh" <<WORKER
#!/bin/sh
if [ "\$DMLC_WORKER_ID" = 0 ]; then exec "$bin0" $seed 3; else exec "$bin1" $seed 3; fi
WORKER
  chmod +x "$dir/worker.sh"
  KV_SECRET_FILE="$secret" timeout -k 5 50 python3 deploy/launch.py -n 2 -s 2 \
      --scheduler server/scheduler/scheduler --kvserver server/kvserver --timeout 40 \
      -- "$dir/worker.sh" >"$dir/job.log" 2>&1
  rc=$?
  grep -E "$show|launch.py" "$dir/job.log" | head -n 20
  matched=$(grep -c 'match the float64 sums' "$dir/job.log")
  if [ "$rc" -eq 0 ] && [ "$matched" -eq 2 ]; then
    pass "$name: 2 workers (CMake and pkg-config builds) match the float64 reference"
  else
    fail "$name exited $rc with $matched of 2 workers matching: $(tail -n 30 "$dir/job.log")"
  fi
}

# 4. Run both as the workers of one job; worker 0 is the CMake build, worker 1 the pkg-config one.
if [ -n "$cmake_bin" ] && [ -n "$pc_bin" ]; then
  run_job job "$tmp" "$cmake_bin" "$pc_bin" sdk_consumer
else
  fail "job: not run, a build failed"
fi

# 5. The C API from C: the header alone as strict C99, then the C worker built with CMake
# (KVStore::c) and with pkg-config kvstore-c, the two builds as the workers of a job.
c_bin="$tmp/c/c_worker"
mkdir -p "$tmp/c"
cp -rL examples/c_worker "$tmp/c_src"
if echo '#include "client/c_api.h"' | gcc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only \
     -I"$prefix/include/kvstore" -x c - 2>"$tmp/c/header.log" &&
   flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs kvstore-c 2>&1) &&
   gcc -std=c99 -pedantic -Wall -Wextra -Werror -O2 "$tmp/c_src/c_worker.c" -o "$c_bin" \
     $flags -lm -Wl,-rpath,"$prefix/lib" 2>"$tmp/c/build.log" &&
   cmake -S "$tmp/c_src" -B "$tmp/c_build" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCMAKE_C_FLAGS="-pedantic -Wall -Wextra -Werror" >>"$tmp/c/build.log" 2>&1 &&
   cmake --build "$tmp/c_build" -j 2 >>"$tmp/c/build.log" 2>&1; then
  pass "C API: c_api.h compiles as C99 alone; the C worker builds with CMake (KVStore::c) and pkg-config kvstore-c"
  run_job "C API job" "$tmp/c" "$tmp/c_build/c_worker" "$c_bin" c_worker
else
  fail "C API build: $(cat "$tmp/c/header.log" "$tmp/c/build.log" 2>/dev/null | tail -n 20) $flags"
fi
finish
