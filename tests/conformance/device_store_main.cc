// Runs the conformance cases against the in-process "device" store (CPU tensors).
#include "tests/conformance/store_under_test.h"

namespace kvstore::testing {

const StoreUnderTest& GetStoreUnderTest() {
  static const StoreUnderTest* store = new StoreUnderTest{"device", /*function_updater=*/true,
                                                          [] { return KVStore::Create("device"); }};
  return *store;
}

}  // namespace kvstore::testing
