// The store a conformance test binary exercises.
//
// The conformance cases (seeds_cases.cc, semantics_cases.cc) are compiled into one test binary
// per store type; each binary defines GetStoreUnderTest() for its store, so the same cases run
// against the in-process stores and, through the same SDK, against a cluster over gRPC.
#ifndef KVSTORE_TESTS_CONFORMANCE_STORE_UNDER_TEST_H_
#define KVSTORE_TESTS_CONFORMANCE_STORE_UNDER_TEST_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/kvstore.h"

namespace kvstore::testing {

struct StoreUnderTest {
  // The type the store reports, e.g. "local".
  std::string type;
  // Whether SetUpdater with a C++ function applies (in-process stores only).
  bool function_updater = true;
  // Creates a fresh, empty store.
  std::function<absl::StatusOr<std::unique_ptr<KVStore>>()> create;
  // Distributed stores: the number of kvservers of each job (0 for in-process stores).
  int num_servers = 0;
};

// Defined once per conformance binary.
const StoreUnderTest& GetStoreUnderTest();

// NewStore creates a fresh store and fails the current test case when that fails.
std::unique_ptr<KVStore> NewStore();

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_CONFORMANCE_STORE_UNDER_TEST_H_
