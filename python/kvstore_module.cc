// _kvstore: the pybind11 extension behind the `kvstore` Python package (python/kvstore/).
//
// It binds one class, _Store, over the SDK's KVStore (client/kvstore.h) with flat arguments:
// lists of keys (int or str) and lists of values, one entry per (key, device) pair. The Python
// package turns MXNet's call forms (a key or a list, a value, a list per device) into these
// lists and documents the API; this file only converts and calls.
//
// Values cross without a copy: every array is taken through its `__dlpack__` (NumPy, PyTorch,
// CuPy, JAX...) and wrapped as a Tensor that keeps the producer's buffer alive (common/dlpack.h).
// Only a value that cannot be exported in place (read-only, strided, a list of numbers) is
// copied once into a fresh contiguous NumPy array; an output must be exportable as it is.
//
// Blocking: every call that may wait (network, barriers, the job's other workers) runs with the
// GIL released on a helper thread (HelperThreads, reused between calls) while the calling thread
// waits in slices of 100 ms and checks for signals, so Ctrl-C raises KeyboardInterrupt within a
// slice. The interrupted operation goes on in the background: its thread keeps the store and the
// values' buffers alive until it ends. In-process stores ("local", "device") finish each operation
// inside the call and run it on the calling thread with the GIL released (an updater written in
// Python takes the GIL back).
//
// Errors: a non-OK absl::Status becomes a StatusError carrying the code and the message; the
// package maps codes to Python exception classes (kvstore/_errors.py) through
// _set_error_classes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/kvstore.h"
#include "common/dlpack.h"
#include "common/key.h"
#include "common/optimizer_config.h"
#include "common/row_sparse.h"
#include "common/table_wire.h"
#include "common/tensor.h"

namespace py = pybind11;

