package AI::KVStore;

# AI::KVStore: the KVStore parameter server from Perl, with the API of AI::MXNet::KVStore and
# PDL piddles as values. A thin layer over the SDK's C API (client/c_api.h) through
# FFI::Platypus; docs/perl.md.

use strict;
use warnings;
use Carp qw(croak);
use Scalar::Util qw(blessed looks_like_number);
use FFI::Platypus 2.00;
use FFI::Platypus::Buffer qw(scalar_to_buffer buffer_to_scalar);
use FFI::Platypus::Memory qw(memcpy);
use PDL::Lite;
use PDL::Types ();
use AI::KVStore::Error;
use AI::KVStore::RowSparse;

# Errors and croaks name the caller's line, not this module's.
$Carp::Internal{$_}++ for qw(AI::KVStore AI::KVStore::Error AI::KVStore::RowSparse);

our $VERSION = '0.1.0';

# kv_dtype numbers (client/c_api.h) by PDL type, and back.
my %DTYPE_OF_PDL = (
  $PDL::Types::PDL_F => 1,    # float    -> KV_FLOAT32
  $PDL::Types::PDL_D => 4,    # double   -> KV_FLOAT64
  $PDL::Types::PDL_L => 5,    # long     -> KV_INT32
  $PDL::Types::PDL_LL => 6,   # longlong -> KV_INT64
  $PDL::Types::PDL_IND => 6,  # indx     -> KV_INT64
);
my %PDL_TYPE_OF_DTYPE = (
  1 => PDL::float(), 4 => PDL::double(), 5 => PDL::long(), 6 => PDL::longlong(),
);

my $ffi;

# The shared library: KVSTORE_LIBRARY, else where deploy/install-perl.sh installed it, else the
# system's search path (ldconfig).
sub _library {
  return $ENV{KVSTORE_LIBRARY} if $ENV{KVSTORE_LIBRARY};
  my $installed = eval { require AI::KVStore::Installed; $AI::KVStore::Installed::LIBRARY };
  return $installed if $installed && -e $installed;
  require FFI::CheckLib;
  my ($found) = FFI::CheckLib::find_lib(lib => 'kvstore');
  croak 'AI::KVStore: libkvstore.so not found: install the SDK (bash deploy/install-perl.sh) '
      . 'or set KVSTORE_LIBRARY to its path'
    unless $found;
  return $found;
}

# _ffi loads the library once and binds the C API's functions as AI::KVStore::_kv_*.
sub _ffi {
  return $ffi if $ffi;
  $ffi = FFI::Platypus->new(api => 2, lib => [_library()]);
  $ffi->type('(opaque,opaque,opaque,opaque)->void' => 'kv_updater_fn');
  my %functions = (
    kv_last_error => [[] => 'string'],
    kv_last_error_code => [[] => 'int'],
    kv_api_version => [[] => 'int'],
    kv_version => [[] => 'string'],
    kv_create => [['string', 'opaque*'] => 'int'],
    kv_free => [['opaque'] => 'void'],
    kv_type => [['opaque'] => 'string'],
    kv_rank => [['opaque'] => 'int'],
    kv_num_workers => [['opaque'] => 'int'],
    kv_set_barrier_before_exit => [['opaque', 'int'] => 'void'],
    kv_init => [['opaque', 'opaque', 'opaque', 'size_t'] => 'int'],
    kv_push => [['opaque', 'opaque', 'opaque', 'size_t', 'int'] => 'int'],
    kv_pull => [['opaque', 'opaque', 'opaque', 'size_t', 'int'] => 'int'],
    kv_pushpull => [['opaque', 'opaque', 'opaque', 'opaque', 'size_t', 'int'] => 'int'],
    kv_value_spec => [['opaque', 'opaque', 'sint32*', 'sint32*', 'opaque', 'sint32'] => 'int'],
    kv_row_sparse_new =>
      [['sint32', 'opaque', 'sint32', 'opaque', 'sint64', 'opaque', 'opaque*'] => 'int'],
    kv_row_sparse_free => [['opaque'] => 'void'],
    kv_row_sparse_num_rows => [['opaque'] => 'sint64'],
    kv_row_sparse_dtype => [['opaque'] => 'sint32'],
    kv_row_sparse_row_ids => [['opaque'] => 'opaque'],
    kv_row_sparse_data => [['opaque'] => 'opaque'],
    kv_init_row_sparse => [['opaque', 'opaque', 'opaque'] => 'int'],
    kv_push_row_sparse => [['opaque', 'opaque', 'opaque', 'size_t', 'int'] => 'int'],
    kv_row_sparse_pull =>
      [['opaque', 'opaque', 'opaque', 'opaque', 'opaque', 'size_t', 'int'] => 'int'],
    kv_wait => [['opaque', 'opaque', 'size_t'] => 'int'],
    kv_wait_all => [['opaque'] => 'int'],
    kv_barrier => [['opaque'] => 'int'],
    kv_set_updater => [['opaque', 'kv_updater_fn', 'opaque'] => 'int'],
    kv_set_optimizer => [['opaque', 'string', 'string'] => 'int'],
    kv_set_gradient_compression => [['opaque', 'string'] => 'int'],
    kv_save_optimizer_states => [['opaque', 'string'] => 'int'],
    kv_load_optimizer_states => [['opaque', 'string'] => 'int'],
    kv_send_command_to_servers => [['opaque', 'int', 'string'] => 'int'],
    kv_num_dead_nodes => [['opaque', 'int', 'int', 'int*'] => 'int'],
    kv_checkpoint => [['opaque', 'string'] => 'int'],
  );
  for my $name (sort keys %functions) {
    $ffi->attach([$name => "_$name"] => @{$functions{$name}});
  }
  _kv_api_version() == 1
    or croak 'AI::KVStore: the library ' . _library() . ' has C API version '
    . _kv_api_version() . '; this module needs version 1';
  return $ffi;
}

