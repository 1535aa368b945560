#!/usr/bin/env bash
# Installs the Perl module AI::KVStore, in one command (docs/perl.md):
#
#   bash deploy/install-perl.sh            # the SDK into /usr/local, the module into Perl's
#                                          # site library: `perl -MAI::KVStore` then works
#   bash deploy/install-perl.sh PREFIX     # the SDK into PREFIX, the module into
#                                          # PREFIX/share/perl5 (add it to PERL5LIB)
#
# Installs the Debian packages (deploy/install-deps.sh: Perl's FFI::Platypus and PDL among
# them), builds and installs the SDK's libkvstore.so (deploy/install-sdk.sh) and installs the
# module bound to that library (perl/install.sh). Idempotent: run it again after a change.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -le 1 ] || { echo "usage: install-perl.sh [PREFIX]" >&2; exit 2; }
prefix=${1:-/usr/local}
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
bash deploy/install-sdk.sh "$prefix"
if [ "$prefix" = /usr/local ]; then
  perl_lib=$(perl -MConfig -e 'print $Config{installsitelib}')
  ldconfig 2>/dev/null || true
else
  perl_lib="$prefix/share/perl5"
fi
bash perl/install.sh "$perl_lib" "$prefix/lib/libkvstore.so.0"
if ! perl -I"$perl_lib" -MAI::KVStore -e 'AI::KVStore->create("local")'; then
  echo "install-perl: AI::KVStore does not load from $perl_lib" >&2
  exit 1
fi
[ "$prefix" = /usr/local ] || echo "install-perl: add $perl_lib to PERL5LIB"
