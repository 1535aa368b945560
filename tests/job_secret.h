// WriteJobSecret: a fresh job secret for the daemons and workers a test or benchmark starts.
#ifndef KVSTORE_TESTS_JOB_SECRET_H_
#define KVSTORE_TESTS_JOB_SECRET_H_

#include <string>

namespace kvstore::testing {

// WriteJobSecret writes a fresh random secret (common/job_auth.h) to a new file in `dir`,
// readable by its owner only, and returns the file's path; the process exits with a message
// when the file cannot be written. Pass the path as KV_SECRET_FILE to every process of the
// job, or read it with ReadSecretFile for an in-process worker's DistOptions.
std::string WriteJobSecret(const std::string& dir);

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_JOB_SECRET_H_
