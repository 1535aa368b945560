// Every example of the seed documents (MXNet's KVStore tutorial and notebook, the Perl API
// reference, the C++ class reference), with its printed output asserted exactly.
#include <catch2/catch.hpp>
#include <sstream>
#include <vector>

#include "tests/conformance/store_under_test.h"

namespace kvstore::testing {
namespace {

const Shape kShape = {2, 3};

Tensor Ones() { return Tensor::Full(DType::kFloat32, kShape, 1); }
Tensor Zeros() { return Tensor::Zeros(DType::kFloat32, kShape); }
Tensor OnesTimes(double factor) { return Tensor::Full(DType::kFloat32, kShape, factor); }

// The printed form of a (2, 3) array filled with `v` (numpy's, as in the notebook).
std::string Filled(int v) {
  const std::string x = std::to_string(v) + ".";
  return "[[" + x + " " + x + " " + x + "]\n [" + x + " " + x + " " + x + "]]";
}

// The tutorial's updater: prints "update on key: N" and does stored += input * 2.
KVStore::Updater PrintingUpdater(std::ostringstream* log) {
  return [log](const Key& key, const Tensor& input, Tensor* stored) {
    *log << "update on key: " << key << "\n";
    for (int64_t i = 0; i < stored->num_elements(); ++i) {
      stored->SetFromDouble(i, stored->GetAsDouble(i) + input.GetAsDouble(i) * 2);
    }
  };
}

// MXNet's list of lists `[[ones on each of 4 devices]] * len(keys)` in the flat form of the C++
// API: each key repeated once per device, with one value (and output) per entry.
struct PerDevice {
  std::vector<Key> keys;
  std::vector<Tensor> values;
  std::vector<Tensor*> Outputs() {
    std::vector<Tensor*> outs;
    for (Tensor& t : values) outs.push_back(&t);
    return outs;
  }
};

PerDevice OnesPerDevice(const std::vector<Key>& keys, int devices) {
  PerDevice flat;
  for (const Key& key : keys) {
    for (int d = 0; d < devices; ++d) {
      flat.keys.push_back(key);
      flat.values.push_back(Ones());
    }
  }
  return flat;
}

TEST_CASE("Seeds: the tutorial, step by step, prints 2, 8, 4, 4, 6, 6, 3 and 11",
          "[seeds][tutorial]") {
  auto kv = NewStore();
  REQUIRE(kv->type() == GetStoreUnderTest().type);

  // kv.init(3, ones*2); kv.pull(3, out=a)
  REQUIRE(kv->Init(3, OnesTimes(2)).ok());
  Tensor a = Zeros();
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(a.ToString() == Filled(2));

  // kv.push(3, ones*8)
  REQUIRE(kv->Push(3, OnesTimes(8)).ok());
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(a.ToString() == Filled(8));

  // Four values (one per device) pushed to one key are summed first.
  const std::vector<Tensor> b = {Ones(), Ones(), Ones(), Ones()};
  REQUIRE(kv->Push(3, b).ok());
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(a.ToString() == Filled(4));

  if (!GetStoreUnderTest().function_updater) return;

  // kv._set_updater(update): pulling is unaffected; a push runs it once.
  std::ostringstream log;
  REQUIRE(kv->SetUpdater(PrintingUpdater(&log)).ok());
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(a.ToString() == Filled(4));
  REQUIRE(log.str().empty());
  REQUIRE(kv->Push(3, Ones()).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(log.str() == "update on key: 3\n");
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(a.ToString() == Filled(6));

  // Pull onto several devices with one call: b = [ones on each device]; kv.pull(3, out=b).
  std::vector<Tensor> devices = {Ones(), Ones(), Ones(), Ones()};
  std::vector<Tensor*> outs = {&devices[0], &devices[1], &devices[2], &devices[3]};
  REQUIRE(kv->Pull(3, outs).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(devices[1].ToString() == Filled(6));
  for (const Tensor& d : devices) REQUIRE(d.ToString() == Filled(6));

  // A list of keys on a single device: init ones, push ones, the updater makes 1 + 2 = 3.
  log.str("");
  const std::vector<Key> keys = {5, 7, 9};
  REQUIRE(kv->Init(keys, {Ones(), Ones(), Ones()}).ok());
  REQUIRE(kv->Push(keys, {Ones(), Ones(), Ones()}).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(log.str() == "update on key: 5\nupdate on key: 7\nupdate on key: 9\n");
  // b = [zeros]*3 is one array three times, as in Python.
  Tensor shared = Zeros();
  std::vector<Tensor> list = {shared, shared, shared};
  REQUIRE(kv->Pull(keys, {&list[0], &list[1], &list[2]}).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(list[1].ToString() == Filled(3));

  // Multiple devices: four ones per key sum to 4; the updater makes 3 + 4 * 2 = 11.
  log.str("");
  PerDevice per_device = OnesPerDevice(keys, 4);
  REQUIRE(kv->Push(per_device.keys, per_device.values).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(log.str() == "update on key: 5\nupdate on key: 7\nupdate on key: 9\n");
  REQUIRE(kv->Pull(per_device.keys, per_device.Outputs()).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(per_device.values[4 * 1 + 1].ToString() == Filled(11));  // b[1][1]
  for (const Tensor& t : per_device.values) REQUIRE(t.ToString() == Filled(11));
}

TEST_CASE("Seeds: the Perl reference's push and pull examples print 8, 4, 1, 4 and 2",
          "[seeds][perl]") {
  auto kv = NewStore();
  REQUIRE(kv->Init(3, OnesTimes(2)).ok());
  Tensor a = Zeros();

  SECTION("init then pull a single key prints 2") {
    REQUIRE(kv->Pull(3, &a).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(a.ToString() == Filled(2));
  }
  SECTION("pull into multiple devices prints 2") {
    std::vector<Tensor> b = {Ones(), Ones(), Ones(), Ones()};
    REQUIRE(kv->Pull(3, {&b[0], &b[1], &b[2], &b[3]}).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(b[1].ToString() == Filled(2));
  }
  SECTION("push a single pair prints 8, then four devices aggregate to 4") {
    REQUIRE(kv->Push(3, OnesTimes(8)).ok());
    REQUIRE(kv->Pull(3, &a).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(a.ToString() == Filled(8));
    REQUIRE(kv->Push(3, {Ones(), Ones(), Ones(), Ones()}).ok());
    REQUIRE(kv->Pull(3, &a).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(a.ToString() == Filled(4));
  }
  SECTION("a list of keys: pull prints 2; push of ones prints 1; four devices print 4") {
    const std::vector<Key> keys = {5, 7, 9};
    REQUIRE(kv->Init(keys, {OnesTimes(2), OnesTimes(2), OnesTimes(2)}).ok());
    std::vector<Tensor> b = {Zeros(), Zeros(), Zeros()};
    REQUIRE(kv->Pull(keys, {&b[0], &b[1], &b[2]}).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(b[1].ToString() == Filled(2));

    REQUIRE(kv->Push(keys, {Ones(), Ones(), Ones()}).ok());
    REQUIRE(kv->Pull(keys, {&b[0], &b[1], &b[2]}).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(b[1].ToString() == Filled(1));

    PerDevice devices = OnesPerDevice(keys, 4);
    REQUIRE(kv->Push(devices.keys, devices.values).ok());
    REQUIRE(kv->Pull(devices.keys, devices.Outputs()).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(devices.values[4 * 1 + 1].ToString() == Filled(4));  // b[1][1]
  }
}

TEST_CASE("Seeds: the Perl _set_updater example prints update on key: 3 and 6", "[seeds][perl]") {
  if (!GetStoreUnderTest().function_updater) return;
  auto kv = NewStore();
  REQUIRE(kv->Init(3, OnesTimes(4)).ok());
  std::ostringstream log;
  REQUIRE(kv->SetUpdater(PrintingUpdater(&log)).ok());
  Tensor a = Zeros();
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(a.ToString() == Filled(4));
  REQUIRE(kv->Push(3, Ones()).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(log.str() == "update on key: 3\n");
  REQUIRE(kv->Pull(3, &a).ok());
  REQUIRE(kv->WaitAll().ok());
  REQUIRE(a.ToString() == Filled(6));
}

TEST_CASE("Seeds: the C++ reference's contracts", "[seeds][cpp]") {
  auto kv = NewStore();
  SECTION("a key repeated in one Push is aggregated before the update") {
    REQUIRE(kv->Init({1, 2}, {OnesTimes(0.5), OnesTimes(0.5)}).ok());
    REQUIRE(kv->Push({1, 2, 1}, {OnesTimes(3), OnesTimes(5), OnesTimes(4)}).ok());
    Tensor x = Zeros(), y = Zeros();
    REQUIRE(kv->Pull({1, 2}, {&x, &y}).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(x.ToString() == Filled(7));
    REQUIRE(y.ToString() == Filled(5));
  }
  SECTION("string keys work like int keys") {
    REQUIRE(kv->Init({"weight", "bias"}, {OnesTimes(2), OnesTimes(3)}).ok());
    REQUIRE(kv->Push("bias", {Ones(), OnesTimes(6)}).ok());
    Tensor w = Zeros(), b = Zeros();
    REQUIRE(kv->Pull({"weight", "bias"}, {&w, &b}).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(w.ToString() == Filled(2));
    REQUIRE(b.ToString() == Filled(7));
  }
  SECTION("set_updater: y is updated by h(x, &y)") {
    if (!GetStoreUnderTest().function_updater) return;
    REQUIRE(kv->Init(0, OnesTimes(10)).ok());
    REQUIRE(kv->SetUpdater([](const Key&, const Tensor& x, Tensor* y) {
                for (int64_t i = 0; i < y->num_elements(); ++i) {
                  y->SetFromDouble(i, y->GetAsDouble(i) - x.GetAsDouble(i));
                }
              }).ok());
    REQUIRE(kv->Push(0, OnesTimes(3)).ok());
    Tensor out = Zeros();
    REQUIRE(kv->Pull(0, &out).ok());
    REQUIRE(kv->WaitAll().ok());
    REQUIRE(out.ToString() == Filled(7));
  }
  SECTION("a single worker's rank, group size, barrier and dead nodes") {
    if (GetStoreUnderTest().type.rfind("dist", 0) == 0) return;
    REQUIRE(kv->rank() == 0);
    REQUIRE(kv->num_workers() == 1);
    REQUIRE(kv->Barrier().ok());
    REQUIRE(kv->NumDeadNodes(NodeGroup::kAll).value() == 0);
  }
}

}  // namespace
}  // namespace kvstore::testing