# _check turns a C API status into an AI::KVStore::Error exception.
sub _check {
  my ($code) = @_;
  return if $code == 0;
  AI::KVStore::Error->throw(code => $code, message => _kv_last_error());
}

# --- Keys and values ----------------------------------------------------------------------

# Keys as in MXNet's Perl API, where every key is a string: one that reads as a decimal integer
# ("3", or 3) is the int key 3, any other is a string key. A store holds one kind.
sub _is_int_key { return $_[0] =~ /\A-?(?:0|[1-9][0-9]{0,17})\z/ }

# _pack_keys returns the packed kv_key array for @keys, and the strings it points into (kept
# alive by the caller for the call's duration).
sub _pack_keys {
  my @keys = @_;
  my (@keep, $packed);
  $packed = '';
  for my $key (@keys) {
    croak 'AI::KVStore: a key is undef' unless defined $key;
    croak "AI::KVStore: key $key is a reference; keys are strings or integers" if ref $key;
    if (_is_int_key($key)) {
      $packed .= pack('Q q', 0, $key);
    } else {
      my $text = "$key\0";
      CORE::push @keep, \$text;
      my ($pointer) = scalar_to_buffer($text);
      $packed .= pack('Q q', $pointer, 0);
    }
  }
  return ($packed, \@keep);
}

# _dtype_of returns the kv_dtype of a piddle, or dies naming the key and the type.
sub _dtype_of {
  my ($pdl, $key) = @_;
  my $dtype = $DTYPE_OF_PDL{$pdl->get_datatype};
  croak "AI::KVStore: key $key: a piddle of type " . $pdl->type
    . ' has no KVStore dtype (float, double, long, longlong or indx)'
    unless $dtype;
  return $dtype;
}

sub _is_piddle { return blessed($_[0]) && $_[0]->isa('PDL') }

# _physical returns `pdl` itself when its data can be read or written in place (an allocated,
# physical piddle), else undef.
sub _physical {
  my ($pdl) = @_;
  return $pdl->allocated && !$pdl->is_inplace ? $pdl : undef;
}

