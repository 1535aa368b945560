#include "tests/cluster/cluster_util.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/job_secret.h"
#include "tests/test_files.h"

namespace kvstore::testing {

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    uint64_t value = 0;
    const char* text = std::getenv("KVSTORE_TEST_SEED");
    if (text == nullptr || !absl::SimpleAtoi(text, &value)) value = std::random_device()() % 100000;
    std::printf("seed=%llu (replay with KVSTORE_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(value), static_cast<unsigned long long>(value));
    return value;
  }();
  return seed;
}

void ExpectExit(Process& process, int code, int seconds) {
  const absl::StatusOr<int> exit = process.Wait(absl::Seconds(seconds));
  INFO(process.name() << " output:\n" << process.output());
  INFO(exit.status().ToString());
  REQUIRE(exit.ok());
  REQUIRE(*exit == code);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace kvstore::testing
