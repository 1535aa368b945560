package AI::KVStore::RowSparse;

# AI::KVStore::RowSparse: a row-sparse value (MXNet's RowSparseNDArray): `shape` in MXNet's
# order (rows first), `indices` the listed rows (a longlong piddle) and `data` their elements (a
# piddle of dims reverse(rows, shape[1..])); every unlisted row is zero. What init and push take
# for a row-sparse key and what row_sparse_pull fills.
#
#   my $value = AI::KVStore::RowSparse->from_dense(ones(3, 3));
#   my $out = AI::KVStore::RowSparse->zeros([3, 3]);
#   print $out->aspdl;                  # the dense piddle

use strict;
use warnings;
use Carp qw(croak);
use Scalar::Util qw(blessed);
use FFI::Platypus::Buffer qw(buffer_to_scalar);
use PDL::Lite;

our $VERSION = '0.1.0';

my %DTYPE_OF_TYPE = (float => 1, double => 4, long => 5, longlong => 6, indx => 6);

# new(shape => [ROWS, ...], indices => IDS, data => PIDDLE): IDS a piddle or array ref.
sub new {
  my ($class, %args) = @_;
  my $shape = $args{shape};
  croak 'AI::KVStore::RowSparse: shape is an array ref of at least one dimension'
    unless ref $shape eq 'ARRAY' && @$shape >= 1;
  my $indices = $args{indices} // [];
  $indices = PDL::longlong(ref $indices eq 'ARRAY' ? $indices : $indices->unpdl)
    unless blessed($indices) && $indices->isa('PDL') && $indices->type eq 'longlong';
  $indices = $indices->flat;
  my $data = $args{data};
  my @row_dims = reverse @$shape[1 .. $#$shape];
  $data = PDL->new_from_specification(PDL::double(), @row_dims, 0) unless defined $data;
  my @want = (@row_dims, $indices->nelem);
  croak 'AI::KVStore::RowSparse: data has dims (' . join(',', $data->dims) . '), '
    . $indices->nelem . ' rows of shape [' . join(',', @$shape) . '] need (' . join(',', @want) . ')'
    unless join(',', $data->dims) eq join(',', @want)
    || ($indices->nelem == 0 && $data->nelem == 0);
  return bless {shape => [@$shape], indices => $indices, data => $data}, $class;
}

# zeros(SHAPE, type => 'double'): no rows (all zeros): the form of a row_sparse_pull output.
sub zeros {
  my ($class, $shape, %args) = @_;
  my $type = $args{type} // 'double';   # PDL's default, as zeros() and ones()
  croak "AI::KVStore::RowSparse: type '$type' is not one of " . join(', ', sort keys %DTYPE_OF_TYPE)
    unless $DTYPE_OF_TYPE{$type};
  my $pdl_type = PDL::Type->new($type);
  return $class->new(shape => $shape, indices => [],
                     data => PDL->new_from_specification($pdl_type, reverse(@$shape[1 .. $#$shape]), 0));
}

# from_dense(PIDDLE): the rows of the piddle that hold a non-zero element.
sub from_dense {
  my ($class, $dense) = @_;
  my @shape = reverse $dense->dims;
  croak 'AI::KVStore::RowSparse: from_dense needs a piddle of at least one dimension' unless @shape;
  my $rows = $shape[0];
  my $flat = $dense->clump(-2);   # dims (row elements, rows) or (rows) for rank 1
  $flat = $flat->dummy(0) if @shape == 1;
  my @ids = grep { PDL::any($flat->slice(":,($_)") != 0) } 0 .. $rows - 1;
  my $data = @ids ? $dense->dice_axis(-1, PDL::longlong(\@ids))->copy
                  : PDL->new_from_specification($dense->type, reverse(@shape[1 .. $#shape]), 0);
  return $class->new(shape => \@shape, indices => \@ids, data => $data);
}

sub shape { [@{$_[0]->{shape}}] }
sub indices { $_[0]->{indices} }
sub data { $_[0]->{data} }
sub num_rows { $_[0]->{indices}->nelem }
sub stype { 'row_sparse' }

# aspdl: the dense value (rows listed twice are summed).
sub aspdl {
  my ($self) = @_;
  my @shape = @{$self->{shape}};
  my $dense = PDL->new_from_specification($self->{data}->type, reverse @shape);
  $dense .= 0;
  my @ids = $self->{indices}->list;
  for my $i (0 .. $#ids) {
    if (@shape == 1) {
      $dense->slice("($ids[$i])") += $self->{data}->slice("($i)");
    } else {
      my $row = $dense->slice(join(',', (':') x (@shape - 1), "($ids[$i])"));
      $row += $self->{data}->slice(join(',', (':') x (@shape - 1), "($i)"));
    }
  }
  return $dense;
}

# tostype('default'): aspdl; tostype('row_sparse'): itself.
sub tostype {
  my ($self, $stype) = @_;
  return $self if $stype eq 'row_sparse';
  return $self->aspdl if $stype eq 'default';
  croak "AI::KVStore::RowSparse: tostype '$stype': 'default' or 'row_sparse'";
}

sub _dtype {
  my ($self, $key) = @_;
  my $dtype = $DTYPE_OF_TYPE{'' . $self->{data}->type};
  croak "AI::KVStore: key $key: a row-sparse value of type " . $self->{data}->type
    . ' has no KVStore dtype'
    unless $dtype;
  return $dtype;
}

# _handle_for: a kv_row_sparse holding a copy of this value (the caller frees it).
sub _handle_for {
  my ($self, $key) = @_;
  my $shape = pack('q*', @{$self->{shape}});
  my $ids = pack('q*', $self->{indices}->list) . pack('q', 0);
  my $data = $self->{data}->copy;
  my $bytes = ${$data->get_dataref};
  my $handle;
  AI::KVStore::_check(AI::KVStore::_kv_row_sparse_new(
    $self->_dtype($key), AI::KVStore::_pointer($shape), scalar @{$self->{shape}},
    AI::KVStore::_pointer($ids), $self->num_rows,
    $self->num_rows ? AI::KVStore::_pointer($bytes) : undef, \$handle));
  return $handle;
}

# _empty_handle_for: a kv_row_sparse without rows of this value's shape and of `dtype` (the
# stored one; 0: this value's).
sub _empty_handle_for {
  my ($self, $key, $dtype) = @_;
  my $shape = pack('q*', @{$self->{shape}});
  my $handle;
  AI::KVStore::_check(AI::KVStore::_kv_row_sparse_new(
    $dtype || $self->_dtype($key), AI::KVStore::_pointer($shape), scalar @{$self->{shape}}, undef,
    0, undef, \$handle));
  return $handle;
}

# _set_rows: the rows a pull returned, their data (of PDL type `type`) copied from the C buffer
# at `pointer`, converted to this value's type.
sub _set_rows {
  my ($self, $ids, $pointer, $type) = @_;
  my @shape = @{$self->{shape}};
  my $data = PDL->new_from_specification($type, reverse(@shape[1 .. $#shape]), scalar @$ids);
  my $bytes = $data->nelem * PDL::Core::howbig($data->get_datatype);
  ${$data->get_dataref} = buffer_to_scalar($pointer, $bytes) if $bytes;
  $data->upd_data;
  $self->{indices} = PDL::longlong($ids)->flat;
  $self->{indices} = PDL::longlong([]) unless @$ids;
  $self->{data} = $data->type eq $self->{data}->type ? $data : $data->convert($self->{data}->type);
  return;
}

1;
