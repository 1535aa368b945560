// Command-line flags of the project's programs: one usage configuration shared by every binary.
//
// Every program (kvserver, scheduler, kvctl, the benchmarks) parses its command line with
// InitFlags, so `--help` lists the flags that program defines and `--version` prints kVersion:
//
//   ABSL_FLAG(int, port, 0, "Port to listen on.");
//
//   int main(int argc, char** argv) {
//     const std::vector<char*> args =
//         kvstore::InitFlags(argc, argv, "serves things.\n  prog [--port=N]", __FILE__);
//     ...
//   }
#ifndef KVSTORE_COMMON_FLAGS_USAGE_H_
#define KVSTORE_COMMON_FLAGS_USAGE_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace kvstore {

// kVersion is the version of the project's programs, printed by `--version`.
inline constexpr char kVersion[] = "0.1.0";

// InitFlags parses the Abseil flags of a program whose own flags are defined in `flags_file`
// (pass __FILE__ from the file that holds its ABSL_FLAG definitions) and returns the positional
// arguments, argv[0] first.
//
// `usage` says what the program does and how to call it; Abseil prints it after "PROGRAM: ".
// The built-in usage flags print to stdout and exit 0:
//   --help, --helpshort  `usage`, then the flags defined in `flags_file`, and the shared ones
//                        (common/security_flags.cc, common/daemon_flags.cc) it links;
//   --helppackage        `usage`, then the flags defined in `flags_file`'s folder;
//   --helpfull           `usage`, then every flag of the binary, Abseil's own included;
//   --help=SUBSTRING     the flags whose name, help or file contains SUBSTRING;
//   --version            "PROGRAM 0.1.0".
// An unknown flag or a malformed value prints Abseil's error to stderr and exits 1.
//
// Call it once per process, first thing in main() and before any thread starts: it sets
// process-wide Abseil state (the usage message may be set only once).
std::vector<char*> InitFlags(int argc, char* argv[], absl::string_view usage,
                             absl::string_view flags_file);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_FLAGS_USAGE_H_
