#!/usr/bin/env bash
# Installs what is needed, builds and runs the demo: a data-parallel training job on KVStore.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
source deploy/bazel-env.sh
kv_bazel build //examples:local_training
exec "$(bazel info bazel-bin)/examples/local_training"
