# AI::KVStore on random values (seed printed; KV_TEST_SEED repeats a run) against float64 sums
# computed here: every PDL type the store takes, string keys, outputs that are slices or of
# another type, pushpull, the SGD optimizer, and errors: an exception carrying the message and
# code, nothing changed.
use strict;
use warnings;
use Test::More;
use PDL;
use AI::KVStore;

my $seed = $ENV{KV_TEST_SEED} // int(rand(2**31));
diag "seed $seed (KV_TEST_SEED=$seed repeats this run)";
CORE::srand($seed);   # (PDL exports its own srand)

# A random piddle of `type` and dims, exactly representable in float32: multiples of 1/64.
sub random_piddle {
  my ($type, @dims) = @_;
  my $n = 1;
  $n *= $_ for @dims;
  my @values = map { int(rand(512) - 256) / 64 } 1 .. $n;
  @values = map { int($_ * 64) } @values if $type eq 'long' || $type eq 'longlong';
  my $flat = pdl(PDL::Type->new($type), \@values);
  return @dims ? $flat->reshape(@dims) : $flat->reshape(1)->slice('(0)')->copy;
}

subtest 'every PDL type: push of several devices, pull, against float64 sums' => sub {
  for my $type (qw(float double long longlong)) {
    my $kv = AI::KVStore->create('local');
    my @dims = (1 + int(rand(6)), 1 + int(rand(4)));
    $kv->init(11, random_piddle($type, @dims));
    my @values = map { random_piddle($type, @dims) } 1 .. 3;
    $kv->push(11, \@values);
    my $out = zeros(PDL::Type->new($type), @dims);
    $kv->pull(11, out => $out);
    my $want = double($values[0]) + double($values[1]) + double($values[2]);
    ok(all(abs(double($out) - $want) <= 1e-6 * (1 + abs($want))), "$type: the sum of three")
      or diag "got $out want $want";
    is($out->type . '', $type, "$type: the output keeps its type");
  }
};

subtest 'string keys, pushpull, outputs that are slices or of another type' => sub {
  my $kv = AI::KVStore->create('local');
  my @dims = (4, 3);
  my $init = random_piddle('float', @dims);
  $kv->init(['weight', 'bias'], [$init, $init->copy]);
  my $value = random_piddle('float', @dims);
  my $out = zeros(float, @dims);
  $kv->pushpull('weight', $value, out => $out);
  ok(all($out == $value), 'pushpull returns the pushed value (assign)');

  my $big = zeros(double, 6, 5);
  my $window = $big->slice('1:4,1:3');     # dims (4, 3), not physical
  $kv->pull('weight', out => $window);
  ok(all($big->slice('1:4,1:3') == double($value)), 'pull into a slice writes through it');
  is($big->slice('0,:')->sum + $big->slice('5,:')->sum, 0, 'and leaves the rest alone');
  my $as_double = zeros(double, @dims);
  $kv->pull('bias', out => $as_double);
  ok(all($as_double == double($init)), 'a double output receives the float value converted');

  # A key of the other kind in the same store.
  eval { $kv->init(3, $init) };
  isa_ok($@, 'AI::KVStore::Error');
  is($@->code_name, 'INVALID_ARGUMENT', 'int and string keys mixed: invalid argument');
};

subtest 'push then change the piddle at once: the push sent the old value' => sub {
  my $kv = AI::KVStore->create('local');
  my $value = random_piddle('double', 3, 2);
  $kv->init(1, $value);
  my $pushed = random_piddle('double', 3, 2);
  my $copy = $pushed->copy;
  $kv->push(1, $pushed);
  $pushed .= 99;
  my $out = zeros(3, 2);
  $kv->pull(1, out => $out);
  ok(all($out == $copy), 'the value pushed is the one at the call');
};

subtest 'sgd against a float64 reference' => sub {
  my $kv = AI::KVStore->create('local');
  my $w = random_piddle('double', 5);
  $kv->init('w', $w);
  my $lr = 0.01 * (1 + int(rand(50)));
  my $wd = 0.001 * int(rand(10));
  $kv->set_optimizer('sgd', learning_rate => $lr, wd => $wd);
  my $want = $w->copy;
  for my $step (1 .. 3) {
    my $g = random_piddle('double', 5);
    $kv->push('w', $g);
    $want = $want - $lr * ($g + $wd * $want);
  }
  my $out = zeros(5);
  $kv->pull('w', out => $out);
  ok(all(abs($out - $want) < 1e-12), "3 steps of sgd, lr $lr, wd $wd") or diag "$out vs $want";
};

