#!/usr/bin/env bash
# Installs the `kvstore` Python package into a Python environment, in one command:
#
#   bash deploy/install-python.sh                  # Debian's /usr/bin/python3 (/usr/local)
#   bash deploy/install-python.sh venv/bin/python  # a virtual environment
#
# Installs the Debian packages the build needs (deploy/install-deps.sh), builds the wheel with
# Bazel (//python:wheel, offline) and installs it with that interpreter's pip, without the
# network (--no-index; NumPy comes from Debian's python3-numpy: make the virtual environment
# with --system-site-packages to use it there). Idempotent: run it again after a change.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-/usr/bin/python3}"
bash deploy/install-deps.sh
source deploy/bazel-env.sh
kv_bazel build //python:wheel
wheel="$(ls bazel-bin/python/kvstore-*.whl | head -n 1)"
want="$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
case "$wheel" in
  *"-$want-"*) ;;
  *) echo "install-python: $wheel is built for the system Python's headers, not $python ($want)" >&2
     exit 1 ;;
esac
flags=(--no-index --no-deps --force-reinstall --disable-pip-version-check -q)
# Debian marks its own interpreter as externally managed (PEP 668); pip then installs into
# /usr/local/lib/python3.X/dist-packages only when told to.
if "$python" -c 'import sys; sys.exit(0 if sys.prefix == sys.base_prefix else 1)'; then
  if "$python" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    flags+=(--break-system-packages)
  fi
fi
"$python" -m pip install "${flags[@]}" "$wheel"
echo "install-python: installed $(basename "$wheel") for $python; try: $python -c 'import kvstore'"
