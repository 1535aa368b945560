#!/usr/bin/env bash
# Installs a built kvstore wheel with a Python interpreter's pip, offline: the last step of
# deploy/install-python.sh, which builds the wheel first.
#
#   bash deploy/install-wheel.sh WHEEL [PYTHON]
#
# PYTHON defaults to the `python3` that PATH finds (pyenv's, conda's or an active virtual
# environment's when one comes first), so that a following `python3 -c "import kvstore"` finds
# what was installed; /usr/bin/python3 when PATH has none. The wheel is built against
# /usr/bin/python3's headers, so an interpreter of another Python version is refused, naming
# both. Prints the interpreter it installed for, and notes when `python3` on PATH is another
# one or when that interpreter lacks NumPy or PyTorch.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: install-wheel.sh WHEEL [PYTHON]" >&2
  exit 2
fi
wheel="$1"
if [[ $# -ge 2 ]]; then
  python="$2"
elif python="$(command -v python3)"; then
  :
else
  python=/usr/bin/python3
fi
if ! "$python" -c 'import sys' 2>/dev/null; then
  echo "install-python: $python does not run as a Python interpreter" >&2
  exit 1
fi
# What the name runs (a pyenv shim or a symbolic link names another file).
python="$("$python" -c 'import sys; print(sys.executable)')"
want="$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
case "$wheel" in
  *"-$want-"*) ;;
  *) echo "install-python: $(basename "$wheel") is built for /usr/bin/python3's headers" \
       "($(/usr/bin/python3 -V 2>&1)), but $python is $("$python" -V 2>&1) ($want); give" \
       "an interpreter of that version: bash deploy/install-python.sh /usr/bin/python3," \
       "or a virtual environment made with it" >&2
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
echo "install-python: installed $(basename "$wheel") for $python ($("$python" -V 2>&1))"
if [[ "$(command -v python3 || true)" != "" ]] &&
   [[ "$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)" != "$python" ]]; then
  echo "install-python: note: python3 on PATH is $(command -v python3), another interpreter;" \
    "run $python, or install for it: bash deploy/install-python.sh \"\$(command -v python3)\""
fi
missing="$("$python" -c '
import importlib.util
print(", ".join(m for m in ("numpy", "torch") if importlib.util.find_spec(m) is None))')"
if [[ -n "$missing" ]]; then
  echo "install-python: note: $python has no $missing: \`import kvstore\` works without them," \
    "NumPy arrays and the PyTorch examples need them (Debian's python3-numpy and" \
    "python3-torch serve /usr/bin/python3 and virtual environments made with" \
    "--system-site-packages)"
fi
echo "install-python: try: $python -c 'import kvstore'"