namespace kvstore {
namespace python {
namespace {

// StatusError: a non-OK status on its way to Python.
struct StatusError {
  absl::StatusCode code;
  std::string message;
};

// The exception class per status code, set by the package at import.
py::dict& ErrorClasses() {
  static py::dict* classes = new py::dict();  // Leaked: lives as long as the interpreter.
  return *classes;
}

// The package's function that waits for a CUDA array's producer (set at import).
py::object& CudaReadyHook() {
  static py::object* hook = new py::object();  // Leaked: lives as long as the interpreter.
  return *hook;
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) {
    throw StatusError{status.code(), std::string(status.message())};
  }
}

constexpr absl::Duration kSignalSlice = absl::Milliseconds(100);
// How long closing a store waits for the calls still running on its helper threads.
constexpr absl::Duration kCloseWait = absl::Seconds(60);

// Background: an operation running on a helper thread, and its result once `done`.
struct Background {
  absl::Notification done;
  absl::Status status;
};

// AwaitInterruptibly waits for `op` in slices with the GIL released, checking for signals
// between them: a pending KeyboardInterrupt (or any exception a signal handler raises) is
// thrown at once and `op` goes on in the background.
absl::Status AwaitInterruptibly(const std::shared_ptr<Background>& op) {
  while (true) {
    bool done;
    {
      py::gil_scoped_release release;
      done = op->done.WaitForNotificationWithTimeout(kSignalSlice);
    }
    if (done) return op->status;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// HelperThreads: the threads that run a distributed store's blocking calls. A call takes an
// idle thread when there is one and starts a new one otherwise, so calls from several Python
// threads (or one left running by Ctrl-C) never queue behind each other, and a steady stream
// of calls pays no thread start each. A thread idle for kIdleExit ends. Thread-safe; the
// threads keep the object alive.
class HelperThreads : public std::enable_shared_from_this<HelperThreads> {
 public:
  void Submit(std::function<void()> task) {
    bool start;
    {
      absl::MutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
      start = idle_ < static_cast<int>(tasks_.size());
      wake_.Signal();
    }
    if (start) std::thread([self = shared_from_this()]() { self->Loop(); }).detach();
  }

  // WaitIdle waits up to `timeout` until no task is queued or running; false when some still
  // are. A store's end waits here so that no task's captures (buffers whose deleters take the
  // GIL) go after the interpreter has begun to shut down.
  bool WaitIdle(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto idle = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return tasks_.empty() && running_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

 private:
  static constexpr absl::Duration kIdleExit = absl::Seconds(10);

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      while (tasks_.empty()) {
        ++idle_;
        bool timed_out = wake_.WaitWithTimeout(&mu_, kIdleExit);
        --idle_;
        if (timed_out && tasks_.empty()) return;
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
      mu_.Unlock();
      task();
      task = nullptr;  // Its captures go before the next wait.
      mu_.Lock();
      --running_;
    }
  }

  absl::Mutex mu_;
  absl::CondVar wake_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

// RunBlocking runs `fn` with the GIL released. In-process stores run it on the calling thread;
// distributed stores on one of `helpers` while the caller waits with AwaitInterruptibly.
// `*started` (when given) receives the operation, so that a caller can resume waiting for it
// after an interrupt. `fn` must capture everything by value: an interrupted `fn` finishes in
// the background, keeping what it captured alive.
template <typename Fn>
absl::Status RunBlocking(HelperThreads* helpers, Fn fn,
                         std::shared_ptr<Background>* started = nullptr) {
  if (helpers == nullptr) {
    py::gil_scoped_release release;
    return fn();
  }
  auto op = std::make_shared<Background>();
  if (started != nullptr) *started = op;
  // std::function needs a copyable callable: the lambda is held through a shared_ptr.
  auto callable = std::make_shared<Fn>(std::move(fn));
  helpers->Submit([op, callable]() mutable {
    op->status = (*callable)();
    callable.reset();  // The captures (the values' buffers) go before Notify.
    op->done.Notify();
  });
  return AwaitInterruptibly(op);
}

Key ToKey(const py::handle& key) {
  if (py::isinstance<py::str>(key)) return Key(key.cast<std::string>());
  if (py::isinstance<py::bool_>(key) || !py::isinstance<py::int_>(key)) {
    throw StatusError{absl::StatusCode::kInvalidArgument,
                      absl::StrCat("a key is an int or a str, not ",
                                   std::string(py::str(py::type::of(key).attr("__name__"))))};
  }
  return Key(key.cast<int64_t>());
}

std::vector<Key> ToKeys(const py::list& keys) {
  std::vector<Key> out;
  out.reserve(keys.size());
  for (const py::handle& key : keys) out.push_back(ToKey(key));
  return out;
}

py::object KeyToPython(const Key& key) {
  if (key.is_int()) return py::int_(key.int_key());
  return py::str(key.str_key());
}

// TryDLPack exports `obj` through __dlpack__ and wraps it; the status says why it could not.
absl::StatusOr<Tensor> TryDLPack(const py::handle& obj) {
  if (!py::hasattr(obj, "__dlpack__")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", std::string(py::str(py::type::of(obj).attr("__name__"))),
        " has no __dlpack__ (pass a NumPy array, a PyTorch tensor or another DLPack array)"));
  }
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // PyTorch refuses tensors that require grad; their data is what a store holds.
    if (!py::hasattr(obj, "detach")) {
      return absl::InvalidArgumentError(absl::StrCat("__dlpack__ failed: ", e.what()));
    }
    try {
      capsule = obj.attr("detach")().attr("__dlpack__")();
    } catch (py::error_already_set& e2) {
      return absl::InvalidArgumentError(absl::StrCat("__dlpack__ failed: ", e2.what()));
    }
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    return absl::InvalidArgumentError("__dlpack__ returned no \"dltensor\" capsule");
  }
  absl::StatusOr<Tensor> tensor = FromDLPack(managed);
  if (!tensor.ok()) return tensor.status();  // The capsule still owns `managed`.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  return tensor;
}

// ToTensor wraps a value to push (`output` false) or an output to write (`output` true).
Tensor ToTensor(const py::handle& obj, bool output, const Key& key) {
  absl::StatusOr<Tensor> tensor = TryDLPack(obj);
  if (tensor.ok()) {
    // The SDK reads and writes CUDA memory on its own streams: the producer's queued work on
    // the array must be done first (DLPack's stream argument cannot name the SDK's streams).
    if (!tensor->device().is_cpu() && CudaReadyHook()) CudaReadyHook()(obj);
    return *std::move(tensor);
  }
  if (!output) {
    // One contiguous copy for what cannot be lent as it is (read-only, strided, lists).
    py::object copy;
    try {
      copy = py::module_::import("numpy").attr("array")(obj, py::arg("copy") = true,
                                                        py::arg("order") = "C");
    } catch (py::error_already_set&) {
      copy = py::object();
    }
    if (copy) {
      absl::StatusOr<Tensor> copied = TryDLPack(copy);
      if (copied.ok()) return *std::move(copied);
      tensor = copied.status();
    }
  }
  throw StatusError{absl::StatusCode::kInvalidArgument,
                    absl::StrCat(output ? "pull" : "push", ": key ", key.Quoted(), ": ",
                                 output ? "the output must be a writable, C-contiguous array "
                                          "of float32, float16, bfloat16, float64, int32 or "
                                          "int64 with __dlpack__: "
                                        : "the value cannot be read as an array of float32, "
                                          "float16, bfloat16, float64, int32 or int64: ",
                                 tensor.status().message())};
}

std::vector<Tensor> ToTensors(const py::list& objs, const std::vector<Key>& keys, bool output) {
  if (objs.size() != keys.size()) {
    throw StatusError{
        absl::StatusCode::kInvalidArgument,
        absl::StrCat(keys.size(), " keys but ", objs.size(), output ? " outputs" : " values")};
  }
  std::vector<Tensor> out;
  out.reserve(objs.size());
  for (size_t i = 0; i < keys.size(); ++i) out.push_back(ToTensor(objs[i], output, keys[i]));
  return out;
}

std::vector<Tensor*> Pointers(std::vector<Tensor>& tensors) {  // NOLINT(runtime/references)
  std::vector<Tensor*> out;
  out.reserve(tensors.size());
  for (Tensor& t : tensors) out.push_back(&t);
  return out;
}

// ToArray returns a NumPy array (a PyTorch tensor for bfloat16) viewing `tensor`'s buffer and
// keeping it alive: what an updater written in Python receives.
py::object ToArray(const Tensor& tensor) {
  absl::StatusOr<DLManagedTensor*> managed = ToDLPack(tensor);
  ThrowIfError(managed.status());
  py::capsule capsule(*managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  });
  if (tensor.dtype() == DType::kBFloat16 || !tensor.device().is_cpu()) {
    return py::module_::import("torch.utils.dlpack").attr("from_dlpack")(capsule);
  }
  const char* format = "f";
  switch (tensor.dtype()) {
    case DType::kFloat32:
      format = "float32";
      break;
    case DType::kFloat16:
      format = "float16";
      break;
    case DType::kFloat64:
      format = "float64";
      break;
    case DType::kInt32:
      format = "int32";
      break;
    case DType::kInt64:
      format = "int64";
      break;
    case DType::kBFloat16:
      break;
  }
  // A NumPy array over the buffer whose base keeps a handle of the Tensor.
  auto* handle = new Tensor(tensor);
  py::capsule owner(handle, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(py::dtype(format), tensor.shape(), {}, tensor.data(), owner);
}

template <typename T>
std::optional<T> Opt(const py::dict& d, const char* name) {
  if (!d.contains(name)) return std::nullopt;
  py::object v = d[name];
  if (v.is_none()) return std::nullopt;
  return v.cast<T>();
}

// ToOptimizerConfig reads the dict the package builds from keyword hyper-parameters.
OptimizerConfig ToOptimizerConfig(const std::string& name, const py::dict& p) {
  OptimizerConfig c;
  c.name = name;
  c.learning_rate = Opt<double>(p, "learning_rate");
  if (auto v = Opt<double>(p, "wd")) c.wd = *v;
  if (auto v = Opt<double>(p, "rescale_grad")) c.rescale_grad = *v;
  if (auto v = Opt<double>(p, "clip_gradient")) c.clip_gradient = *v;
  c.momentum = Opt<double>(p, "momentum");
  c.beta1 = Opt<double>(p, "beta1");
  c.beta2 = Opt<double>(p, "beta2");
  c.epsilon = Opt<double>(p, "epsilon");
  c.rho = Opt<double>(p, "rho");
  c.centered = Opt<bool>(p, "centered");
  c.clip_weights = Opt<double>(p, "clip_weights");
  c.schedule_decay = Opt<double>(p, "schedule_decay");
  c.lamda1 = Opt<double>(p, "lamda1");
  c.beta = Opt<double>(p, "beta");
  c.wd_lh = Opt<double>(p, "wd_lh");
  c.eta = Opt<double>(p, "eta");
  c.lower_bound = Opt<double>(p, "lower_bound");
  c.upper_bound = Opt<double>(p, "upper_bound");
  c.bias_correction = Opt<bool>(p, "bias_correction");
  c.nesterov = Opt<bool>(p, "nesterov");
  if (auto v = Opt<bool>(p, "multi_precision")) c.multi_precision = *v;
  if (auto v = Opt<std::map<std::string, double>>(p, "lr_mult")) c.lr_mult = *v;
  if (auto v = Opt<std::map<std::string, double>>(p, "wd_mult")) c.wd_mult = *v;
  if (auto v = Opt<std::string>(p, "key_prefix")) c.key_prefix = *v;
  if (auto v = Opt<bool>(p, "keep_state")) c.keep_state = *v;
  if (p.contains("lr_scheduler") && !p["lr_scheduler"].is_none()) {
    py::dict s = p["lr_scheduler"];
    LrScheduleConfig& l = c.lr_scheduler;
    if (auto v = Opt<std::string>(s, "type")) l.type = *v;
    if (auto v = Opt<int64_t>(s, "step")) l.step = *v;
    if (auto v = Opt<std::vector<int64_t>>(s, "steps")) l.steps = *v;
    if (auto v = Opt<double>(s, "factor")) l.factor = *v;
    if (auto v = Opt<double>(s, "stop_factor_lr")) l.stop_factor_lr = *v;
    if (auto v = Opt<int64_t>(s, "max_update")) l.max_update = *v;
    if (auto v = Opt<double>(s, "final_lr")) l.final_lr = *v;
    if (auto v = Opt<double>(s, "pwr")) l.pwr = *v;
    if (auto v = Opt<int64_t>(s, "warmup_steps")) l.warmup_steps = *v;
    if (auto v = Opt<double>(s, "warmup_begin_lr")) l.warmup_begin_lr = *v;
    if (auto v = Opt<std::string>(s, "warmup_mode")) l.warmup_mode = *v;
  }
  return c;
}

// ToRowSparse makes the row-sparse value (shape, row_ids, data) of `key` for `op`; the rows
// `data` (a CPU array) are lent, not copied, as a dense value's are.
RowSparse ToRowSparse(const Key& key, const py::handle& data, const std::vector<int64_t>& row_ids,
                      const std::vector<int64_t>& shape, absl::string_view op) {
  Tensor rows = ToTensor(data, /*output=*/false, key);
  absl::StatusOr<RowSparse> value = RowSparse::Create(shape, row_ids, std::move(rows));
  if (!value.ok()) {
    ThrowIfError(absl::Status(value.status().code(), absl::StrCat(op, ": key ", key.Quoted(), ": ",
                                                                  value.status().message())));
  }
  return *std::move(value);
}

// Store: one KVStore and the values of its operations still in flight (block=False).
class Store {
 public:
  explicit Store(const std::string& type) {
    if (type.rfind("dist", 0) == 0) helpers_ = std::make_shared<HelperThreads>();
    auto holder = std::make_shared<std::unique_ptr<KVStore>>();
    auto status = std::make_shared<absl::Status>();
    ThrowIfError(RunBlocking(helpers_.get(), [type, holder]() -> absl::Status {
      absl::StatusOr<std::unique_ptr<KVStore>> store = KVStore::Create(type);
      if (!store.ok()) return store.status();
      *holder = *std::move(store);
      return absl::OkStatus();
    }));
    store_ = std::shared_ptr<KVStore>(std::move(*holder));
  }

