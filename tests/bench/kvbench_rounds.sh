# Sourced by the kvbench A/B scripts (kvbench_security.sh, kvbench_observability.sh,
# kvbench_replicas.sh) from the project root, with their arguments:
#
#   source tests/bench/kvbench_rounds.sh OUT_DIR "$@"
#
# Checks that the first argument is a number of rounds and sets `rounds` (the rest of the
# arguments stay in "$@" for kvbench: the caller shifts once); sets `kvbench` to $KVBENCH when
# set (a copy of bazel-bin/tests/bench/kvbench with its .runfiles folder beside it, made with
# `cp -rL` so that a rebuild during the run changes nothing: kvbench then starts the daemons of
# the copy, not the ones its MANIFEST names), else builds //tests/bench:kvbench and uses it; and
# sets `out` to OUT_DIR, made and emptied of earlier JSON.
[[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: $0 ROUNDS [kvbench flags]" >&2
  exit 2
}
rounds=$2
kvbench=${KVBENCH:-}
if [[ -z "$kvbench" ]]; then
  source deploy/bazel-env.sh
  kv_bazel build //tests/bench:kvbench >/dev/null 2>&1 || kv_bazel build //tests/bench:kvbench
  kvbench=bazel-bin/tests/bench/kvbench
fi
out=$1
mkdir -p "$out"
rm -f "$out"/*.json

# daemon_of KVBENCH_PID RANK: sets `server` to the pid of kvbench's kvserver of RANK, and
# `scheduler` and `secret` to the --scheduler flag and KV_SECRET_FILE= setting it runs with
# (the flags a kvserver started beside it needs).
daemon_of() {
  server=$(pgrep -P "$1" -f -- "--rank=$2 " || true)
  [[ -n "$server" ]] || { echo "$0: no kvserver of rank $2 under kvbench $1" >&2; exit 1; }
  scheduler=$(tr '\0' '\n' </proc/"$server"/cmdline | grep -- '^--scheduler=')
  secret=$(tr '\0' '\n' </proc/"$server"/environ | grep '^KV_SECRET_FILE=' || true)
}
