# A dist_sync job of real daemons (a scheduler and 2 kvservers, deploy/launch.py, a job secret)
# whose 2 workers are Perl scripts (perl/examples/dist_worker.pl): their sums and their SGD
# training on the servers are checked against float64 references inside each worker. The
# daemons are KVSTORE_SCHEDULER and KVSTORE_KVSERVER (default: Bazel's bazel-bin); skipped
# when they are not built.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use FindBin;

my $root = "$FindBin::Bin/../..";
my $scheduler = $ENV{KVSTORE_SCHEDULER} // "$root/bazel-bin/server/scheduler/scheduler";
my $kvserver = $ENV{KVSTORE_KVSERVER} // "$root/bazel-bin/server/kvserver";
plan skip_all => "the daemons are not built ($scheduler, $kvserver)"
  unless -x $scheduler && -x $kvserver;

my $seed = $ENV{KV_TEST_SEED} // int(rand(2**31));
diag "seed $seed (KV_TEST_SEED=$seed repeats this run)";
my $tmp = tempdir(CLEANUP => 1);
my $secret = "$tmp/job.secret";
{
  open(my $random, '<:raw', '/dev/urandom') or die "/dev/urandom: $!";
  read($random, my $bytes, 32) == 32 or die "/dev/urandom: short read";
  umask 077;
  open(my $out, '>', $secret) or die "$secret: $!";
  print $out unpack('H*', $bytes);
  close $out;
}
local $ENV{KV_SECRET_FILE} = $secret;
local $ENV{PERL5LIB} = join ':', "$root/perl/lib", $ENV{PERL5LIB} // ();
my @command = ('timeout', '-k', '5', '100', 'python3', "$root/deploy/launch.py", '-n', '2', '-s',
               '2', '--scheduler', $scheduler, '--kvserver', $kvserver, '--timeout', '90', '--',
               $^X, "$root/perl/examples/dist_worker.pl", $seed);
my $quoted = join ' ', map { my $a = $_; $a =~ s/'/'\\''/g; "'$a'" } @command;
my $output = `$quoted 2>&1`;
my $status = $? >> 8;
note join "\n", grep { !/\[info\]/ } split /\n/, $output;

is($status, 0, 'the job exits 0') or diag $output;
for my $rank (0, 1) {
  like($output, qr/perl worker rank $rank: 3 rounds of sums and row_sparse_pull match the float64 reference/,
       "worker $rank: sums and row_sparse_pull");
  like($output, qr/perl worker rank $rank: 20 steps of sgd on the servers match the float64 reference/,
       "worker $rank: training");
}
done_testing();