  // The store goes with the GIL released: a distributed store's destructor waits for its
  // operations, whose values' buffers (NumPy's DLPack deleters) take the GIL to go.
  ~Store() { Close(); }

  // Close ends the store now (a distributed worker leaves its job as at the end of a program);
  // later calls raise FailedPrecondition. Calls still running on helper threads keep it until
  // they end; Close waits for them up to kCloseWait (they are bounded by the SDK's deadlines).
  void Close() {
    std::shared_ptr<KVStore> store = std::move(store_);
    store_.reset();
    {
      absl::MutexLock lock(&mu_);
      held_.clear();
    }
    py::gil_scoped_release release;
    store.reset();
    if (helpers_ != nullptr && !helpers_->WaitIdle(kCloseWait)) {
      std::fprintf(stderr, "kvstore: a store closed with calls still running after %s\n",
                   absl::FormatDuration(kCloseWait).c_str());
    }
  }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Live returns the store; FailedPrecondition once it is closed.
  const std::shared_ptr<KVStore>& Live() const {
    if (store_ == nullptr) {
      ThrowIfError(absl::FailedPreconditionError("the store is closed (KVStore.close())"));
    }
    return store_;
  }

  std::string type() const { return Live()->type(); }
  int rank() const { return Live()->rank(); }
  int num_workers() const { return Live()->num_workers(); }

