#!/bin/bash
# build_python.sh BUNDLE DIR: builds the kvstore Python package into DIR/kvstore against the
# bundle's SDK (BUNDLE/lib/libkvstore_sdk.so, made by tests/gpu/bundle.sh) and the headers the
# bundle carries, with this machine's Python ($PYTHON, default python3), its pybind11 and g++.
# Use it with PYTHONPATH=DIR and the bundle's lib first on LD_LIBRARY_PATH (BUNDLE/run.sh sets
# it; the module also records it as its run path). Says what is missing when it cannot.
set -euo pipefail
bundle=$(cd "$1" && pwd)
dir=$2
py=${PYTHON:-python3}
include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ ! -f "$include/Python.h" ]; then
  # The bundle may carry the headers of this Python's minor version (bundle.sh takes them from
  # a local Python of that version when there is one).
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -f "$bundle/python/python$version/Python.h" ]; then
    echo "build_python.sh: $py has no Python.h in $include; using the bundle's Python $version headers"
    include=$bundle/python/python$version
  else
    echo "build_python.sh: $py has no Python.h in $include (its development headers are" \
      "missing) and the bundle has none for Python $version" >&2
    exit 1
  fi
fi
pybind=$("$py" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null) ||
  pybind=/usr/include
if [ ! -f "$pybind/pybind11/pybind11.h" ]; then
  echo "build_python.sh: no pybind11 for $py (neither its package nor /usr/include/pybind11)" >&2
  exit 1
fi
includes=()
for d in "$pybind" "$include"; do
  [ "$d" = /usr/include ] || includes+=(-isystem "$d")
done
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p "$dir"
rm -rf "$dir/kvstore"
cp -r "$bundle/python/package/kvstore" "$dir/kvstore"
read -r -a link <"$bundle/python/link_flags.txt"
for i in "${!link[@]}"; do
  [[ ${link[$i]} == lib/* ]] && link[$i]=$bundle/${link[$i]}
done
# -include cstdint: Abseil 20220623's headers miss it, which newer compilers refuse.
${CXX:-g++} -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -include cstdint \
  -I"$bundle/python/include" "${includes[@]}" \
  "$bundle/python/kvstore_module.cc" -o "$dir/kvstore/_kvstore$suffix" \
  "${link[@]}" -Wl,-rpath,"$bundle/lib"
echo "build_python.sh: built $dir/kvstore/_kvstore$suffix with $("$py" --version 2>&1)"
