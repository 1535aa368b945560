#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key.h"
#include "common/partitioner.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("Key: int and string keys compare, hash and print", "[key]") {
  const Key three = 3;
  const Key zero = 0;
  const Key name = "weight";
  REQUIRE(three.is_int());
  REQUIRE(zero.int_key() == 0);
  REQUIRE(name.is_string());
  REQUIRE(three.ToString() == "3");
  REQUIRE(name.Quoted() == "\"weight\"");
  REQUIRE(three != Key("3"));
  REQUIRE(Key(std::string("weight")) == name);
  REQUIRE(Key(7).StableHash() == Key(int64_t{7}).StableHash());
  // FNV-1a of "a" is a published constant: the hash is the same in every build.
  REQUIRE(Key("a").StableHash() == 0xAF63DC4C8601EC8Cull);
}

TEST_CASE("Key: copies, moves, order and hashes of random keys of both kinds", "[key]") {
  // The reference: a key as (kind, integer, text), integers before strings.
  TestRng rng;
  INFO(rng.Describe());
  using Ref = std::tuple<int, int64_t, std::string>;
  std::vector<Key> keys;
  std::vector<Ref> refs;
  for (int i = 0; i < 400; ++i) {
    if (rng.Int(0, 1) == 0) {
      const int64_t k = rng.Int(-50, 50) * (rng.Int(0, 1) == 0 ? 1 : int64_t{1} << 40);
      keys.push_back(k);
      refs.emplace_back(0, k, "");
    } else {
      std::string text(static_cast<size_t>(rng.Int(0, 40)), 'a');
      for (char& c : text) c = static_cast<char>('a' + rng.Int(0, 2));
      keys.push_back(text);
      refs.emplace_back(1, 0, text);
    }
  }
  // Copies and moves keep the key; assignment over a key of either kind replaces it.
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t j = static_cast<size_t>(rng.Int(0, static_cast<int64_t>(keys.size()) - 1));
    Key copy = keys[i];
    Key moved = std::move(copy);
    Key assigned = keys[j];
    assigned = moved;
    Key move_assigned = keys[j];
    move_assigned = Key(keys[i]);
    assigned = assigned;  // Self-assignment keeps it.
    for (const Key* k : {&moved, &assigned, &move_assigned}) {
      INFO("key " << i << " " << keys[i].Quoted());
      REQUIRE(*k == keys[i]);
      REQUIRE(k->is_int() == (std::get<0>(refs[i]) == 0));
      REQUIRE(k->ToString() ==
              (k->is_int() ? std::to_string(std::get<1>(refs[i])) : std::get<2>(refs[i])));
    }
  }
  std::vector<Key> copies(keys.begin(), keys.end());
  keys.clear();  // The copies outlive the originals.
  for (size_t i = 0; i < copies.size(); ++i) {
    for (size_t j = 0; j < copies.size(); j += 7) {
      INFO(copies[i].Quoted() << " vs " << copies[j].Quoted());
      REQUIRE((copies[i] == copies[j]) == (refs[i] == refs[j]));
      REQUIRE((copies[i] < copies[j]) == (refs[i] < refs[j]));
      if (refs[i] == refs[j]) REQUIRE(absl::HashOf(copies[i]) == absl::HashOf(copies[j]));
    }
  }
}

TEST_CASE("Partitioner: split boundaries follow round(N/S*i)", "[partitioner]") {
  TestRng rng;
  INFO(rng.Describe());
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = rng.Int(1, 50'000'000);
    const int s = static_cast<int>(rng.Int(1, 17));
    int64_t total = 0;
    for (int i = 0; i < s; ++i) {
      // The documented formula, evaluated in long double as an independent reference.
      const long double lo = std::floor(static_cast<long double>(n) * i / s + 0.5L);
      const long double hi = std::floor(static_cast<long double>(n) * (i + 1) / s + 0.5L);
      REQUIRE(Partitioner::SplitBoundary(n, i, s) == static_cast<int64_t>(lo));
      total += static_cast<int64_t>(hi - lo);
    }
    REQUIRE(total == n);
  }
  // Examples: 10 elements over 3 servers are 3, 4, 3; 7 over 2 are 4, 3.
  auto p3 = Partitioner::Create(3, 5).value();
  REQUIRE(p3.Partition(1, 10) == std::vector<Slice>{{0, 0, 3}, {1, 3, 4}, {2, 7, 3}});
  auto p2 = Partitioner::Create(2, 5).value();
  REQUIRE(p2.Partition("w", 7) == std::vector<Slice>{{0, 0, 4}, {1, 4, 3}});
}