  void Init(const py::list& keys, const py::list& values) {
    std::vector<Key> k = ToKeys(keys);
    std::vector<Tensor> v = ToTensors(values, k, /*output=*/false);
    Run([store = Live(), k, v]() { return store->Init(k, v); });
  }

  void Push(const py::list& keys, const py::list& values, int priority, bool block) {
    std::vector<Key> k = ToKeys(keys);
    auto v = std::make_shared<std::vector<Tensor>>(ToTensors(values, k, /*output=*/false));
    Run([store = Live(), k, v, priority, block]() {
      absl::Status s = store->Push(k, *v, priority);
      if (s.ok() && block) s = store->Wait(k);
      return s;
    });
    if (!block) Hold(k, std::move(v));
  }

  void Pull(const py::list& keys, const py::list& outs, int priority, bool block) {
    std::vector<Key> k = ToKeys(keys);
    // The store writes through pointers to these handles until the pull completes: they live
    // on the heap, held by the call and, with block=False, until wait.
    auto o = std::make_shared<std::vector<Tensor>>(ToTensors(outs, k, /*output=*/true));
    Run([store = Live(), k, o, priority, block]() {
      absl::Status s = store->Pull(k, Pointers(*o), priority);
      if (s.ok() && block) s = store->Wait(k);
      return s;
    });
    if (!block) Hold(k, std::move(o));
  }

