// Files and processes of a test that runs real processes: its runfiles, its temporary folder,
// a job secret made once per test process, and starting a process with its own log.
#ifndef KVSTORE_TESTS_TEST_FILES_H_
#define KVSTORE_TESTS_TEST_FILES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/process.h"

namespace kvstore::testing {

// Runfile returns the path of a file of this test's runfiles ("server/kvserver").
std::string Runfile(const std::string& path);
// TempDir returns the test's temporary folder (TEST_TMPDIR, else /tmp).
std::string TempDir();
// JobSecret returns the path of a job secret (tests/job_secret.h) made once per test process.
const std::string& JobSecret();

// FreePort returns a port on 127.0.0.1 that the OS just chose and released, for a third-party
// server that cannot bind port 0 and report it (Prometheus, etcd).
int FreePort();

using Variables = std::vector<std::pair<std::string, std::string>>;

// StartProcess starts `argv` as `name` with `env` added (and KV_SECRET_FILE=JobSecret() unless
// `env` sets it: calls are authenticated as in a launched job), its output in a log file of its
// own below TempDir(); REQUIREs that it started.
std::unique_ptr<Process> StartProcess(const std::string& name, std::vector<std::string> argv,
                                      Variables env = {});

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_TEST_FILES_H_
