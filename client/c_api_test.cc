// The C API (client/c_api.h) on in-process stores: values against float64 references, every
// argument error with its code and message and nothing applied, updaters as C callbacks with a
// user pointer, row-sparse values (MXNet's row_sparse_pull examples), optimizers and compression
// as text, and per-thread error messages. The C API in a job of real daemons is covered by
// //deploy/sdk:sdk_install_test (a C program built against the installed SDK) and by the Perl
// module's tests (//perl:perl_test).
#include "client/c_api.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace {

using kvstore::testing::TestRng;

struct Store {
  kv_store* kv = nullptr;
  explicit Store(const char* type = "local") { REQUIRE(kv_create(type, &kv) == KV_OK); }
  ~Store() { kv_free(kv); }
};

kv_tensor F32(std::vector<float>& data, const std::vector<int64_t>& shape) {
  return kv_tensor{data.data(), shape.data(), static_cast<int32_t>(shape.size()),
                   KV_FLOAT32,  KV_CPU,       0};
}

kv_key IntKey(int64_t id) { return kv_key{nullptr, id}; }

std::vector<float> RandomFloats(TestRng& rng, size_t n) {
  std::vector<float> out(n);
  for (float& x : out) x = static_cast<float>(rng.Uniform(-4, 4));
  return out;
}

TEST_CASE("C API: init, push of several devices and pull match float64 sums") {
  TestRng rng;
  INFO(rng.Describe());
  Store s;
  const std::vector<int64_t> shape = {3, static_cast<int64_t>(rng.Int(1, 7))};
  const size_t n = static_cast<size_t>(shape[0] * shape[1]);
  std::vector<float> init = RandomFloats(rng, n);
  kv_key keys[3] = {IntKey(5), IntKey(5), IntKey(9)};
  kv_tensor value = F32(init, shape);
  REQUIRE(kv_init(s.kv, &keys[0], &value, 1) == KV_OK);
  REQUIRE(kv_init(s.kv, &keys[2], &value, 1) == KV_OK);
  CHECK(std::string(kv_type(s.kv)) == "local");
  CHECK(kv_rank(s.kv) == 0);
  CHECK(kv_num_workers(s.kv) == 1);

  std::vector<float> a = RandomFloats(rng, n), b = RandomFloats(rng, n), c = RandomFloats(rng, n);
  kv_tensor values[3] = {F32(a, shape), F32(b, shape), F32(c, shape)};
  REQUIRE(kv_push(s.kv, keys, values, 3, 0) == KV_OK);  // key 5 gets a + b (two devices)
  std::vector<float> out5(n), out5b(n), out9(n);
  kv_tensor outs[3] = {F32(out5, shape), F32(out5b, shape), F32(out9, shape)};
  REQUIRE(kv_pull(s.kv, keys, outs, 3, 0) == KV_OK);
  REQUIRE(kv_wait_all(s.kv) == KV_OK);
  for (size_t i = 0; i < n; ++i) {
    const double sum = static_cast<double>(a[i]) + static_cast<double>(b[i]);
    CHECK(std::fabs(out5[i] - sum) <= 1e-5 * (1 + std::fabs(sum)));
    CHECK(out5b[i] == out5[i]);
    CHECK(out9[i] == c[i]);
  }

  int32_t dtype = 0, ndim = 0;
  int64_t got[4] = {0, 0, 0, 0};
  REQUIRE(kv_value_spec(s.kv, &keys[0], &dtype, &ndim, got, 4) == KV_OK);
  CHECK(dtype == KV_FLOAT32);
  CHECK(ndim == 2);
  CHECK(got[0] == shape[0]);
  CHECK(got[1] == shape[1]);

  // pushpull into the pushed buffer itself.
  std::vector<float> d = RandomFloats(rng, n);
  kv_tensor dv = F32(d, shape);
  const std::vector<float> d_before = d;
  REQUIRE(kv_pushpull(s.kv, &keys[2], &dv, &dv, 1, 0) == KV_OK);
  CHECK(d == d_before);  // ASSIGN: the stored value is the pushed one
}