  void PushPull(const py::list& keys, const py::list& values, const py::list& outs, int priority,
                bool block) {
    std::vector<Key> k = ToKeys(keys);
    auto v = std::make_shared<std::vector<Tensor>>(ToTensors(values, k, /*output=*/false));
    auto o = std::make_shared<std::vector<Tensor>>(ToTensors(outs, k, /*output=*/true));
    Run([store = Live(), k, v, o, priority, block]() {
      absl::Status s = store->PushPull(k, *v, Pointers(*o), priority);
      if (s.ok() && block) s = store->Wait(k);
      return s;
    });
    if (!block) {
      Hold(k, std::move(v));
      Hold(k, std::move(o));
    }
  }

  // Spec returns (dtype name, shape) of the value stored under `key`: what the package
  // converts values and outputs of another dtype to and from.
  std::pair<std::string, std::vector<int64_t>> Spec(const py::handle& key) {
    absl::StatusOr<std::pair<DType, Shape>> spec = Live()->ValueSpec(ToKey(key));
    ThrowIfError(spec.status());
    return {std::string(DTypeName(spec->first)), spec->second};
  }

  // InitTable makes table `key` (docs/tables.md) from the dict the package builds.
  void InitTable(const py::handle& key, const py::dict& c) {
    const Key k = ToKey(key);
    TableConfig config;
    config.dim = c["dim"].cast<int64_t>();
    const std::string what = absl::StrCat("init_table: key ", k.Quoted());
    absl::StatusOr<RowInitializer::Kind> init =
        InitializerKind(c["initializer"].cast<std::string>(), what);
    ThrowIfError(init.status());
    config.initializer.kind = *init;
    config.initializer.a = c["init_a"].cast<double>();
    config.initializer.b = c["init_b"].cast<double>();
    config.initializer.seed = c["seed"].cast<uint64_t>();
    RowOptimizer& o = config.optimizer;
    absl::StatusOr<RowOptimizer::Kind> kind =
        OptimizerKind(c["optimizer"].cast<std::string>(), what);
    ThrowIfError(kind.status());
    o.kind = *kind;
    o.lr = c["lr"].cast<double>();
    o.wd = c["wd"].cast<double>();
    o.rescale_grad = c["rescale_grad"].cast<double>();
    o.clip_gradient = c["clip_gradient"].cast<double>();
    o.beta1 = c["beta1"].cast<double>();
    o.beta2 = c["beta2"].cast<double>();
    o.epsilon = c["epsilon"].cast<double>();
    config.admit_after = c["admit_after"].cast<int64_t>();
    config.evict_unseen_rounds = c["evict_unseen_rounds"].cast<int64_t>();
    config.max_rows = c["max_rows"].cast<int64_t>();
    config.evict_over_budget = c["evict_over_budget"].cast<bool>();
    config.max_bytes = c["max_bytes"].cast<int64_t>();
    config.evict_unseen_seconds = c["evict_unseen_seconds"].cast<double>();
    Run([store = Live(), k, config]() { return store->InitTable(k, config); });
  }

