#!/bin/bash
# The GPU kit's bundle: the programs a bare GPU machine runs (docs/gpu.md, "The kit"), built
# here with CUDA for sm_80/sm_90 and -O2, with every shared library they load beyond glibc,
# libstdc++ and libgcc, and what that machine needs to build the Python extension against them.
#
#   bash tests/gpu/bundle.sh [DIR]      (default: gpu-bundle, git-ignored)
#
# DIR/run.sh PROGRAM [ARGS] runs one of DIR/bin with DIR/lib first on the library path. Then it
# checks the bundle here with the system's own copies of those libraries hidden (a private mount
# namespace in which /usr/lib/x86_64-linux-gnu holds only glibc, libstdc++, libgcc and libtinfo):
# every program resolves every library from the bundle and runs (the GPU tests report skipped
# for lack of a GPU). Prints the bundle's size; fails over 60 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${1:-gpu-bundle}
case $out in /*) ;; *) out=$root/$out ;; esac

programs=(
  //server:kvserver=server/kvserver
  //server/scheduler=server/scheduler/scheduler
  //tests/gpu:gpu_job=tests/gpu/gpu_job
  //tests/bench:gpubench=tests/bench/gpubench
  //client/gpu:cuda_reduce_test=client/gpu/cuda_reduce_test
  //client/gpu:device_info_test=client/gpu/device_info_test
  //tests/integration:gpu_store_test=tests/integration/gpu_store_test
)
targets=(//python:_kvstore.so)
for p in "${programs[@]}"; do targets+=("${p%%=*}"); done

source deploy/bazel-env.sh
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "bundle.sh: no nvcc: the bundle needs a CUDA build" >&2; exit 1; }
kv_bazel build "${targets[@]}"
bin=$(kv_bazel info bazel-bin 2>/dev/null)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/python/include" "$out/python/objs"
for p in "${programs[@]}"; do
  install -m 755 "$bin/${p#*=}" "$out/bin/"
done

# The libraries: every one the programs load (ldd gives the closure) but the C and C++ runtimes
# and the CUDA driver, which the GPU machine has.
system_lib() {
  case $(basename "$1") in
    ld-linux-* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
      libresolv.so.* | libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | linux-vdso.so.*) return 0 ;;
  esac
  return 1
}
# (ldd on Bazel's own outputs, whose run paths find the test libraries Bazel links dynamically.)
for p in "${programs[@]}" =python/_kvstore.so; do
  ldd "$bin/${p#*=}" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  system_lib "$lib" || cp -L "$lib" "$out/lib/"
done

# The Python extension, built on the GPU machine against that machine's Python and pybind11:
# the SDK as one shared library (the link of //python:_kvstore.so without the module's own
# object), the link flags with each -lNAME turned into the bundle's copy, and the headers the
# module includes beyond the C++ library's, Python's and pybind11's. tests/gpu/build_python.sh
# builds it so (and here, as a check).
/usr/bin/python3 - "$root" "$bin" "$out" <<'EOF'
import os, re, shutil, subprocess, sys
root, bin_dir, out = sys.argv[1:]
execroot = os.path.realpath(os.path.join(bin_dir, "../../.."))
params = open(os.path.join(bin_dir, "python/_kvstore.so-2.params")).read().split("\n")
objects, archives, flags, seen = [], [], [], set()
for arg in params:
    if arg.endswith(".pic.o") and not arg.endswith("kvstore_module.pic.o"):
        objects.append(os.path.join(execroot, arg))
    elif arg.endswith(".a"):
        archives.append(os.path.join(execroot, arg))
    elif arg.startswith("-l") and arg not in seen:
        seen.add(arg)
        name = arg[2:]
        if name in ("cudart_static",):
            continue  # in the archives below
        # The bundle's copy is named by its soname, the file ldd listed.
        match = [f for f in os.listdir(os.path.join(out, "lib")) if f.startswith(f"lib{name}.so")]
        if match:
            flags.append(f"lib/{match[0]}")
        elif name in ("dl", "rt", "pthread", "m", "stdc++"):
            flags.append(arg)  # the C and C++ runtimes: the machine's own
    elif arg in ("-pthread",):
        flags.append(arg)
# The SDK as one shared library (Bazel links the module from its objects; a shared library
# holds each template instance once, a third of the objects' size).
tmp = os.path.join(out, "python/objs")
subprocess.run(["ar", "rcs", os.path.join(tmp, "libkvstore_sdk.a")] + objects, check=True)
subprocess.run(["g++", "-shared", "-o", os.path.join(out, "lib/libkvstore_sdk.so"),
                "-Wl,-soname,libkvstore_sdk.so", "-Wl,-S", "-Wl,-z,relro,-z,now",
                "-Wl,--whole-archive", os.path.join(tmp, "libkvstore_sdk.a")] + archives +
               ["-Wl,--no-whole-archive", "-L/usr/local/cuda/lib64", "-lcudart_static"] +
               [f if f.startswith("-") else os.path.join(out, f) for f in flags] +
               ["-ldl", "-lrt"], check=True)
shutil.rmtree(tmp)
open(os.path.join(out, "python/link_flags.txt"), "w").write(" ".join(["lib/libkvstore_sdk.so"] + flags) + "\n")
# Headers: the dependency file of the module's compile names them.
deps = open(os.path.join(bin_dir, "python/_objs/_kvstore.so/kvstore_module.pic.d")).read()
for path in re.split(r"[\s\\]+", deps):
    if not path.endswith((".h", ".hpp", ".inc")):
        continue
    if path.startswith("/usr/include/absl/") or path.startswith("/usr/include/dlpack/"):
        rel = path[len("/usr/include/"):]
        src = path
    elif path.startswith(("common/", "client/")):
        rel, src = path, os.path.join(root, path)
    else:
        continue  # the C++ library, glibc, Python and pybind11: the GPU machine's own
    dst = os.path.join(out, "python/include", rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy(src, dst)
for f in ("python/kvstore_module.cc", "tests/gpu/build_python.sh", "tests/gpu/torch_cuda_check.py"):
    shutil.copy(os.path.join(root, f), os.path.join(out, "python"))
shutil.copytree(os.path.join(root, "python/kvstore"), os.path.join(out, "python/package/kvstore"),
                ignore=shutil.ignore_patterns("__pycache__"))
EOF

# The GPU machines' Python is 3.12; where its headers are missing there, the extension is built
# with these: any local Python 3.12's, found on the PATH or among pyenv's versions.
for py in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
  command -v "$py" >/dev/null 2>&1 || continue
  inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) ||
    continue
  if [ -f "$inc/Python.h" ]; then
    cp -r "$inc" "$out/python/python3.12"
    break
  fi
done

cat >"$out/run.sh" <<'EOF'
#!/bin/bash
# run.sh PROGRAM [ARGS]: runs bin/PROGRAM with the bundle's libraries first on the library path
# (the C and C++ runtimes and the CUDA driver come from the machine).
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
program=$1
shift
exec "$here/bin/$program" "$@"
EOF
chmod 755 "$out/run.sh"

# The check: with the system's libraries hidden, every program resolves all it loads from the
# bundle and runs.
keep=$(mktemp -d)
for lib in /usr/lib/x86_64-linux-gnu/{ld-linux-x86-64.so.2,libc.so.6,libm.so.6,libpthread.so.0,libdl.so.2,librt.so.1,libresolv.so.2,libstdc++.so.6,libgcc_s.so.1,libtinfo.so.6}; do
  cp -L "$lib" "$keep/"
done
unshare -m bash -c '
  set -e
  mount --bind "$1" /usr/lib/x86_64-linux-gnu
  out=$2
  for p in "$out"/bin/*; do
    name=${p##*/}
    listing=$(LD_LIBRARY_PATH=$out/lib /lib64/ld-linux-x86-64.so.2 --list "$p") || {
      echo "bundle check: $name: the loader failed: $listing" >&2; exit 1; }
    if [[ $listing == *"not found"* ]]; then
      echo "bundle check: $name does not resolve with the system libraries hidden:" >&2
      echo "$listing" >&2
      exit 1
    fi
  done
  for p in kvserver scheduler gpu_job gpubench; do
    "$out/run.sh" $p --help >/dev/null || { echo "bundle check: $p --help failed" >&2; exit 1; }
  done
  for t in cuda_reduce_test device_info_test gpu_store_test; do
    "$out/run.sh" $t >/dev/null || { echo "bundle check: $t failed" >&2; exit 1; }
  done
  "$out/run.sh" gpu_job --values=cuda
  "$out/run.sh" gpu_job --values=cpu --key_bytes=4096,1048576 --rounds=1 \
    --scheduler="$out/bin/scheduler" --kvserver="$out/bin/kvserver" 2>/dev/null
