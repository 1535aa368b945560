#!/usr/bin/env bash
# Makes the TLS files of one KVStore job with Debian's openssl: a CA of its own (a key and a
# self-signed certificate) and node certificates signed by it, each naming the hosts and IP
# addresses the nodes are reached at (subjectAltName). docs/security.md describes their use.
#
#   deploy/make-certs.sh [--per-node] [--days N] DIR [HOST_OR_IP ...]
#
# With no HOST_OR_IP, the certificates name 127.0.0.1 and localhost (a job on one machine).
# A name is an IP address when it looks like one (IPv4, or IPv6 with a colon), else a DNS name.
#
# Files written (keys chmod 600, DIR created chmod 700):
#   DIR/ca.pem, DIR/ca.key        the job's CA. When both already exist they are reused, so a
#                                 later call adds certificates to the same job. Every node
#                                 gets ca.pem; ca.key signs, keep it to this folder (or delete
#                                 it once the job's certificates are made).
#   DIR/node.pem, DIR/node.key    default: one certificate shared by every node, naming every
#                                 HOST_OR_IP.
#   DIR/HOST_OR_IP.pem, .key      with --per-node: one certificate per host, naming only it;
#                                 give each machine its own pair.
# Node certificates serve both ends of a link (extendedKeyUsage serverAuth and clientAuth):
# daemons present them as servers, and every node as a client under mutual TLS.
#
# Then, on every node of the job:
#   KV_TLS_CA=DIR/ca.pem KV_TLS_CERT=DIR/node.pem KV_TLS_KEY=DIR/node.key
# (or --tls_ca, --tls_cert, --tls_key), and --tls_mutual on the daemons to require client
# certificates. deploy/launch.py --tls runs this script for a local job.
#
# Keys are ECDSA P-256; certificates last --days days (default 90). Exits 0 on success, 2 on
# a usage error, and with openssl's status (its message on stderr) when openssl fails.
set -euo pipefail

usage() {
  echo "usage: $0 [--per-node] [--days N] DIR [HOST_OR_IP ...]" >&2
  exit 2
}

per_node=0
days=90
while [[ $# -gt 0 ]]; do
  case "$1" in
    --per-node) per_node=1; shift ;;
    --days) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; days=$2; shift 2 ;;
    --days=*) days=${1#--days=}; [[ "$days" =~ ^[1-9][0-9]*$ ]] || usage; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) echo "make-certs: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || usage
dir=$1
shift
hosts=("$@")
[[ ${#hosts[@]} -gt 0 ]] || hosts=(127.0.0.1 localhost)
for host in "${hosts[@]}"; do
  [[ "$host" =~ ^[A-Za-z0-9.:_-]+$ ]] || { echo "make-certs: bad host name '$host'" >&2; exit 2; }
done
command -v openssl >/dev/null || {
  echo "make-certs: openssl not found (apt-get install openssl, or deploy/install-deps.sh)" >&2
  exit 1
}

umask 077
mkdir -p "$dir"
chmod 700 "$dir"
work=$(mktemp -d "$dir/.make-certs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# san NAME...: the subjectAltName value naming these hosts.
san() {
  local entries=() host
  for host in "$@"; do
    if [[ "$host" =~ ^[0-9]+(\.[0-9]+){3}$ || "$host" == *:* ]]; then
      entries+=("IP:$host")
    else
      entries+=("DNS:$host")
    fi
  done
  local IFS=,
  echo "${entries[*]}"
}

# new_key PATH: a fresh ECDSA P-256 private key.
new_key() {
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>"$work/err" ||
    { cat "$work/err" >&2; return 1; }
  chmod 600 "$1"
}

if [[ -s "$dir/ca.pem" && -s "$dir/ca.key" ]]; then
  echo "make-certs: reusing the CA in $dir" >&2
else
  new_key "$work/ca.key"
  openssl req -x509 -new -key "$work/ca.key" -sha256 -days "$days" \
    -subj "/O=KVStore job/CN=KVStore job CA $(date -u +%Y%m%dT%H%M%SZ)" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$work/ca.pem" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  mv "$work/ca.key" "$dir/ca.key"
  mv "$work/ca.pem" "$dir/ca.pem"
  chmod 644 "$dir/ca.pem"
fi

# sign NAME HOST...: DIR/NAME.pem and DIR/NAME.key, a node certificate for these hosts.
sign() {
  local name=$1
  shift
  new_key "$work/$name.key"
  openssl req -new -key "$work/$name.key" -subj "/O=KVStore job/CN=$1" \
    -out "$work/$name.csr" 2>"$work/err" || { cat "$work/err" >&2; return 1; }
  cat >"$work/$name.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$(san "$@")
EOF
  openssl x509 -req -in "$work/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" -extfile "$work/$name.ext" \
    -out "$work/$name.pem" 2>"$work/err" || { cat "$work/err" >&2; return 1; }
  mv "$work/$name.key" "$dir/$name.key"
  mv "$work/$name.pem" "$dir/$name.pem"
  chmod 644 "$dir/$name.pem"
  echo "make-certs: $dir/$name.pem for $(san "$@")" >&2
}

if [[ $per_node -eq 1 ]]; then
  for host in "${hosts[@]}"; do sign "$host" "$host"; done
else
  sign node "${hosts[@]}"
fi