TEST_CASE("C API: bad arguments give a code and a message naming the problem, changing nothing") {
  TestRng rng;
  INFO(rng.Describe());
  Store s;
  const std::vector<int64_t> shape = {2, 3};
  std::vector<float> v = RandomFloats(rng, 6);
  kv_key key = IntKey(3);
  kv_tensor value = F32(v, shape);
  REQUIRE(kv_init(s.kv, &key, &value, 1) == KV_OK);
  CHECK(kv_last_error_code() == KV_OK);
  CHECK(std::string(kv_last_error()).empty());

  // Second init.
  CHECK(kv_init(s.kv, &key, &value, 1) == KV_ALREADY_EXISTS);
  CHECK(std::string(kv_last_error()).find("3") != std::string::npos);
  // Unknown key.
  kv_key other = IntKey(4);
  CHECK(kv_push(s.kv, &other, &value, 1, 0) == KV_NOT_FOUND);
  CHECK(kv_last_error_code() == KV_NOT_FOUND);
  CHECK(std::string(kv_last_error()).find("4") != std::string::npos);
  // Shape mismatch names both shapes.
  std::vector<float> wrong(6, 1.0f);
  const std::vector<int64_t> wrong_shape = {3, 2};
  kv_tensor w = F32(wrong, wrong_shape);
  CHECK(kv_push(s.kv, &key, &w, 1, 0) == KV_INVALID_ARGUMENT);
  const std::string message = kv_last_error();
  INFO(message);
  CHECK(message.find("3") != std::string::npos);
  CHECK(message.find("2") != std::string::npos);
  // A bad dtype, rank, dimension, device, NULL data, NULL store, NULL keys.
  kv_tensor bad = value;
  bad.dtype = 99;
  CHECK(kv_push(s.kv, &key, &bad, 1, 0) == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("99") != std::string::npos);
  bad = value;
  bad.ndim = KV_MAX_NDIM + 1;
  CHECK(kv_push(s.kv, &key, &bad, 1, 0) == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("rank 33") != std::string::npos);
  const std::vector<int64_t> negative = {2, -3};
  bad = value;
  bad.shape = negative.data();
  CHECK(kv_push(s.kv, &key, &bad, 1, 0) == KV_INVALID_ARGUMENT);
  bad = value;
  bad.device_type = 7;
  CHECK(kv_push(s.kv, &key, &bad, 1, 0) == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("device_type 7") != std::string::npos);
  bad = value;
  bad.data = nullptr;
  CHECK(kv_push(s.kv, &key, &bad, 1, 0) == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("NULL") != std::string::npos);
  CHECK(kv_push(nullptr, &key, &value, 1, 0) == KV_INVALID_ARGUMENT);
  CHECK(kv_push(s.kv, nullptr, &value, 1, 0) == KV_INVALID_ARGUMENT);
  kv_store* none = reinterpret_cast<kv_store*>(&key);  // never read: type NULL fails first
  CHECK(kv_create(nullptr, &none) == KV_INVALID_ARGUMENT);
  CHECK(none == nullptr);
  CHECK(kv_create("nonsense", &none) == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("nonsense") != std::string::npos);
  // Mixing int and string keys.
  kv_key named{"w", 0};
  CHECK(kv_init(s.kv, &named, &value, 1) == KV_INVALID_ARGUMENT);

  // Nothing was applied: the value is still the initial one.
  std::vector<float> out(6);
  kv_tensor o = F32(out, shape);
  REQUIRE(kv_pull(s.kv, &key, &o, 1, 0) == KV_OK);
  CHECK(out == v);

  // Messages are per thread: another thread has none.
  CHECK(kv_push(s.kv, &other, &value, 1, 0) == KV_NOT_FOUND);
  std::string seen_there = "unset";
  int code_there = -1;
  std::thread([&] {
    seen_there = kv_last_error();
    code_there = kv_last_error_code();
  }).join();
  CHECK(seen_there.empty());
  CHECK(code_there == KV_OK);
  CHECK(kv_last_error_code() == KV_NOT_FOUND);
}

