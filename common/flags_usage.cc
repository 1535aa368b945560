#include "common/flags_usage.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

// Abseil's public ParseCommandLine exits 1 after printing help. The two internal entry points
// it is made of let InitFlags parse first and then print help and exit 0 itself.
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"

namespace kvstore {
namespace {

// Path drops the leading slashes, as Abseil does with the file names of flags it reports.
absl::string_view Path(absl::string_view file) {
  const size_t start = file.find_first_not_of('/');
  return start == absl::string_view::npos ? absl::string_view() : file.substr(start);
}

// Folder returns the part of `path` before its last slash ("" for a bare file name).
absl::string_view Folder(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? absl::string_view() : path.substr(0, slash);
}

// Basename returns the part of `path` after its last slash.
absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<char*> InitFlags(int argc, char* argv[], absl::string_view usage,
                             absl::string_view flags_file) {
  const std::string own_file(Path(flags_file));
  const std::string program(Basename(argc > 0 ? argv[0] : ""));
  absl::FlagsUsageConfig config;
  // A program's own flags, and the security and daemon flags the programs share.
  config.contains_help_flags = [own_file](absl::string_view file) {
    return Path(file) == own_file || Path(file) == "common/security_flags.cc" ||
           Path(file) == "common/daemon_flags.cc";
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.contains_helppackage_flags = [own_file](absl::string_view file) {
    return Folder(Path(file)) == Folder(own_file);
  };
  config.version_string = [program] { return absl::StrCat(program, " ", kVersion, "\n"); };
  absl::SetFlagsUsageConfig(std::move(config));
  absl::SetProgramUsageMessage(usage);

  namespace flags = absl::flags_internal;
  std::vector<char*> args = flags::ParseCommandLineImpl(
      argc, argv, flags::ArgvListAction::kRemoveParsedArgs, flags::UsageFlagsAction::kIgnoreUsage,
      flags::OnUndefinedFlag::kAbortIfUndefined);
  // HandleUsageFlags returns -1 when no usage flag was given, else it has printed the answer.
  if (flags::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) != -1) {
    std::cout.flush();
    std::exit(0);
  }
  return args;
}

}  // namespace kvstore
