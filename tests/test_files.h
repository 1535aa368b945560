// Files of a test that runs real processes: its runfiles, its temporary folder, and a job
// secret made once per test process.
#ifndef KVSTORE_TESTS_TEST_FILES_H_
#define KVSTORE_TESTS_TEST_FILES_H_

#include <string>

namespace kvstore::testing {

// Runfile returns the path of a file of this test's runfiles ("server/kvserver").
std::string Runfile(const std::string& path);
// TempDir returns the test's temporary folder (TEST_TMPDIR, else /tmp).
std::string TempDir();
// JobSecret returns the path of a job secret (tests/job_secret.h) made once per test process.
const std::string& JobSecret();

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_TEST_FILES_H_
