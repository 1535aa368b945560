package AI::KVStore::Error;

# AI::KVStore::Error: what AI::KVStore dies with when the store refuses a call. Stringifies to
# its message (which names the key, shape, dtype, peer or file); `code` is the C API's status
# code (client/c_api.h: 3 invalid argument, 5 not found, 6 already exists, ...) and
# `code_name` its name.

use strict;
use warnings;
use Carp ();
use overload '""' => sub { $_[0]->{message} }, fallback => 1;

our $VERSION = '0.1.0';

my @NAMES = qw(OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS
  PERMISSION_DENIED RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE UNIMPLEMENTED
  INTERNAL UNAVAILABLE DATA_LOSS UNAUTHENTICATED);

sub throw {
  my ($class, %fields) = @_;
  my $name = $NAMES[$fields{code}] // "CODE_$fields{code}";
  die bless {code => $fields{code}, code_name => $name,
             message => "AI::KVStore: $name: $fields{message}" . Carp::shortmess('')}, $class;
}

sub code { $_[0]->{code} }
sub code_name { $_[0]->{code_name} }
sub message { $_[0]->{message} }

1;
