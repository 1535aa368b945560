# Every example of AI::MXNet::KVStore's reference, in Perl on AI::KVStore, printing what the
# reference prints (its `aspdl` outputs) and checking it. The reference's NDArrays are PDL
# piddles here: mx->nd->ones([2, 3]) is ones(3, 2) (a piddle's dims are MXNet's shape reversed),
# mx->nd->sparse->zeros('row_sparse', [3, 3]) is AI::KVStore::RowSparse->zeros([3, 3]), and the
# reference's four GPUs are four piddles (several values of one key are summed as MXNet sums a
# key's values from several devices).
use strict;
use warnings;
use Test::More;
use PDL;
use AI::KVStore;

my $shape = [2, 3];
my @dims = reverse @$shape;

# is_value: the piddle holds `value` everywhere and has the reference's shape; prints it.
sub is_value {
  my ($pdl, $value, $name) = @_;
  note "$name:$pdl";
  is_deeply([reverse $pdl->dims], $shape, "$name: shape [2, 3]");
  is_deeply($pdl->unpdl, [map { [($value) x 3] } 1 .. 2], "$name: every element is $value");
}

my $kv = AI::KVStore->create('local');

subtest 'create and type' => sub {
  isa_ok($kv, 'AI::KVStore');
  is($kv->type, 'local', 'type');
  is($kv->rank, 0, 'rank');
  is($kv->num_workers, 1, 'num_workers');
};

subtest 'init: a single key-value pair' => sub {
  $kv->init(3, ones(@dims) * 2);
  my $a = zeros(@dims);
  $kv->pull(3, out => $a);
  is_value($a, 2, 'pull after init');
};

my $keys = [5, 7, 9];
subtest 'init: a list of key-value pairs' => sub {
  $kv->init($keys, [map { ones(@dims) } 0 .. @$keys - 1]);
  my $b = [map { zeros(@dims) } 0 .. @$keys - 1];
  $kv->pull($keys, out => $b);
  is_value($b->[$_], 1, "key $keys->[$_]") for 0 .. 2;
};

my $a = zeros(@dims);
subtest 'push: a single key-value pair' => sub {
  $kv->push(3, ones(@dims) * 8);
  $kv->pull(3, out => $a);
  is_value($a, 8, 'pull after push of 8');
};

my $gpus = [0 .. 3];
subtest 'push: the values of four devices are summed' => sub {
  my $b = [map { ones(@dims) } @$gpus];
  $kv->push(3, $b);
  $kv->pull(3, out => $a);
  is_value($a, 4, 'sum of four ones');
};

subtest 'push: a list of keys, single device' => sub {
  $kv->push($keys, [map { ones(@dims) } 0 .. @$keys - 1]);
  my $b = [map { zeros(@dims) } 0 .. @$keys - 1];
  $kv->pull($keys, out => $b);
  is_value($b->[1], 1, '$b->[1]');
};

subtest 'push: a list of keys, multiple devices' => sub {
  my $b = [map { [map { ones(@dims) } @$gpus] } 0 .. @$keys - 1];
  $kv->push($keys, $b);
  $kv->pull($keys, out => $b);
  is_value($b->[1][1], 4, '$b->[1][1]');
  is_value($b->[2][3], 4, '$b->[2][3]');
};

subtest 'pull: a single key-value pair' => sub {
  my $kv = AI::KVStore->create('local');
  $kv->init(3, ones(@dims) * 2);
  my $a = zeros(@dims);
  $kv->pull(3, out => $a);
  is_value($a, 2, '$a');
  # pull into multiple devices
  my $b = [map { ones(@dims) } @$gpus];
  $kv->pull(3, out => $b);
  is_value($b->[1], 2, '$b->[1]');
  # a list of key-value pairs, on a single device and on multiple devices
  $kv->init($keys, [map { ones(@dims) * 2 } 0 .. @$keys - 1]);
  $b = [map { zeros(@dims) } 0 .. @$keys - 1];
  $kv->pull($keys, out => $b);
  is_value($b->[1], 2, 'list: $b->[1]');
  $b = [map { [map { ones(@dims) } @$gpus] } 0 .. @$keys - 1];
  $kv->pull($keys, out => $b);
  is_value($b->[1][1], 2, 'list, devices: $b->[1][1]');
};

subtest 'row_sparse_pull' => sub {
  my $kv = AI::KVStore->create('local');
  my $shape = [3, 3];
  $kv->init('3', AI::KVStore::RowSparse->from_dense(ones(3, 3)));
  my $a = AI::KVStore::RowSparse->zeros($shape);
  my @cases = (
    ['row_ids', longlong([0, 2]), [[1, 1, 1], [0, 0, 0], [1, 1, 1]]],
    ['duplicate_row_ids', longlong([2, 2]), [[0, 0, 0], [0, 0, 0], [1, 1, 1]]],
    ['unsorted_row_ids', longlong([1, 0]), [[1, 1, 1], [1, 1, 1], [0, 0, 0]]],
  );
  for my $case (@cases) {
    my ($name, $row_ids, $want) = @$case;
    $kv->row_sparse_pull('3', out => $a, row_ids => $row_ids);
    note "$name " . $row_ids . ':' . $a->aspdl;
    is_deeply($a->aspdl->unpdl, $want, "$name $row_ids");
  }
  is_deeply([$a->indices->list], [0, 1], 'the output lists its rows sorted');
};

