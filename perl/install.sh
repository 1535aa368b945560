#!/usr/bin/env bash
# Installs the Perl module AI::KVStore into a Perl library folder, bound to an installed
# libkvstore.so: deploy/install-perl.sh calls it after installing the SDK.
#
#   perl/install.sh PERL_LIB_DIR LIBRARY
#
# PERL_LIB_DIR  where AI/KVStore.pm goes (e.g. Perl's site library, `perl -V:installsitelib`).
# LIBRARY       the installed libkvstore.so the module loads (written into
#               AI/KVStore/Installed.pm; KVSTORE_LIBRARY overrides it at run time).
# Exits 0 on success, 2 on a usage error, 1 when a file is missing or cannot be written.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PERL_LIB_DIR LIBRARY" >&2; exit 2; }
dest=$1 library=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$library" ] || { echo "perl/install.sh: no library at $library" >&2; exit 1; }
case "$library" in /*) ;; *) library="$PWD/$library" ;; esac
mkdir -p "$dest/AI/KVStore"
install -m 644 "$here/lib/AI/KVStore.pm" "$dest/AI/KVStore.pm"
for module in "$here"/lib/AI/KVStore/*.pm; do
  [ "$(basename "$module")" = Installed.pm ] && continue
  install -m 644 "$module" "$dest/AI/KVStore/"
done
quoted=${library//\\/\\\\}
quoted=${quoted//\'/\\\'}
cat > "$dest/AI/KVStore/Installed.pm" <<PM
package AI::KVStore::Installed;
# Written by perl/install.sh: the libkvstore.so AI::KVStore loads.
our \$LIBRARY = '$quoted';
1;
PM
chmod 644 "$dest/AI/KVStore/Installed.pm"
echo "perl/install.sh: AI::KVStore installed in $dest, using $library"