# _tensor packs a kv_tensor describing the piddle's data (MXNet's row-major shape is the
# piddle's dims reversed) and returns it with the scalars it points into.
sub _tensor {
  my ($pdl, $key) = @_;
  my $dtype = _dtype_of($pdl, $key);
  my @shape = reverse $pdl->dims;
  my $shape = pack('q*', @shape) . pack('q', 0);
  my $dataref = $pdl->get_dataref;
  my ($data) = scalar_to_buffer($$dataref);
  my ($shape_pointer) = scalar_to_buffer($shape);
  return (pack('Q Q l l l l', $data, $shape_pointer, scalar(@shape), $dtype, 0, 0),
          [\$shape, $pdl]);
}

# _key_value flattens MXNet's (key, value) forms into parallel lists: a key and a value, a key
# and an array ref of values (devices), an array ref of keys and one of values, each value a
# piddle (or row-sparse value) or an array ref of them. `what` names the argument in errors.
sub _key_value {
  my ($keys, $values, $what, $op) = @_;
  my (@k, @v);
  my $is_value = sub { _is_piddle($_[0]) || (blessed($_[0]) && $_[0]->isa('AI::KVStore::RowSparse')) };
  if (ref $keys eq 'ARRAY') {
    croak "AI::KVStore: $op: $what is an array ref of one entry per key ("
      . scalar(@$keys) . ' keys)'
      unless ref $values eq 'ARRAY' && @$values == @$keys;
    for my $i (0 .. $#$keys) {
      my ($kk, $vv) = _key_value($keys->[$i], $values->[$i], $what, $op);
      CORE::push @k, @$kk;
      CORE::push @v, @$vv;
    }
    return (\@k, \@v);
  }
  if ($is_value->($values)) {
    return ([$keys], [$values]);
  }
  if (ref $values eq 'ARRAY' && @$values && !grep { !$is_value->($_) } @$values) {
    return ([($keys) x @$values], [@$values]);
  }
  croak "AI::KVStore: $op: key $keys: $what is a piddle, an AI::KVStore::RowSparse or an array "
    . 'ref of them, not ' . (ref($values) || (defined $values ? "'$values'" : 'undef'));
}

# --- The store ----------------------------------------------------------------------------

# create(NAME): a new store of type NAME: 'local', 'device' (in this process), 'dist_sync',
# 'dist_async', 'dist_sync_device' (joining the job of the launch environment).
sub create {
  my ($class, $name) = @_;
  ($class, $name) = (__PACKAGE__, $class) if !defined $name && $class ne __PACKAGE__;
  $name = 'local' unless defined $name;
  _ffi();
  my $handle;
  _check(_kv_create($name, \$handle));
  return bless {handle => $handle, held => {}, updater => undef}, __PACKAGE__;
}

sub DESTROY {
  my ($self) = @_;
  return if ${^GLOBAL_PHASE} eq 'DESTRUCT' && !$self->{handle};
  _kv_free($self->{handle}) if $self->{handle};
  $self->{handle} = undef;
}

# close: frees the store now (a distributed store first finishes its operations).
sub close {
  my ($self) = @_;
  _kv_free($self->{handle}) if $self->{handle};
  $self->{handle} = undef;
  $self->{held} = {};
  return;
}

sub _handle {
  my ($self) = @_;
  croak 'AI::KVStore: the store is closed' unless $self->{handle};
  return $self->{handle};
}

sub type { return _kv_type($_[0]->_handle) }
sub rank { return _kv_rank($_[0]->_handle) }
sub num_workers { return _kv_num_workers($_[0]->_handle) }

# _hold keeps pushed piddles (copies) alive until a wait covers their keys.
sub _hold {
  my ($self, $keys, $keep) = @_;
  CORE::push @{$self->{held}{$_}}, $keep for @$keys;
}