struct UpdaterLog {
  std::vector<std::string> keys;
};

// MXNet's _set_updater example: stored += input * 2.
void DoubleAdd(const kv_key* key, const kv_tensor* received, const kv_tensor* stored, void* user) {
  auto* log = static_cast<UpdaterLog*>(user);
  log->keys.push_back(key->str != nullptr ? key->str : std::to_string(key->id));
  int64_t n = 1;
  for (int32_t d = 0; d < stored->ndim; ++d) n *= stored->shape[d];
  const float* in = static_cast<const float*>(received->data);
  float* out = static_cast<float*>(stored->data);
  for (int64_t i = 0; i < n; ++i) out[i] += 2 * in[i];
}

TEST_CASE("C API: an updater callback with its user pointer, on string keys") {
  TestRng rng;
  INFO(rng.Describe());
  Store s;
  const std::vector<int64_t> shape = {2, 3};
  std::vector<float> init = RandomFloats(rng, 6), push = RandomFloats(rng, 6);
  kv_key key{"weight", 0};
  kv_tensor v = F32(init, shape);
  REQUIRE(kv_init(s.kv, &key, &v, 1) == KV_OK);
  UpdaterLog log;
  REQUIRE(kv_set_updater(s.kv, DoubleAdd, &log) == KV_OK);
  kv_tensor p = F32(push, shape);
  REQUIRE(kv_push(s.kv, &key, &p, 1, 0) == KV_OK);
  std::vector<float> out(6);
  kv_tensor o = F32(out, shape);
  REQUIRE(kv_pull(s.kv, &key, &o, 1, 0) == KV_OK);
  REQUIRE(log.keys == std::vector<std::string>{"weight"});
  for (int i = 0; i < 6; ++i) {
    const double want = static_cast<double>(init[i]) + 2.0 * static_cast<double>(push[i]);
    CHECK(std::fabs(out[i] - want) <= 1e-5 * (1 + std::fabs(want)));
  }
  // NULL is refused and the updater stays.
  CHECK(kv_set_updater(s.kv, nullptr, nullptr) == KV_INVALID_ARGUMENT);
  REQUIRE(kv_push(s.kv, &key, &p, 1, 0) == KV_OK);
  CHECK(log.keys.size() == 2);
}

std::vector<float> Dense(kv_row_sparse* value, const std::vector<int64_t>& shape) {
  std::vector<float> out(static_cast<size_t>(shape[0] * shape[1]), -1.0f);
  kv_tensor t = F32(out, shape);
  REQUIRE(kv_row_sparse_to_dense(value, &t) == KV_OK);
  return out;
}

