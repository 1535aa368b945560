// Helpers shared by the tests in tests/cluster: runfiles, the test's temporary folder, a job
// secret, and processes with a log of their own.
#ifndef KVSTORE_TESTS_CLUSTER_CLUSTER_UTIL_H_
#define KVSTORE_TESTS_CLUSTER_CLUSTER_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/process.h"
#include "tests/test_files.h"

namespace kvstore::testing {

// TestSeed returns the seed of the test's random inputs (KVSTORE_TEST_SEED when set), printed
// once.
uint64_t TestSeed();

// ExpectExit waits up to `seconds` for `process` and REQUIREs exit code `code`, showing its
// output otherwise.
void ExpectExit(Process& process, int code, int seconds = 60);

// Contains is true when `text` contains `part`.
bool Contains(const std::string& text, const std::string& part);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_CLUSTER_CLUSTER_UTIL_H_