# init(KEY, VALUE) / init([KEYS], [VALUES]): MXNet's init; rank 0's values are stored.
sub init {
  my ($self, $key, $value) = @_;
  my ($keys, $values) = _key_value($key, $value, 'value', 'init');
  my (@dense_k, @dense_v);
  for my $i (0 .. $#$keys) {
    if (_is_piddle($values->[$i])) {
      CORE::push @dense_k, $keys->[$i];
      CORE::push @dense_v, $values->[$i];
      next;
    }
    my ($packed, $keep) = _pack_keys($keys->[$i]);
    my $rs = $values->[$i]->_handle_for($keys->[$i]);
    my $code = _kv_init_row_sparse($self->_handle, _pointer($packed), $rs);
    _kv_row_sparse_free($rs);
    _check($code);
  }
  return unless @dense_k;
  my ($packed, $keep) = _pack_keys(@dense_k);
  my ($tensors, @keep_t) = ('');
  for my $i (0 .. $#dense_k) {
    my ($t, $k) = _tensor(_physical($dense_v[$i]) // $dense_v[$i]->copy, $dense_k[$i]);
    $tensors .= $t;
    CORE::push @keep_t, $k;
  }
  _check(_kv_init($self->_handle, _pointer($packed), _pointer($tensors), scalar @dense_k));
  return;
}

sub _pointer {
  my ($pointer) = scalar_to_buffer($_[0]);
  return $pointer;
}

# push(KEY, VALUE, priority => P): MXNet's push; the values of a key (devices) are summed.
sub push {
  my ($self, $key, $value, @options) = @_;
  my %options = _options(\@options, 'push', 'priority');
  my ($keys, $values) = _key_value($key, $value, 'value', 'push');
  my $sparse = grep { !_is_piddle($_) } @$values;
  croak 'AI::KVStore: push: dense and row-sparse values in one call; push them separately'
    if $sparse && $sparse != @$values;
  my ($packed, $keep) = _pack_keys(@$keys);
  if ($sparse) {
    my @handles = map { $values->[$_]->_handle_for($keys->[$_]) } 0 .. $#$values;
    my $list = pack('Q*', @handles);
    my $code = _kv_push_row_sparse($self->_handle, _pointer($packed), _pointer($list),
                                   scalar @$keys, $options{priority} // 0);
    _kv_row_sparse_free($_) for @handles;
    _check($code);
    $self->_raise_updater_error;
    return;
  }
  my ($tensors, @keep_t) = ('');
  for my $i (0 .. $#$keys) {
    # The servers read the value after push returns: a copy, held until a wait covers the key,
    # so the caller may change the piddle at once (MXNet's engine orders that for NDArrays).
    my ($t, $k) = _tensor($values->[$i]->copy, $keys->[$i]);
    $tensors .= $t;
    CORE::push @keep_t, $k;
  }
  _check(_kv_push($self->_handle, _pointer($packed), _pointer($tensors), scalar @$keys,
                  $options{priority} // 0));
  $self->_hold($keys, \@keep_t);
  $self->_raise_updater_error;
  return;
}

sub _options {
  my ($list, $op, @known) = @_;
  croak "AI::KVStore: $op: options are name => value pairs" if @$list % 2;
  my %options = @$list;
  my %known = map { $_ => 1 } @known;
  for my $name (sort keys %options) {
    croak "AI::KVStore: $op: unknown option '$name'; known: " . join(', ', @known)
      unless $known{$name};
  }
  return %options;
}

# pull(KEY, out => OUT, priority => P): MXNet's pull. Returns once the outputs hold the newest
# value (MXNet's reads of `out` wait for it).
sub pull {
  my ($self, $key, @options) = @_;
  my %options = _options(\@options, 'pull', 'out', 'priority', 'ignore_sparse');
  croak 'AI::KVStore: pull: out => piddle(s) is required' unless defined $options{out};
  my ($keys, $outs) = _key_value($key, $options{out}, 'out', 'pull');
  for my $i (0 .. $#$outs) {
    croak "AI::KVStore: pull: key $keys->[$i]: the output is row-sparse; use row_sparse_pull"
      unless _is_piddle($outs->[$i]);
  }
  $self->_pull_into($keys, $outs, undef, $options{priority} // 0);
  return;
}

# pushpull(KEY, VALUE, out => OUT, priority => P): push, then pull the updated value.
sub pushpull {
  my ($self, $key, $value, @options) = @_;
  my %options = _options(\@options, 'pushpull', 'out', 'priority');
  my ($keys, $values) = _key_value($key, $value, 'value', 'pushpull');
  my $outs = $values;
  if (defined $options{out}) {
    (my $out_keys, $outs) = _key_value($key, $options{out}, 'out', 'pushpull');
    croak 'AI::KVStore: pushpull: one output per value (' . scalar(@$values) . ' values, '
      . scalar(@$outs) . ' outputs)'
      unless @$outs == @$values;
  }
  $self->_pull_into($keys, $outs, $values, $options{priority} // 0);
  return;
}

# _pull_into pulls (or pushes `values` and pulls) into the piddles `outs`: in place where the
# piddle is physical and of the stored dtype, else through a buffer assigned to it afterwards.
sub _pull_into {
  my ($self, $keys, $outs, $values, $priority) = @_;
  my ($packed, $keep) = _pack_keys(@$keys);
  my ($tensors, @targets, @keep_t) = ('');
  for my $i (0 .. $#$keys) {
    my $out = $outs->[$i];
    my $stored = _stored_dtype($self, $keys->[$i], $out);
    my $direct = _physical($out);
    $direct = undef if defined $direct && $stored != _dtype_of($out, $keys->[$i]);
    my $buffer = $direct // PDL->new_from_specification($PDL_TYPE_OF_DTYPE{$stored}, $out->dims);
    my ($t, $k) = _tensor($buffer, $keys->[$i]);
    $tensors .= $t;
    CORE::push @keep_t, $k;
    CORE::push @targets, [$out, $buffer, !defined $direct];
  }
  if ($values) {
    my ($in, @keep_in) = ('');
    for my $i (0 .. $#$keys) {
      my ($t, $k) = _tensor($values->[$i]->copy, $keys->[$i]);
      $in .= $t;
      CORE::push @keep_in, $k;
    }
    _check(_kv_pushpull($self->_handle, _pointer($packed), _pointer($in), _pointer($tensors),
                        scalar @$keys, $priority));
  } else {
    _check(_kv_pull($self->_handle, _pointer($packed), _pointer($tensors), scalar @$keys,
                    $priority));
  }
  $self->wait($keys);
  for my $target (@targets) {
    my ($out, $buffer, $copy) = @$target;
    $buffer->upd_data;
    $out .= $buffer if $copy;
  }
  return;
}

# _stored_dtype returns the dtype stored under `key` (the piddle's own when the key is unknown:
# the pull then fails naming the key).
sub _stored_dtype {
  my ($self, $key, $pdl) = @_;
  my ($packed, $keep) = _pack_keys($key);
  my ($dtype, $ndim) = (0, 0);
  my $shape = "\0" x (8 * 32);
  my $code = _kv_value_spec($self->_handle, _pointer($packed), \$dtype, \$ndim, _pointer($shape), 32);
  return $dtype if $code == 0 && $PDL_TYPE_OF_DTYPE{$dtype};
  return defined $pdl ? _dtype_of($pdl, $key) : 0;
}

# row_sparse_pull(KEY, out => RS, row_ids => IDS, priority => P): fills each row-sparse output
# with the rows IDS (a piddle or array ref of integers; one per output, or one for all) of the
# newest value. Returns once the outputs hold them.
sub row_sparse_pull {
  my ($self, $key, @options) = @_;
  my %options = _options(\@options, 'row_sparse_pull', 'out', 'row_ids', 'priority');
  croak 'AI::KVStore: row_sparse_pull: out => AI::KVStore::RowSparse value(s) is required'
    unless defined $options{out};
  croak 'AI::KVStore: row_sparse_pull: row_ids => ids is required' unless defined $options{row_ids};
  my ($keys, $outs) = _key_value($key, $options{out}, 'out', 'row_sparse_pull');
  for my $i (0 .. $#$outs) {
    croak "AI::KVStore: row_sparse_pull: key $keys->[$i]: the output is dense; use pull"
      if _is_piddle($outs->[$i]);
  }
  my $ids = $options{row_ids};
  my @ids;
  if (ref $ids eq 'ARRAY' && @$ids && (_is_piddle($ids->[0]) || ref $ids->[0] eq 'ARRAY')) {
    @ids = @$ids;
    @ids = (@ids) x @$outs if @ids == 1 && @$outs > 1;
  } else {
    @ids = ($ids) x @$outs;
  }
  croak 'AI::KVStore: row_sparse_pull: ' . scalar(@ids) . ' row id lists for '
    . scalar(@$outs) . ' outputs'
    unless @ids == @$outs;
  my ($packed, $keep) = _pack_keys(@$keys);
  my (@handles, @id_buffers);
  for my $i (0 .. $#$outs) {
    my @list = _row_ids($ids[$i], $keys->[$i]);
    CORE::push @id_buffers, pack('q*', @list) . pack('q', 0);
    CORE::push @handles, $outs->[$i]->_empty_handle_for($keys->[$i],
                                                        _stored_dtype($self, $keys->[$i], undef));
  }
  my $id_pointers = pack('Q*', map { _pointer($_) } @id_buffers);
  my $counts = pack('q*', map { (length($_) / 8) - 1 } @id_buffers);
  my $code = _kv_row_sparse_pull($self->_handle, _pointer($packed), _pointer(pack('Q*', @handles)),
                                 _pointer($id_pointers), _pointer($counts), scalar @$keys,
                                 $options{priority} // 0);
  $code = _kv_wait($self->_handle, _pointer($packed), scalar @$keys) if $code == 0;
  if ($code == 0) {
    for my $i (0 .. $#$outs) {
      my $rows = _kv_row_sparse_num_rows($handles[$i]);
      my $row_ids = $rows ? buffer_to_scalar(_kv_row_sparse_row_ids($handles[$i]), 8 * $rows) : '';
      $outs->[$i]->_set_rows([unpack('q*', $row_ids)], _kv_row_sparse_data($handles[$i]),
                             $PDL_TYPE_OF_DTYPE{_kv_row_sparse_dtype($handles[$i])});
    }
  }
  _kv_row_sparse_free($_) for @handles;
  _check($code);
  return;
}

sub _row_ids {
  my ($ids, $key) = @_;
  return map { int } $ids->list if _is_piddle($ids);
  return map {
    croak "AI::KVStore: row_sparse_pull: key $key: row id '$_' is not an integer"
      unless looks_like_number($_) && $_ == int($_);
    int
  } @$ids if ref $ids eq 'ARRAY';
  return (int $ids) if looks_like_number($ids) && $ids == int($ids);
  croak "AI::KVStore: row_sparse_pull: key $key: row_ids is a piddle or an array ref of integers";
}

# wait(KEYS) / wait_all: block until the operations on KEYS / on every key have completed.
sub wait {
  my ($self, $keys) = @_;
  my @keys = ref $keys eq 'ARRAY' ? @$keys : ($keys);
  my ($packed, $keep) = _pack_keys(@keys);
  my $code = _kv_wait($self->_handle, _pointer($packed), scalar @keys);
  delete @{$self->{held}}{@keys};
  _check($code);
  return;
}

sub wait_all {
  my ($self) = @_;
  my $code = _kv_wait_all($self->_handle);
  $self->{held} = {};
  _check($code);
  return;
}

sub _barrier { _check(_kv_barrier($_[0]->_handle)); return }

# _set_updater(SUB): SUB->($key, $input, $stored) merges a push into the stored value by
# changing $stored in place (MXNet's updater). In-process stores only.
sub _set_updater {
  my ($self, $updater) = @_;
  croak 'AI::KVStore: _set_updater takes a code ref' unless ref $updater eq 'CODE';
  my $closure = _ffi()->closure(sub {
    my ($key_pointer, $received_pointer, $stored_pointer) = @_;
    my ($text, $id) = unpack('Q q', buffer_to_scalar($key_pointer, 16));
    my $key = $text ? _ffi()->cast('opaque', 'string', $text) : $id;
    my ($input) = _piddle_from($received_pointer);
    my ($stored, $stored_data, $bytes) = _piddle_from($stored_pointer);
    my $ok = eval { $updater->($key, $input, $stored); 1 };
    if (!$ok) {
      $self->{updater_error} //= $@;
      return;
    }
    $stored->make_physical;
    my $result = ${$stored->get_dataref};
    memcpy($stored_data, _pointer($result), $bytes) if length($result) == $bytes;
  });
  _check(_kv_set_updater($self->_handle, $closure, undef));
  $self->{updater} = $closure;
  return;
}

# _piddle_from copies a kv_tensor's data into a new piddle; returns it, the data pointer and
# the byte size.
sub _piddle_from {
  my ($tensor_pointer) = @_;
  my ($data, $shape_pointer, $ndim, $dtype) = unpack('Q Q l l', buffer_to_scalar($tensor_pointer, 24));
  my @shape = $ndim ? unpack('q*', buffer_to_scalar($shape_pointer, 8 * $ndim)) : ();
  my $pdl = PDL->new_from_specification($PDL_TYPE_OF_DTYPE{$dtype}, reverse @shape);
  my $bytes = $pdl->nelem * PDL::Core::howbig($pdl->get_datatype);
  ${$pdl->get_dataref} = buffer_to_scalar($data, $bytes) if $bytes;
  $pdl->upd_data;
  return ($pdl, $data, $bytes);
}

# A push through an updater that died: the error is raised by the push.
sub _raise_updater_error {
  my ($self) = @_;
  my $error = delete $self->{updater_error};
  die $error if defined $error;
}

# set_optimizer(NAME, PARAM => VALUE, ...) or set_optimizer({name => NAME, PARAM => VALUE}):
# runs the optimizer as the updater, locally or on every server (MXNet's hyper-parameters by
# name: learning_rate, wd, momentum, beta1, ...). An object with a `name` method and a
# `params` hash ref is taken too.
sub set_optimizer {
  my ($self, $optimizer, %params) = @_;
  my $name = $optimizer;
  if (ref $optimizer eq 'HASH') {
    %params = (%$optimizer, %params);
    $name = delete $params{name};
  } elsif (blessed($optimizer) && $optimizer->can('name')) {
    %params = (%{$optimizer->can('params') ? $optimizer->params : {}}, %params);
    $name = $optimizer->name;
  }
  croak 'AI::KVStore: set_optimizer: the optimizer needs a name' unless defined $name && !ref $name;
  my $text = join ' ', map {
    my $v = $params{$_};
    croak "AI::KVStore: set_optimizer: $_ is not a plain value" if ref $v;
    "$_=" . (defined $v ? $v : '');
  } sort keys %params;
  _check(_kv_set_optimizer($self->_handle, $name, $text));
  return;
}

# set_gradient_compression({type => '2bit', threshold => 0.5}).
sub set_gradient_compression {
  my ($self, $params) = @_;
  croak 'AI::KVStore: set_gradient_compression takes a hash ref such as {type => "2bit"}'
    unless ref $params eq 'HASH';
  my $text = join ' ', map { "$_=$params->{$_}" } sort keys %$params;
  _check(_kv_set_gradient_compression($self->_handle, $text));
  return;
}

sub save_optimizer_states {
  my ($self, $fname, $dump_optimizer) = @_;
  croak 'AI::KVStore: save_optimizer_states: fname is required' unless defined $fname;
  _check(_kv_save_optimizer_states($self->_handle, $fname));
  return;
}

sub load_optimizer_states {
  my ($self, $fname) = @_;
  croak 'AI::KVStore: load_optimizer_states: fname is required' unless defined $fname;
  _check(_kv_load_optimizer_states($self->_handle, $fname));
  return;
}

sub _send_command_to_servers {
  my ($self, $head, $body) = @_;
  croak 'AI::KVStore: _send_command_to_servers: head is an integer'
    unless defined $head && $head =~ /\A-?[0-9]+\z/;
  _check(_kv_send_command_to_servers($self->_handle, $head, defined $body ? "$body" : ''));
  return;
}

# num_dead_node(GROUP, TIMEOUT_SEC): nodes of GROUP (1 scheduler, 2 servers, 4 workers, 6, 7)
# without a heartbeat within TIMEOUT_SEC (60).
sub num_dead_node {
  my ($self, $group, $timeout) = @_;
  my $dead = 0;
  _check(_kv_num_dead_nodes($self->_handle, $group // 7, $timeout // 60, \$dead));
  return $dead;
}

sub checkpoint {
  my ($self, $dir) = @_;
  _check(_kv_checkpoint($self->_handle, $dir));
  return;
}

sub barrier_before_exit {
  my ($self, $on) = @_;
  _kv_set_barrier_before_exit($self->_handle, $on ? 1 : 0);
  return;
}

# version: the SDK's version.
sub version { _ffi(); return _kv_version() }

1;