TEST_CASE("C API: row_sparse_pull as in MXNet's examples") {
  Store s;
  const std::vector<int64_t> shape = {3, 3};
  std::vector<float> ones(9, 1.0f);
  const int64_t all_rows[3] = {0, 1, 2};
  kv_row_sparse* init = nullptr;
  REQUIRE(kv_row_sparse_new(KV_FLOAT32, shape.data(), 2, all_rows, 3, ones.data(), &init) == KV_OK);
  kv_key key{"3", 0};
  REQUIRE(kv_init_row_sparse(s.kv, &key, init) == KV_OK);
  kv_row_sparse_free(init);

  kv_row_sparse* out = nullptr;
  REQUIRE(kv_row_sparse_new(KV_FLOAT32, shape.data(), 2, nullptr, 0, nullptr, &out) == KV_OK);
  struct Case {
    std::vector<int64_t> ids;
    std::vector<int64_t> rows;  // expected row ids of the output
  };
  for (const Case& c : {Case{{0, 2}, {0, 2}}, Case{{2, 2}, {2}}, Case{{1, 0}, {0, 1}}}) {
    const int64_t* ids = c.ids.data();
    const int64_t count = static_cast<int64_t>(c.ids.size());
    REQUIRE(kv_row_sparse_pull(s.kv, &key, &out, &ids, &count, 1, 0) == KV_OK);
    REQUIRE(kv_wait_all(s.kv) == KV_OK);
    REQUIRE(kv_row_sparse_num_rows(out) == static_cast<int64_t>(c.rows.size()));
    CHECK(std::vector<int64_t>(kv_row_sparse_row_ids(out),
                               kv_row_sparse_row_ids(out) + kv_row_sparse_num_rows(out)) == c.rows);
    std::vector<float> dense = Dense(out, shape);
    for (int64_t r = 0; r < 3; ++r) {
      const bool listed = std::find(c.rows.begin(), c.rows.end(), r) != c.rows.end();
      for (int64_t col = 0; col < 3; ++col) CHECK(dense[r * 3 + col] == (listed ? 1.0f : 0.0f));
    }
  }
  CHECK(kv_row_sparse_dtype(out) == KV_FLOAT32);
  CHECK(kv_row_sparse_ndim(out) == 2);
  CHECK(kv_row_sparse_shape(out)[0] == 3);
  // An id outside the value, and a dense output of the wrong shape.
  const int64_t outside[1] = {3};
  const int64_t* ids = outside;
  const int64_t one = 1;
  CHECK(kv_row_sparse_pull(s.kv, &key, &out, &ids, &one, 1, 0) == KV_INVALID_ARGUMENT);
  std::vector<float> small(4);
  const std::vector<int64_t> small_shape = {2, 2};
  kv_tensor t = F32(small, small_shape);
  CHECK(kv_row_sparse_to_dense(out, &t) == KV_INVALID_ARGUMENT);
  // Rows outside the shape at creation.
  kv_row_sparse* bad = nullptr;
  CHECK(kv_row_sparse_new(KV_FLOAT32, shape.data(), 2, outside, 1, ones.data(), &bad) ==
        KV_INVALID_ARGUMENT);
  CHECK(bad == nullptr);
  kv_row_sparse_free(out);
}

TEST_CASE("C API: optimizers and compression from text") {
  TestRng rng;
  INFO(rng.Describe());
  Store s;
  const std::vector<int64_t> shape = {4};
  std::vector<float> w = RandomFloats(rng, 4), g = RandomFloats(rng, 4);
  kv_key key = IntKey(1);
  kv_tensor wv = F32(w, shape);
  REQUIRE(kv_init(s.kv, &key, &wv, 1) == KV_OK);
  const double lr = rng.Uniform(0.01, 0.5);
  const std::string params = "learning_rate=" + std::to_string(lr) + ", wd=0";
  REQUIRE(kv_set_optimizer(s.kv, "sgd", params.c_str()) == KV_OK);
  kv_tensor gv = F32(g, shape);
  std::vector<float> out(4);
  kv_tensor o = F32(out, shape);
  REQUIRE(kv_pushpull(s.kv, &key, &gv, &o, 1, 0) == KV_OK);
  const double used_lr = std::stod(std::to_string(lr));
  for (int i = 0; i < 4; ++i) {
    const double want = static_cast<double>(w[i]) - used_lr * static_cast<double>(g[i]);
    CHECK(std::fabs(out[i] - want) <= 1e-5 * (1 + std::fabs(want)));
  }
  CHECK(kv_set_optimizer(s.kv, "sgd", "beta1=0.9") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("beta1") != std::string::npos);
  CHECK(kv_set_optimizer(s.kv, "nosuch", "") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("nosuch") != std::string::npos);

  CHECK(kv_set_gradient_compression(s.kv, "type=2bit threshold=0.5") == KV_OK);
  CHECK(kv_set_gradient_compression(s.kv, "type=none") == KV_OK);
  CHECK(kv_set_gradient_compression(s.kv, "type=3bit") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("3bit") != std::string::npos);
  CHECK(kv_set_gradient_compression(s.kv, "type=2bit threshold=abc") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("abc") != std::string::npos);
  CHECK(kv_set_gradient_compression(s.kv, "threshold=0.5") == KV_INVALID_ARGUMENT);
  CHECK(kv_set_gradient_compression(s.kv, "kind=2bit") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("kind") != std::string::npos);

  // In process there are no servers: commands do nothing, checkpoints are refused.
  CHECK(kv_send_command_to_servers(s.kv, 16, "hello") == KV_OK);
  CHECK(kv_barrier(s.kv) == KV_OK);
  int dead = -1;
  CHECK(kv_num_dead_nodes(s.kv, KV_GROUP_ALL, 60, &dead) == KV_OK);
  CHECK(dead == 0);
  CHECK(kv_num_dead_nodes(s.kv, 9, 60, &dead) == KV_INVALID_ARGUMENT);
  CHECK(kv_checkpoint(s.kv, "ckpt") == KV_FAILED_PRECONDITION);
  CHECK(kv_api_version() == KV_C_API_VERSION);
  CHECK(std::string(kv_version()).find('.') != std::string::npos);
}

}  // namespace