  // PullRows writes the rows of `ids` (a 1-D int64 CPU array) into `out` ((n, dim) float32).
  void PullRows(const py::handle& key, const py::handle& ids, const py::handle& out) {
    const Key k = ToKey(key);
    const Tensor i = ToIds(k, ids, "pull_rows");
    Tensor o = ToTensor(out, /*output=*/true, k);
    Run([store = Live(), k, i, o]() mutable {
      return store->PullRows(k, absl::MakeConstSpan(i.data_as<int64_t>(), i.num_elements()), &o);
    });
  }

  // PushRows pushes `grads` ((n, dim) float32) for the rows of `ids` (1-D int64).
  void PushRows(const py::handle& key, const py::handle& ids, const py::handle& grads) {
    const Key k = ToKey(key);
    const Tensor i = ToIds(k, ids, "push_rows");
    const Tensor g = ToTensor(grads, /*output=*/false, k);
    Run([store = Live(), k, i, g]() {
      return store->PushRows(k, absl::MakeConstSpan(i.data_as<int64_t>(), i.num_elements()), g);
    });
  }

  // InitRowSparse stores the row-sparse value (shape, row_ids, data) under `key`.
  void InitRowSparse(const py::handle& key, const py::handle& data,
                     const std::vector<int64_t>& row_ids, const std::vector<int64_t>& shape) {
    const Key k = ToKey(key);
    RowSparse value = ToRowSparse(k, data, row_ids, shape, "init");
    Run([store = Live(), k, value]() { return store->Init(k, value); });
  }

