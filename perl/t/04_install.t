# perl/install.sh: the module installed into a fresh folder loads the library it was installed
# with, without KVSTORE_LIBRARY, and runs a store from there.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use FindBin;

my $root = "$FindBin::Bin/../..";
my $library = $ENV{KVSTORE_LIBRARY};
plan skip_all => 'KVSTORE_LIBRARY names no built library' unless $library && -f $library;
my $dest = tempdir(CLEANUP => 1);
my $log = `bash '$root/perl/install.sh' '$dest' '$library' 2>&1`;
is($? >> 8, 0, 'install.sh exits 0') or diag $log;
ok(-f "$dest/AI/KVStore.pm" && -f "$dest/AI/KVStore/RowSparse.pm" && -f "$dest/AI/KVStore/Error.pm",
   'the modules are installed');
my $script = 'use PDL; use AI::KVStore; my $kv = AI::KVStore->create("local"); '
  . '$kv->init("w", sequence(3)); $kv->push("w", [ones(3), ones(3)]); my $o = zeros(3); '
  . '$kv->pull("w", out => $o); print join(",", $o->list), " ", $INC{"AI/KVStore.pm"}, "\n"';
my $output = do {
  local $ENV{KVSTORE_LIBRARY};
  delete $ENV{KVSTORE_LIBRARY};
  local $ENV{PERL5LIB};
  delete $ENV{PERL5LIB};
  `$^X -I'$dest' -e '$script' 2>&1`;
};
like($output, qr/^2,2,2 \Q$dest\E\/AI\/KVStore\.pm$/m,
     'the installed module loads its library and sums two pushes') or diag $output;
`bash '$root/perl/install.sh' '$dest' /nonexistent/libkvstore.so 2>&1`;
is($? >> 8, 1, 'a missing library is refused');
done_testing();
