#!/usr/bin/env bash
# Installs every Debian package KVStore's build, tests and demo need. Idempotent: when all are
# present it prints nothing and returns at once. Runs as root (or through sudo when available).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  pkg-config
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  libabsl-dev
  libspdlog-dev
  libfmt-dev
  zlib1g-dev
  libisal-dev
  libssl-dev
  openssl
  catch2
  libdlpack-dev
  libtcmalloc-minimal4
  python3
  procps
  # The Python package (python/) and its tests and example.
  python3-dev
  pybind11-dev
  python3-numpy
  python3-pytest
  python3-torch
  python3-sklearn
  python3-pip
  python3-venv
  # The Perl module AI::KVStore (perl/): FFI to the C API, PDL piddles as values
  libffi-platypus-perl
  pdl
  # deployment: the SDK's CMake package test, Slurm, systemd units, Kubernetes manifests
  cmake
  slurm-wlm
  munge
  systemd
  python3-yaml
  # tests/cluster: network namespaces (ip), the ssh launcher against a private sshd, setsid.
  iproute2
  openssh-server
  openssh-client
  util-linux
  # the style checks of the test command: clang's thread-safety analysis, clang-format
  clang
  clang-format
  # observability: the metrics endpoint (cpp-httplib) and the Prometheus test
  libcpp-httplib-dev
  libbrotli-dev
  prometheus
  # the scheduler standby: a real etcd, started by the tests
  etcd-server
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