TEST_CASE("C API: a table from text parameters, its rows against float64 sgd, and its errors") {
  TestRng rng;
  INFO(rng.Describe());
  Store s;
  const kv_key key = IntKey(7);
  const int64_t dim = rng.Int(1, 6);
  const std::string params = absl::StrCat("dim=", dim,
                                          " initializer=uniform low=-0.5 high=0.5 seed=3 "
                                          "optimizer=sgd lr=0.25 admit_after=1");
  REQUIRE(kv_init_table(s.kv, &key, params.c_str()) == KV_OK);
  // Rows start at the initializer's; each push steps the pushed rows by -lr * (sum of grads).
  std::vector<int64_t> ids = {5, -11, 5, 1LL << 40};
  std::vector<float> rows(ids.size() * dim);
  REQUIRE(kv_pull_rows(s.kv, &key, ids.data(), ids.size(), rows.data()) == KV_OK);
  std::map<int64_t, std::vector<double>> want;
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t j = 0; j < dim; ++j) {
      CHECK(rows[r * dim + j] >= -0.5f);
      CHECK(rows[r * dim + j] <= 0.5f);
    }
    want[ids[r]].assign(rows.begin() + r * dim, rows.begin() + (r + 1) * dim);
  }
  const std::vector<float> grads = RandomFloats(rng, ids.size() * dim);
  REQUIRE(kv_push_rows(s.kv, &key, ids.data(), ids.size(), grads.data()) == KV_OK);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t j = 0; j < dim; ++j) want[ids[r]][j] -= 0.25 * grads[r * dim + j];
  }
  REQUIRE(kv_pull_rows(s.kv, &key, ids.data(), ids.size(), rows.data()) == KV_OK);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t j = 0; j < dim; ++j) {
      CHECK(std::abs(rows[r * dim + j] - want[ids[r]][j]) < 1e-5);
    }
  }
  // Errors: a missing dim, an unknown field, a key that is no table, a second init.
  const kv_key other = IntKey(8);
  CHECK(kv_init_table(s.kv, &other, "optimizer=sgd") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("dim") != std::string::npos);
  CHECK(kv_init_table(s.kv, &other, "dim=4 momentum=0.9") == KV_INVALID_ARGUMENT);
  CHECK(std::string(kv_last_error()).find("momentum") != std::string::npos);
  CHECK(kv_pull_rows(s.kv, &other, ids.data(), ids.size(), rows.data()) == KV_NOT_FOUND);
  CHECK(std::string(kv_last_error()).find("8") != std::string::npos);
  CHECK(kv_init_table(s.kv, &key, params.c_str()) == KV_ALREADY_EXISTS);
  CHECK(kv_push_rows(s.kv, &key, nullptr, 2, grads.data()) == KV_INVALID_ARGUMENT);
}