  // PushRowSparse pushes row-sparse values: values[i] is (data, row_ids, shape) for keys[i];
  // only the listed rows travel. With block=False the rows are held until wait.
  void PushRowSparse(const py::list& keys, const py::list& values, int priority, bool block) {
    std::vector<Key> k = ToKeys(keys);
    if (values.size() != k.size()) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat(k.size(), " keys but ", values.size(), " row-sparse values")));
    }
    auto v = std::make_shared<std::vector<RowSparse>>();
    for (size_t i = 0; i < k.size(); ++i) {
      auto parts = values[i].cast<py::tuple>();
      v->push_back(ToRowSparse(k[i], parts[0], parts[1].cast<std::vector<int64_t>>(),
                               parts[2].cast<std::vector<int64_t>>(), "push"));
    }
    Run([store = Live(), k, v, priority, block]() {
      absl::Status s = store->Push(k, *v, priority);
      if (s.ok() && block) s = store->Wait(k);
      return s;
    });
    if (!block) {
      auto rows = std::make_shared<std::vector<Tensor>>();
      for (const RowSparse& r : *v) rows->push_back(r.data());
      Hold(k, std::move(rows));
    }
  }

  // RowSparsePull pulls the rows `row_ids[i]` of keys[i] in the stored dtype and shape and
  // returns, per key, (ids, rows): the ids sorted without duplicates as an int64 array, and
  // their rows as an array of shape (len(ids), shape[1:]...). Blocks until they are in place.
  py::list RowSparsePull(const py::list& keys, const std::vector<std::vector<int64_t>>& row_ids,
                         int priority) {
    std::vector<Key> k = ToKeys(keys);
    if (row_ids.size() != k.size()) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "row_sparse_pull: ", k.size(), " outputs but ", row_ids.size(), " row_ids")));
    }
    auto rsp = std::make_shared<std::vector<RowSparse>>();
    for (const Key& key : k) {
      absl::StatusOr<std::pair<DType, Shape>> spec = Live()->ValueSpec(key);
      ThrowIfError(spec.status());
      if (spec->second.empty()) {
        ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
            "row_sparse_pull: key ", key.Quoted(), " holds a scalar, which has no rows")));
      }
      rsp->push_back(RowSparse::Empty(spec->first, spec->second));
    }
    Run([store = Live(), k, rsp, row_ids, priority]() {
      std::vector<RowSparse*> ptrs;
      for (RowSparse& r : *rsp) ptrs.push_back(&r);
      absl::Status s = store->RowSparsePull(k, ptrs, row_ids, priority);
      if (s.ok()) s = store->Wait(k);
      return s;
    });
    py::list out;
    for (const RowSparse& r : *rsp) {
      py::array_t<int64_t> ids(static_cast<py::ssize_t>(r.row_ids().size()));
      std::copy(r.row_ids().begin(), r.row_ids().end(), ids.mutable_data());
      out.append(py::make_tuple(ids, ToArray(r.data())));
    }
    return out;
  }

  // Wait blocks until the operations on `keys` completed and lets their values go.
  void Wait(const py::list& keys) {
    std::vector<Key> k = ToKeys(keys);
    Run([store = Live(), k]() { return store->Wait(k); });
    absl::MutexLock lock(&mu_);
    for (const Key& key : k) held_.erase(key);
  }

  void WaitAll() {
    Run([store = Live()]() { return store->WaitAll(); });
    absl::MutexLock lock(&mu_);
    held_.clear();
  }

  // Barrier: a barrier interrupted by Ctrl-C stays pending at the scheduler; the next call
  // resumes waiting for it instead of entering the barrier a second time.
  void Barrier() {
    if (pending_barrier_ != nullptr) {
      std::shared_ptr<Background> op = pending_barrier_;
      absl::Status status = AwaitInterruptibly(op);
      pending_barrier_.reset();
      ThrowIfError(status);
      return;
    }
    std::shared_ptr<Background> op;
    try {
      ThrowIfError(RunBlocking(
          helpers_.get(), [store = Live()]() { return store->Barrier(); }, &op));
    } catch (py::error_already_set&) {
      if (op != nullptr && !op->done.HasBeenNotified()) pending_barrier_ = op;
      throw;
    }
  }

  // SetUpdater installs `fn(key, input, stored)`; `stored` is modified in place. An exception
  // it raises is raised again by the push that called it.
  void SetUpdater(py::object fn) {
    auto error = updater_error_;
    // The function may be released on any thread (with the store, or when replaced).
    std::shared_ptr<py::object> holder(new py::object(std::move(fn)), [](py::object* f) {
      py::gil_scoped_acquire gil;
      delete f;
    });
    KVStore::Updater updater = [holder, error](const Key& key, const Tensor& received,
                                               Tensor* stored) {
      py::gil_scoped_acquire gil;
      try {
        (*holder)(KeyToPython(key), ToArray(received), ToArray(*stored));
      } catch (py::error_already_set& e) {
        if (!error->has_value()) *error = std::move(e);
      } catch (const StatusError& e) {
        if (!error->has_value()) {
          PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
          *error = py::error_already_set();
        }
      }
    };
    ThrowIfError(Live()->SetUpdater(std::move(updater)));
  }

  void SetOptimizer(const std::string& name, const py::dict& params) {
    OptimizerConfig config = ToOptimizerConfig(name, params);
    Run([store = Live(), config]() { return store->SetOptimizer(config); });
  }

  void SetGradientCompression(const std::string& type, std::optional<double> threshold) {
    GradientCompression params;
    params.type = type;
    params.threshold = threshold;
    ThrowIfError(Live()->SetGradientCompression(params));
  }

  void SaveOptimizerStates(const std::string& path) {
    Run([store = Live(), path]() { return store->SaveOptimizerStates(path); });
  }
  void LoadOptimizerStates(const std::string& path) {
    Run([store = Live(), path]() { return store->LoadOptimizerStates(path); });
  }
  void Checkpoint(const std::string& dir) {
    Run([store = Live(), dir]() { return store->Checkpoint(dir); });
  }
  void SendCommandToServers(int head, const std::string& body) {
    Run([store = Live(), head, body]() { return store->SendCommandToServers(head, body); });
  }

  int NumDeadNodes(int group, double timeout_s) {
    if (group != 1 && group != 2 && group != 4 && group != 6 && group != 7) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "num_dead_node: group ", group,
          " is none of 1 (scheduler), 2 (servers), 4 (workers), 6 (servers and workers), "
          "7 (all)")));
    }
    auto result = std::make_shared<int>(0);
    Run([store = Live(), group, timeout_s, result]() -> absl::Status {
      absl::StatusOr<int> n =
          store->NumDeadNodes(static_cast<NodeGroup>(group), absl::Seconds(timeout_s));
      if (!n.ok()) return n.status();
      *result = *n;
      return absl::OkStatus();
    });
    return *result;
  }

  // BenchPush times `iterations` blocking pushes of `value` into `key` from C++ (Push and
  // Wait, as the package's blocking push does), for the comparison in tests/bench/pybench.py.
  // Returns the seconds of each push.
  std::vector<double> BenchPush(const py::object& key, const py::object& value, int iterations) {
    Key k = ToKey(key);
    Tensor v = ToTensor(value, /*output=*/false, k);
    auto seconds = std::make_shared<std::vector<double>>();
    Run([store = Live(), k, v, iterations, seconds]() {
      for (int i = 0; i < iterations; ++i) {
        absl::Time start = absl::Now();
        absl::Status s = store->Push(k, v);
        if (s.ok()) s = store->Wait(absl::MakeConstSpan(&k, 1));
        if (!s.ok()) return s;
        seconds->push_back(absl::ToDoubleSeconds(absl::Now() - start));
      }
      return absl::OkStatus();
    });
    return *seconds;
  }

 private:
  template <typename Fn>
  void Run(Fn fn) {
    absl::Status status = RunBlocking(helpers_.get(), std::move(fn));
    if (updater_error_->has_value()) {
      py::error_already_set e = std::move(**updater_error_);
      updater_error_->reset();
      throw e;
    }
    ThrowIfError(status);
  }

  // ToIds takes `ids` as a 1-D int64 array on the CPU (copied once when it cannot be lent).
  static Tensor ToIds(const Key& key, const py::handle& ids, absl::string_view op) {
    Tensor tensor = ToTensor(ids, /*output=*/false, key);
    if (tensor.dtype() != DType::kInt64 || tensor.shape().size() != 1 ||
        !tensor.device().is_cpu()) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat(op, ": key ", key.Quoted(),
                       ": ids must be a 1-D int64 array on the CPU, not ", tensor.Description())));
    }
    return tensor;
  }

  void Hold(const std::vector<Key>& keys, std::shared_ptr<std::vector<Tensor>> tensors) {
    absl::MutexLock lock(&mu_);
    for (const Key& key : keys) held_[key].push_back(tensors);
  }

  std::shared_ptr<KVStore> store_;
  // Null for in-process stores, which finish every call on the calling thread.
  std::shared_ptr<HelperThreads> helpers_;
  // The first exception an updater written in Python raised during the current call.
  std::shared_ptr<std::optional<py::error_already_set>> updater_error_ =
      std::make_shared<std::optional<py::error_already_set>>();
  // A barrier interrupted while blocked, still waiting at the scheduler (Python thread only).
  std::shared_ptr<Background> pending_barrier_;
  absl::Mutex mu_;
  // Values and outputs of operations issued with block=False, until waited for.
  std::map<Key, std::vector<std::shared_ptr<std::vector<Tensor>>>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