subtest 'set_gradient_compression' => sub {
  my $kv = AI::KVStore->create('local');
  $kv->set_gradient_compression({type => '2bit', threshold => 0.5});
  $kv->init(3, zeros(float, @dims));
  # 2bit: each value becomes +threshold, -threshold or 0; the rest is kept as residual.
  $kv->push(3, float([[0.7, -0.9, 0.2], [0.1, -0.3, 2.0]]));
  my $a = zeros(float, @dims);
  $kv->pull(3, out => $a);
  note "after one push:$a";
  is_deeply($a->unpdl, [[0.5, -0.5, 0], [0, 0, 0.5]], 'values quantized to +-threshold or 0');
  $kv->push(3, zeros(float, @dims));
  $kv->pull(3, out => $a);
  is_deeply($a->unpdl, [[0, 0, 0], [0, 0, 0.5]], 'the residual 1.5 is sent next');
  eval { $kv->set_gradient_compression({type => '3bit'}) };
  like("$@", qr/3bit/, 'an unknown type is refused, naming it');
};

subtest 'set_optimizer' => sub {
  my $kv = AI::KVStore->create('local');
  $kv->init(3, ones(@dims));
  $kv->set_optimizer('sgd', learning_rate => 0.1);
  $kv->push(3, ones(@dims) * 2);
  my $a = zeros(@dims);
  $kv->pull(3, out => $a);
  note "sgd, lr 0.1, weight 1, gradient 2:$a";
  ok(all(abs($a - 0.8) < 1e-12), 'weight 1 - 0.1 * 2 = 0.8');
  $kv->set_optimizer({name => 'sgd', learning_rate => 0.5, momentum => 0.9});
  $kv->push(3, ones(@dims));
  $kv->pull(3, out => $a);
  ok(all(abs($a - 0.3) < 1e-12), 'a hash ref: 0.8 - 0.5 * 1 = 0.3');
  eval { $kv->set_optimizer('sgd', beta1 => 0.9) };
  like("$@", qr/beta1/, 'a hyper-parameter sgd does not take is refused, naming it');
};

subtest 'save_optimizer_states and load_optimizer_states' => sub {
  my $kv = AI::KVStore->create('local');
  $kv->init(3, ones(@dims));
  $kv->set_optimizer('sgd', learning_rate => 0.1, momentum => 0.9);
  $kv->push(3, ones(@dims));
  my $file = "/tmp/ai_kvstore_states_$$";
  $kv->save_optimizer_states($file);
  ok(-s $file, 'the states file is written');
  my $a = zeros(@dims);
  $kv->push(3, ones(@dims));
  $kv->pull(3, out => $a);
  my $after_two = $a->copy;
  # Back to the saved momentum, from the value after one step: the second step repeats.
  my $kv2 = AI::KVStore->create('local');
  $kv2->init(3, ones(@dims) * 0.9);
  $kv2->set_optimizer('sgd', learning_rate => 0.1, momentum => 0.9);
  $kv2->load_optimizer_states($file);
  $kv2->push(3, ones(@dims));
  $kv2->pull(3, out => $a);
  ok(all(abs($a - $after_two) < 1e-12), 'the loaded momentum gives the same second step')
    or diag "after two steps $after_two, restored $a";
  eval { $kv2->load_optimizer_states("$file.missing") };
  like("$@", qr/\Q$file.missing\E/, 'a missing file is named');
  unlink $file;
};

subtest '_set_updater' => sub {
  my $kv = AI::KVStore->create('local');
  $kv->init(3, ones(@dims) * 4);
  my @printed;
  my $update = sub {
    my ($key, $input, $stored) = @_;
    push @printed, "update on key: $key";
    note "update on key: $key";
    $stored += $input * 2;
  };
  $kv->_set_updater($update);
  my $a = zeros(@dims);
  $kv->pull(3, out => $a);
  is_value($a, 4, 'before the push');
  $kv->push(3, ones(@dims));
  is_deeply(\@printed, ['update on key: 3'], 'the updater ran once, on key 3');
  $kv->pull(3, out => $a);
  is_value($a, 6, 'after the push');
};

subtest '_barrier and _send_command_to_servers in process' => sub {
  my $kv = AI::KVStore->create('local');
  ok(eval { $kv->_barrier; 1 }, '_barrier returns at once') or diag $@;
  ok(eval { $kv->_send_command_to_servers(16, 'hello'); 1 }, 'a command is a no-op without servers')
    or diag $@;
};

done_testing();
