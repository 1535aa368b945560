#!/usr/bin/env bash
# Runs the Perl module's tests (perl/t/*.t, what `prove -I perl/lib perl/t` runs) against the
# built libkvstore.so and daemons, and prints a Catch2-style summary line for tests/run_tests.sh:
# "test cases: N | P passed | F failed", each top-level test of a .t file (one subtest per
# example) a case; a file that dies or exits non-zero without a failed test counts as one failed
# case, a file skipped whole as one skipped case ("SKIPPED: ..." line).
#
# Usage: run_prove.sh LIBKVSTORE SCHEDULER KVSERVER TEST_FILE...
set -uo pipefail
export KVSTORE_LIBRARY="$PWD/$1" KVSTORE_SCHEDULER="$PWD/$2" KVSTORE_KVSERVER="$PWD/$3"
shift 3
perl -I perl/lib - "$@" <<'PERL'
use strict;
use warnings;
use TAP::Harness;
my $harness = TAP::Harness->new({verbosity => 1, lib => ['perl/lib'], timer => 1});
my $aggregate = $harness->runtests(@ARGV);
my ($total, $failed) = (0, 0);
for my $file ($aggregate->descriptions) {
  my ($parser) = $aggregate->parsers($file);
  if ($parser->skip_all) {
    print "SKIPPED: $file: ", $parser->skip_all, "\n";
    $total += 1;
    next;
  }
  my $bad = scalar($parser->failed);
  $bad = 1 if !$bad && ($parser->has_problems || $parser->exit);
  $total += $parser->tests_run > 0 ? $parser->tests_run : 1;
  $failed += $bad;
}
print "test cases: $total | ", $total - $failed, " passed | $failed failed\n";
exit($failed ? 1 : 0);
PERL