TEST_CASE("Partitioner: big values split by whole rows", "[partitioner]") {
  // 10 rows of 6 elements over 3 servers: rows 3, 4, 3.
  auto p3 = Partitioner::Create(3, 5).value();
  REQUIRE(p3.Partition(1, 60, 6) == std::vector<Slice>{{0, 0, 18}, {1, 18, 24}, {2, 42, 18}});
  // Fewer rows than servers: the servers without a row hold nothing.
  auto p4 = Partitioner::Create(4, 5).value();
  REQUIRE(p4.Partition(1, 20, 10) == std::vector<Slice>{{0, 0, 10}, {2, 10, 10}});
  // A row size that does not divide the count falls back to elements.
  REQUIRE(p3.Partition(1, 10, 4) == p3.Partition(1, 10));
  // Every split covers the value exactly, in row multiples.
  for (int64_t rows = 1; rows < 40; ++rows) {
    for (int64_t row : {1, 3, 7}) {
      int64_t next = 0;
      for (const Slice& s : p4.Partition(2, rows * row, row)) {
        REQUIRE(s.offset == next);
        REQUIRE(s.count % row == 0);
        REQUIRE(s.count > 0);
        next += s.count;
      }
      REQUIRE(next == rows * row);
    }
  }
}

TEST_CASE("Partitioner: small values live whole on one server, spread by hash", "[partitioner]") {
  auto p = Partitioner::Create(4).value();
  std::map<int, int> per_server;
  for (int key = 0; key < 4000; ++key) {
    const auto slices = p.Partition(key, 1000);
    REQUIRE(slices.size() == 1);
    REQUIRE(slices[0].offset == 0);
    REQUIRE(slices[0].count == 1000);
    REQUIRE(slices[0].server == p.ServerOf(key));
    ++per_server[slices[0].server];
  }
  REQUIRE(per_server.size() == 4);
  for (const auto& [server, count] : per_server) {
    INFO("server " << server);
    REQUIRE(count > 800);  // 1000 expected; a bad hash would pile keys up.
  }
  // The bound is inclusive: exactly `bound` elements stay whole, one more is split.
  auto bounded = Partitioner::Create(4, 100).value();
  REQUIRE(bounded.Partition(9, 100).size() == 1);
  REQUIRE(bounded.Partition(9, 101).size() == 4);
}

// The fraction of small keys whose server changes from S to S + 1 servers, against the ideal
// 1/(S + 1), over random int and string keys; every key that moves goes to the new server (and
// back, from S + 1 to S, only the new server's keys move). Printed: docs/state.md records it.
TEST_CASE("Partitioner: S to S + 1 servers moves about 1/(S + 1) of the small keys",
          "[partitioner]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  std::vector<Key> keys;
  for (int i = 0; i < 60000; ++i) {
    if (i % 2 == 0) {
      keys.emplace_back(static_cast<int64_t>(rng.engine()()));
    } else {
      keys.emplace_back(absl::StrCat("layer", rng.Int(0, 1 << 30), ".weight"));
    }
  }
  for (int s = 1; s <= 8; ++s) {
    const Partitioner before = Partitioner::Create(s).value();
    const Partitioner after = Partitioner::Create(s + 1).value();
    int64_t moved = 0;
    std::vector<int64_t> load(s + 1, 0);
    for (const Key& key : keys) {
      const int from = before.ServerOf(key), to = after.ServerOf(key);
      ++load[to];
      if (from != to) {
        ++moved;
        REQUIRE(to == s);  // Only to the new server.
      }
    }
    const double fraction = static_cast<double>(moved) / keys.size();
    const double ideal = 1.0 / (s + 1);
    std::printf("placement: %d -> %d servers moves %.4f of %zu keys (ideal %.4f)\n", s, s + 1,
                fraction, keys.size(), ideal);
    INFO(s << " -> " << s + 1 << " servers: moved " << fraction << ", ideal " << ideal);
    REQUIRE(fraction > ideal * 0.9);
    REQUIRE(fraction < ideal * 1.1);
    for (int64_t l : load)
      REQUIRE(std::abs(l - int64_t(keys.size()) / (s + 1)) < int64_t(keys.size()) / (s + 1) / 10);
  }
}

TEST_CASE("Partitioner: rejects bad parameters", "[partitioner]") {
  REQUIRE(absl::IsInvalidArgument(Partitioner::Create(0).status()));
  REQUIRE(absl::IsInvalidArgument(Partitioner::Create(2, 0).status()));
}

}  // namespace
}  // namespace kvstore