' check "$keep" "$out"
rm -rf "$keep"

# The Python extension builds from the bundle alone: here with Debian's Python, the system's
# Abseil, gRPC and protobuf headers hidden, and the module imports and runs a store.
pydir=$(mktemp -d)
unshare -m bash -c '
  set -e
  for d in /usr/include/absl /usr/include/google /usr/include/grpc /usr/include/grpcpp \
    /usr/include/grpc++ /usr/include/spdlog /usr/include/fmt /usr/include/dlpack; do
    if [ -d "$d" ]; then mount -t tmpfs none "$d"; fi
  done
  PYTHON=/usr/bin/python3 bash "$1/python/build_python.sh" "$1" "$2" >/dev/null
  LD_LIBRARY_PATH=$1/lib PYTHONPATH=$2 /usr/bin/python3 -c "
import kvstore, numpy as np
kv = kvstore.create(\"local\")
kv.init(3, np.ones(4))
kv.push(3, [np.full(4, 2.0), np.full(4, 5.0)])
out = np.zeros(4)
kv.pull(3, out=out)
assert (out == 7).all(), out
"
' pycheck "$out" "$pydir"
rm -rf "$pydir"

size=$(du -sm "$out" | cut -f1)
echo "bundle: $out, $size MiB ($(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries)"
if ((size > 60)); then
  echo "bundle.sh: the bundle is $size MiB, over the 60 MiB it must fit in" >&2
  exit 1
fi
