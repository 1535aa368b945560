#include "tests/conformance/store_under_test.h"

#include <catch2/catch.hpp>

namespace kvstore::testing {

std::unique_ptr<KVStore> NewStore() {
  auto store = GetStoreUnderTest().create();
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return *std::move(store);
}

}  // namespace kvstore::testing