subtest 'errors: an exception with the message and code; nothing changed' => sub {
  my $kv = AI::KVStore->create('local');
  my $value = random_piddle('float', 3, 2);
  $kv->init(3, $value);
  my $out = zeros(float, 3, 2);

  eval { $kv->push(4, ones(float, 3, 2)) };
  like("$@", qr/key 4/, 'unknown key: named');
  is($@->code, 5, 'unknown key: code 5 (not found)');
  eval { $kv->push(3, ones(float, 2, 3)) };
  like("$@", qr/\(2, 3\).*\(3, 2\)|\(3, 2\).*\(2, 3\)/, 'shape mismatch: both shapes named');
  like("$@", qr/at \S+02_values\.t line/, "the caller's line is named");
  eval { $kv->init(3, $value) };
  is($@->code_name, 'ALREADY_EXISTS', 'second init');
  eval { $kv->push(3, ones(byte, 3, 2)) };
  like("$@", qr/key 3.*byte/, 'a byte piddle is refused, naming the key and type');
  eval { $kv->push([3, 3], [ones(float, 3, 2)]) };
  like("$@", qr/one entry per key/, 'keys and values of different lengths');
  eval { $kv->pull(3) };
  like("$@", qr/out =>/, 'pull without out');
  eval { $kv->pull(3, out => $out, colour => 'red') };
  like("$@", qr/unknown option 'colour'/, 'an unknown option is named');
  eval { $kv->row_sparse_pull(3, out => $out, row_ids => [0]) };
  like("$@", qr/dense; use pull/, 'row_sparse_pull into a dense piddle');
  eval { $kv->pull(3, out => AI::KVStore::RowSparse->zeros([3, 2])) };
  like("$@", qr/use row_sparse_pull/, 'pull into a row-sparse value');
  $kv->pull(3, out => $out);
  ok(all($out == $value), 'after all of that the value is unchanged');

  $kv->_set_updater(sub { die "the updater refuses\n" });
  eval { $kv->push(3, ones(float, 3, 2)) };
  like("$@", qr/the updater refuses/, "the updater's error is raised by the push");
  eval { AI::KVStore->create('nonsense') };
  like("$@", qr/nonsense/, 'an unknown store type is named');
};

subtest 'row-sparse values: init, push of rows, pull of random rows' => sub {
  my $kv = AI::KVStore->create('local');
  my ($rows, $cols) = (6 + int(rand(5)), 1 + int(rand(4)));
  my $dense = random_piddle('double', $cols, $rows);
  $kv->init('emb', AI::KVStore::RowSparse->from_dense($dense));
  $kv->_set_updater(sub { my ($key, $input, $stored) = @_; $stored += $input });
  my @ids = (0, $rows - 1, int(rand($rows)));
  my $data = random_piddle('double', $cols, scalar @ids);
  $kv->push('emb', AI::KVStore::RowSparse->new(shape => [$rows, $cols], indices => \@ids,
                                                data => $data));
  my $want = $dense->copy;
  $want->slice(":,($ids[$_])") += $data->slice(":,($_)") for 0 .. $#ids;
  my $out = AI::KVStore::RowSparse->zeros([$rows, $cols]);
  my @pull = map { int(rand($rows)) } 1 .. 4;
  $kv->row_sparse_pull('emb', out => $out, row_ids => \@pull);
  my %unique = map { $_ => 1 } @pull;
  is_deeply([$out->indices->list], [sort { $a <=> $b } keys %unique], 'rows sorted, unique');
  for my $i (0 .. $out->num_rows - 1) {
    my $r = $out->indices->at($i);
    ok(all(abs($out->data->slice(":,($i)") - $want->slice(":,($r)")) < 1e-12), "row $r");
  }
  $kv->_set_updater(sub { die "no rows today\n" });
  eval { $kv->push('emb', AI::KVStore::RowSparse->new(shape => [$rows, $cols], indices => [0],
                                                      data => zeros(double, $cols, 1))) };
  like("$@", qr/no rows today/, "the updater's error is raised by a row-sparse push too");
};

done_testing();
