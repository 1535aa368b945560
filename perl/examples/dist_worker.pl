#!/usr/bin/perl
# A worker of a dist_sync job written in Perl on AI::KVStore (perl/t/03_dist_job.t runs two):
#
#   python3 deploy/launch.py -n 2 -s 2 -- perl -Iperl/lib perl/examples/dist_worker.pl SEED
#
# 1. Sums: for 3 rounds every worker pushes random values (two "devices" each) to key 1 and
#    pulls it back; with the servers' default updater (assign) the value is the sum of every
#    worker's push, checked against that sum in float64 (every worker regenerates the others'
#    values from SEED). Then rows of key 1 through row_sparse_pull.
# 2. Training: linear regression by SGD run on the servers (set_optimizer). Each worker holds a
#    shard of a generated dataset, pushes its part of the gradient of key 2 (the weights) and
#    pulls the updated weights; the loss falls, and the weights after 20 steps are checked
#    against the same training computed here in float64 over every shard.
# Prints "perl worker rank R: ... match the float64 reference" and exits 0, or dies naming the
# key, round and element.
use strict;
use warnings;
use PDL;
use AI::KVStore;

my $seed = shift // die "usage: dist_worker.pl SEED\n";
my $kv = AI::KVStore->create('dist_sync');
my ($rank, $workers) = ($kv->rank, $kv->num_workers);
print "perl worker rank $rank of $workers (", $kv->type, "), seed $seed\n";

# The value worker `w` pushes from device `d` in round `r` (r = -1: the initial value).
sub values_of {
  my ($w, $r, $d, @dims) = @_;
  CORE::srand($seed * 7919 + $w * 131 + ($r + 1) * 17 + $d);
  my $n = 1;
  $n *= $_ for @dims;
  return pdl(double, [map { rand(2) - 1 } 1 .. $n])->reshape(@dims);
}

my @dims = (5, 4);    # MXNet shape [4, 5]
$kv->init(1, values_of(0, -1, 0, @dims));
my $worst = 0;
for my $round (0 .. 2) {
  $kv->push(1, [map { values_of($rank, $round, $_, @dims) } 0 .. 1]);
  my $out = zeros(double, @dims);
  $kv->pull(1, out => $out);
  my $want = zeros(double, @dims);
  for my $w (0 .. $workers - 1) {
    $want += values_of($w, $round, $_, @dims) for 0 .. 1;
  }
  my $err = max(abs($out - $want));
  $worst = $err if $err > $worst;
  die "perl worker rank $rank: key 1 round $round: largest error $err\ngot $out\nwant $want\n" if $err > 1e-12;
}
my $rows = AI::KVStore::RowSparse->zeros([4, 5]);
$kv->row_sparse_pull(1, out => $rows, row_ids => [3, 1, 3]);
my $last = zeros(double, @dims);
$kv->pull(1, out => $last);
die "perl worker rank $rank: row_sparse_pull listed " . $rows->indices . "\n"
  unless join(',', $rows->indices->list) eq '1,3';
die "perl worker rank $rank: row_sparse_pull rows differ from the pull\n"
  unless all($rows->data->slice(':,(0)') == $last->slice(':,(1)'))
  && all($rows->data->slice(':,(1)') == $last->slice(':,(3)'));
eval { $kv->push(12345, zeros(double, 3)) };
die "perl worker rank $rank: a push to key 12345 gave '$@'\n" unless "$@" =~ /12345/;
print "perl worker rank $rank: 3 rounds of sums and row_sparse_pull match the float64 reference ",
  "(largest error $worst)\n";

# 2. Linear regression. Shard w: 32 rows of 8 features and a target.
my ($features, $shard_rows, $steps, $lr) = (8, 32, 20, 0.2);
my $truth = values_of(99, 99, 0, $features);
sub shard {
  my ($w) = @_;
  my $x = values_of($w, 1000, 0, $features, $shard_rows);
  my $y = sumover($x * $truth) + 0.01 * values_of($w, 1001, 0, $shard_rows);
  return ($x, $y);
}
my $total_rows = $shard_rows * $workers;
# The gradient of 1/(2N) sum (x.w - y)^2 over one shard's rows, and that shard's loss part.
sub gradient {
  my ($x, $y, $weights) = @_;
  my $residual = sumover($x * $weights) - $y;
  return (sumover(($x * $residual->dummy(0))->xchg(0, 1)) / $total_rows,
          sum($residual**2) / (2 * $total_rows));
}

my ($x, $y) = shard($rank);
my $weights = zeros(double, $features);
$kv->init(2, $weights);
$kv->set_optimizer('sgd', learning_rate => $lr);
my @losses;
for my $step (1 .. $steps) {
  my ($grad, $loss) = gradient($x, $y, $weights);
  push @losses, $loss;
  $kv->push(2, $grad);
  $kv->pull(2, out => $weights);
}
printf "perl worker rank %d: loss of its shard %.5f -> %.5f\n", $rank, $losses[0], $losses[-1];
die "perl worker rank $rank: the loss did not fall\n" unless $losses[-1] < $losses[0] / 4;

my $reference = zeros(double, $features);
my @shards = map { [shard($_)] } 0 .. $workers - 1;
for my $step (1 .. $steps) {
  my $grad = zeros(double, $features);
  $grad += (gradient(@{$shards[$_]}, $reference))[0] for 0 .. $workers - 1;
  $reference = $reference - $lr * $grad;
}
my $err = max(abs($weights - $reference));
die "perl worker rank $rank: weights after $steps steps differ from the float64 reference by "
  . "$err\n$weights\n$reference\n"
  if $err > 1e-9;
$kv->_barrier;
print "perl worker rank $rank: $steps steps of sgd on the servers match the float64 reference ",
  "(largest error $err)\n";
$kv->close;
