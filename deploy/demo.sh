#!/usr/bin/env bash
# Installs what is needed, builds, and runs the demo: a data-parallel training job on a local
# KVStore cluster - 1 scheduler, 2 kvservers and 2 workers on 127.0.0.1 - in dist_sync, with
# SGD with momentum run on the servers. Every process exits 0 when the job is done.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
source deploy/bazel-env.sh
kv_bazel build //examples:dist_training //server:kvserver //server/scheduler:scheduler \
  //client/kvctl:kvctl
bin="$(bazel info bazel-bin 2>/dev/null)"
exec python3 deploy/launch.py -n 2 -s 2 \
  --scheduler "$bin/server/scheduler/scheduler" --kvserver "$bin/server/kvserver" \
  -- "$bin/examples/dist_training"
