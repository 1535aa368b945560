// Runs the conformance cases against the in-process "local" store.
#include "tests/conformance/store_under_test.h"

namespace kvstore::testing {

const StoreUnderTest& GetStoreUnderTest() {
  static const StoreUnderTest* store = new StoreUnderTest{"local", /*function_updater=*/true,
                                                          [] { return KVStore::Create("local"); }};
  return *store;
}

}  // namespace kvstore::testing