PYBIND11_MODULE(_kvstore, m) {
  m.doc() = "The C++ core of the kvstore package; use `import kvstore`.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object cls = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
      py::int_ code(static_cast<int>(e.code));
      if (ErrorClasses().contains(code)) cls = ErrorClasses()[code];
      PyErr_SetObject(cls.ptr(), py::str(e.message).ptr());
    }
  });

  m.def(
      "_set_error_classes", [](py::dict classes) { ErrorClasses() = std::move(classes); },
      "Sets the exception class raised for each absl status code.");
  m.def(
      "_set_cuda_ready_hook", [](py::object hook) { CudaReadyHook() = std::move(hook); },
      "Sets the function called with each CUDA array before the SDK uses it.");
  m.def(
      "optimizer_names", []() { return OptimizerNames(); },
      "The optimizers set_optimizer accepts.");

  py::class_<Store>(m, "_Store")
      .def(py::init<const std::string&>(), py::arg("type"))
      .def_property_readonly("type", &Store::type)
      .def_property_readonly("rank", &Store::rank)
      .def_property_readonly("num_workers", &Store::num_workers)
      .def("init", &Store::Init)
      .def("push", &Store::Push)
      .def("pull", &Store::Pull)
      .def("pushpull", &Store::PushPull)
      .def("row_sparse_pull", &Store::RowSparsePull)
      .def("spec", &Store::Spec)
      .def("init_row_sparse", &Store::InitRowSparse)
      .def("init_table", &Store::InitTable)
      .def("pull_rows", &Store::PullRows)
      .def("push_rows", &Store::PushRows)
      .def("push_row_sparse", &Store::PushRowSparse)
      .def("wait", &Store::Wait)
      .def("wait_all", &Store::WaitAll)
      .def("barrier", &Store::Barrier)
      .def("set_updater", &Store::SetUpdater)
      .def("set_optimizer", &Store::SetOptimizer)
      .def("set_gradient_compression", &Store::SetGradientCompression)
      .def("save_optimizer_states", &Store::SaveOptimizerStates)
      .def("load_optimizer_states", &Store::LoadOptimizerStates)
      .def("checkpoint", &Store::Checkpoint)
      .def("send_command_to_servers", &Store::SendCommandToServers)
      .def("num_dead_node", &Store::NumDeadNodes)
      .def("_bench_push", &Store::BenchPush)
      .def("close", &Store::Close);
}

}  // namespace python
}  // namespace kvstore
