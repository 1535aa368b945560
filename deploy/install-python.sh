#!/usr/bin/env bash
# Installs the `kvstore` Python package into a Python environment, in one command:
#
#   bash deploy/install-python.sh                  # the python3 on PATH (what `python3` runs)
#   bash deploy/install-python.sh venv/bin/python  # a given interpreter or virtual environment
#
# Installs the Debian packages the build needs (deploy/install-deps.sh), builds the wheel with
# Bazel (//python:wheel, offline) and installs it with that interpreter's pip, without the
# network (--no-index; NumPy comes from Debian's python3-numpy: make the virtual environment
# with --system-site-packages to use it there). Idempotent: run it again after a change.
#
# The wheel is built against Debian's Python headers, so it is for that Python version (the
# version of /usr/bin/python3). With no argument the interpreter is the `python3` that PATH
# finds - pyenv's, conda's or an active virtual environment's, when one comes first - so that
# the README's next line, `python3 -c "import kvstore"`, finds what was installed. An
# interpreter of another version is refused, naming both; the interpreter used is printed
# (deploy/install-wheel.sh, the last step).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -gt 1 ]]; then
  echo "usage: install-python.sh [PYTHON]" >&2
  exit 2
fi
bash deploy/install-deps.sh
source deploy/bazel-env.sh
kv_bazel build //python:wheel
wheel="$(ls bazel-bin/python/kvstore-*.whl | head -n 1)"
bash deploy/install-wheel.sh "$wheel" "$@"
