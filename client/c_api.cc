// The C API (client/c_api.h) over the SDK: each function converts its C arguments to the SDK's
// types, checking them (a bad pointer count, dtype, rank or size is InvalidArgument naming it),
// calls the SDK and turns its absl::Status into a code and the calling thread's message. No C++
// exception leaves a function: an allocation failure is KV_RESOURCE_EXHAUSTED, anything else
// KV_INTERNAL.
#include "client/c_api.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <list>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/kvstore.h"
#include "common/flags_usage.h"
#include "common/row_sparse.h"
#include "common/status_macros.h"
#include "common/store/optimizer.h"
#include "common/table_wire.h"
#include "common/tensor.h"

// The handles. A store keeps the output handles of its queued pulls: the SDK writes through
// them after kv_pull has returned (distributed stores), so they live until a wait covers them.
struct kv_store {
  // The outputs of one pull call and its keys.
  struct HeldOutputs {
    std::vector<kvstore::Key> keys;
    std::vector<kvstore::Tensor> outs;
  };

  explicit kv_store(std::unique_ptr<kvstore::KVStore> s)
      : asynchronous(absl::StartsWith(s->type(), "dist")), store(std::move(s)) {}

  // Hold keeps `held` until Release covers its keys (distributed stores only: in-process stores
  // have finished writing when the call returns).
  void Hold(std::unique_ptr<HeldOutputs> held) {
    if (!asynchronous) return;
    absl::MutexLock lock(&mu);
    pending.push_back(std::move(held));
  }
  // Release drops the held outputs whose keys are all among `keys` (every operation on them has
  // completed), or every held output when `keys` is null.
  void Release(const std::vector<kvstore::Key>* keys) {
    absl::MutexLock lock(&mu);
    if (keys == nullptr) {
      pending.clear();
      return;
    }
    const absl::flat_hash_set<kvstore::Key> waited(keys->begin(), keys->end());
    pending.remove_if([&](const std::unique_ptr<HeldOutputs>& held) {
      return std::all_of(held->keys.begin(), held->keys.end(),
                         [&](const kvstore::Key& k) { return waited.contains(k); });
    });
  }

  const bool asynchronous;
  absl::Mutex mu;
  // Declared before `store`, so destroyed after it: the store's destructor finishes its
  // operations first.
  std::list<std::unique_ptr<HeldOutputs>> pending ABSL_GUARDED_BY(mu);
  std::unique_ptr<kvstore::KVStore> store;
};

struct kv_row_sparse {
  kvstore::RowSparse value;
};

namespace kvstore {
namespace {

// The calling thread's last error (kv_last_error).
struct LastError {
  int code = KV_OK;
  std::string message;
};
LastError& ThreadError() {
  thread_local LastError error;
  return error;
}

int Report(const absl::Status& status) {
  LastError& error = ThreadError();
  error.code = static_cast<int>(status.code());
  error.message = status.ok() ? std::string() : std::string(status.message());
  return error.code;
}

// Guarded runs `body` (returning absl::Status) and reports its status; an exception becomes a
// status, never crossing into C.
template <typename Body>
int Guarded(const char* function, Body&& body) {
  try {
    return Report(body());
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError(absl::StrCat(function, ": out of memory")));
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat(function, ": ", e.what())));
  } catch (...) {
    return Report(absl::InternalError(absl::StrCat(function, ": unknown exception")));
  }
}

absl::Status CheckStore(const kv_store* kv, const char* function) {
  if (kv == nullptr || kv->store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": the store is NULL"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Key> ToKey(const kv_key& key) {
  if (key.str != nullptr) return Key(std::string(key.str));
  return Key(key.id);
}

// ToKeys reads `count` keys; `what` names the call in errors.
absl::StatusOr<std::vector<Key>> ToKeys(const kv_key* keys, size_t count, const char* what) {
  if (count > 0 && keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": keys is NULL with count ", count));
  }
  std::vector<Key> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(Key key, ToKey(keys[i]));
    out.push_back(std::move(key));
  }
  return out;
}

absl::StatusOr<Shape> ToShape(const int64_t* shape, int32_t ndim, absl::string_view what) {
  if (ndim < 0 || ndim > KV_MAX_NDIM) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", ndim, " is outside [0, ", KV_MAX_NDIM, "]"));
  }
  if (ndim > 0 && shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape is NULL with rank ", ndim));
  }
  Shape out(shape, shape + ndim);
  absl::Status valid = ValidateShape(out);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", valid.message()));
  return out;
}

// ToTensor borrows the caller's buffer described by `t`.
absl::StatusOr<Tensor> ToTensor(const kv_tensor& t, absl::string_view what) {
  absl::StatusOr<DType> dtype = DTypeFromInt(t.dtype);
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", dtype.status().message()));
  ASSIGN_OR_RETURN(Shape shape, ToShape(t.shape, t.ndim, what));
  Device device;
  if (t.device_type == KV_CPU) {
    device = Device::CPU();
  } else if (t.device_type == KV_CUDA) {
    if (t.device_id < 0 || t.device_id > Device::kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": CUDA device ", t.device_id,
                                                     " is outside [0, ", Device::kMaxId, "]"));
    }
    device = Device::CUDA(t.device_id);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": device_type ", t.device_type,
                                                   " is neither KV_CPU (0) nor KV_CUDA (1)"));
  }
  Tensor tensor = Tensor::Borrow(t.data, *dtype, std::move(shape), device);
  if (t.data == nullptr && tensor.num_elements() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": data is NULL for ", tensor.num_elements(), " elements"));
  }
  return tensor;
}

absl::StatusOr<std::vector<Tensor>> ToTensors(const kv_tensor* tensors, size_t count,
                                              const std::vector<Key>& keys, const char* what,
                                              const char* role) {
  if (count > 0 && tensors == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", role, " is NULL with count ", count));
  }
  std::vector<Tensor> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(Tensor t, ToTensor(tensors[i], absl::StrCat(what, ": ", role, " ", i, " (key ",
                                                                 keys[i].Quoted(), ")")));
    out.push_back(std::move(t));
  }
  return out;
}

// FromTensor describes `t` for a callback; `shape` must outlive the result.
kv_tensor FromTensor(const Tensor& t) {
  kv_tensor out;
  out.data = const_cast<void*>(t.data());
  out.shape = t.shape().data();
  out.ndim = static_cast<int32_t>(t.shape().size());
  out.dtype = static_cast<int32_t>(t.dtype());
  out.device_type = t.device().is_cpu() ? KV_CPU : KV_CUDA;
  out.device_id = t.device().is_cpu() ? 0 : t.device().id;
  return out;
}

std::vector<Tensor*> Pointers(std::vector<Tensor>& tensors) {
  std::vector<Tensor*> out;
  out.reserve(tensors.size());
  for (Tensor& t : tensors) out.push_back(&t);
  return out;
}

// ParseCompression reads "type=2bit threshold=0.5" (blanks or commas between fields).
absl::StatusOr<GradientCompression> ParseCompression(absl::string_view text) {
  GradientCompression params;
  bool has_type = false;
  for (absl::string_view field :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "type") {
      params.type = std::string(kv.second);
      has_type = true;
    } else if (kv.first == "threshold") {
      double threshold;
      if (!absl::SimpleAtod(kv.second, &threshold)) {
        return absl::InvalidArgumentError(absl::StrCat("set_gradient_compression: threshold \"",
                                                       kv.second, "\" is not a number"));
      }
      params.threshold = threshold;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("set_gradient_compression: unknown field \"",
                                                     field, "\"; known: type, threshold"));
    }
  }
  if (!has_type) {
    return absl::InvalidArgumentError(
        "set_gradient_compression: the parameters need type=2bit, type=1bit or type=none");
  }
  return params;
}

// ParseTableText reads kv_init_table's parameters (c_api.h).
absl::StatusOr<TableConfig> ParseTableText(absl::string_view text) {
  TableConfig c;
  bool has_dim = false;
  for (absl::string_view field :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    const absl::string_view name = kv.first, value = kv.second;
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_init_table: ", name, " \"", value, "\" is not ", what));
    };
    double number = 0;
    int64_t integer = 0;
    if (name == "initializer") {
      ASSIGN_OR_RETURN(c.initializer.kind, InitializerKind(value, "kv_init_table"));
    } else if (name == "optimizer") {
      ASSIGN_OR_RETURN(c.optimizer.kind, OptimizerKind(value, "kv_init_table"));
    } else if (name == "evict_over_budget") {
      if (value == "true" || value == "1") {
        c.evict_over_budget = true;
      } else if (value == "false" || value == "0") {
        c.evict_over_budget = false;
      } else {
        return bad("true, false, 1 or 0");
      }
    } else if (name == "dim" || name == "seed" || name == "admit_after" ||
               name == "evict_unseen_rounds" || name == "max_rows" || name == "max_bytes") {
      if (!absl::SimpleAtoi(value, &integer)) return bad("an integer");
      if (name == "dim") {
        c.dim = integer;
        has_dim = true;
      } else if (name == "seed") {
        c.initializer.seed = static_cast<uint64_t>(integer);
      } else if (name == "admit_after") {
        c.admit_after = integer;
      } else if (name == "evict_unseen_rounds") {
        c.evict_unseen_rounds = integer;
      } else if (name == "max_rows") {
        c.max_rows = integer;
      } else {
        c.max_bytes = integer;
      }
    } else {
      if (!absl::SimpleAtod(value, &number)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kv_init_table: unknown field \"", field,
            "\"; known: dim, initializer, low, high, mean, std, seed, optimizer, lr, wd, "
            "rescale_grad, clip_gradient, beta1, beta2, epsilon, admit_after, "
            "evict_unseen_rounds, evict_unseen_seconds, max_rows, max_bytes, "
            "evict_over_budget"));
      }
      if (name == "low" || name == "mean") {
        c.initializer.a = number;
      } else if (name == "high" || name == "std") {
        c.initializer.b = number;
      } else if (name == "lr") {
        c.optimizer.lr = number;
      } else if (name == "wd") {
        c.optimizer.wd = number;
      } else if (name == "rescale_grad") {
        c.optimizer.rescale_grad = number;
      } else if (name == "clip_gradient") {
        c.optimizer.clip_gradient = number;
      } else if (name == "beta1") {
        c.optimizer.beta1 = number;
      } else if (name == "beta2") {
        c.optimizer.beta2 = number;
      } else if (name == "epsilon") {
        c.optimizer.epsilon = number;
      } else if (name == "evict_unseen_seconds") {
        c.evict_unseen_seconds = number;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("kv_init_table: unknown field \"", name, "\""));
      }
    }
  }
  if (!has_dim) return absl::InvalidArgumentError("kv_init_table: the parameters need dim=N");
  return c;
}

}  // namespace
}  // namespace kvstore

using kvstore::Guarded;
using kvstore::Key;
using kvstore::RowSparse;
using kvstore::Tensor;

extern "C" {

const char* kv_last_error(void) { return kvstore::ThreadError().message.c_str(); }

int kv_last_error_code(void) { return kvstore::ThreadError().code; }

int kv_api_version(void) { return KV_C_API_VERSION; }

const char* kv_version(void) { return kvstore::kVersion; }

int kv_is_worker_node(void) { return kvstore::KVStore::IsWorkerNode() ? 1 : 0; }
int kv_is_server_node(void) { return kvstore::KVStore::IsServerNode() ? 1 : 0; }
int kv_is_scheduler_node(void) { return kvstore::KVStore::IsSchedulerNode() ? 1 : 0; }

int kv_init_ps_env(const char* const* names, const char* const* values, size_t count) {
  return Guarded("kv_init_ps_env", [&]() -> absl::Status {
    if (count > 0 && (names == nullptr || values == nullptr)) {
      return absl::InvalidArgumentError("kv_init_ps_env: names or values is NULL");
    }
    std::unordered_map<std::string, std::string> envs;
    for (size_t i = 0; i < count; ++i) {
      if (names[i] == nullptr || values[i] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("kv_init_ps_env: name or value ", i, " is NULL"));
      }
      envs[names[i]] = values[i];
    }
    return kvstore::KVStore::InitPSEnv(envs);
  });
}

int kv_create(const char* type, kv_store** out) {
  if (out != nullptr) *out = nullptr;
  return Guarded("kv_create", [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("kv_create: out is NULL");
    if (type == nullptr) return absl::InvalidArgumentError("kv_create: type is NULL");
    ASSIGN_OR_RETURN(std::unique_ptr<kvstore::KVStore> store, kvstore::KVStore::Create(type));
    *out = new kv_store(std::move(store));
    return absl::OkStatus();
  });
}

void kv_free(kv_store* kv) {
  try {
    delete kv;
  } catch (...) {
  }
}

const char* kv_type(const kv_store* kv) {
  return kv == nullptr || kv->store == nullptr ? "" : kv->store->type().c_str();
}

int kv_rank(const kv_store* kv) { return kv == nullptr ? 0 : kv->store->rank(); }

int kv_num_workers(const kv_store* kv) { return kv == nullptr ? 0 : kv->store->num_workers(); }

void kv_set_barrier_before_exit(kv_store* kv, int barrier_before_exit) {
  if (kv != nullptr) kv->store->set_barrier_before_exit(barrier_before_exit != 0);
}

int kv_init(kv_store* kv, const kv_key* keys, const kv_tensor* values, size_t count) {
  return Guarded("kv_init", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_init"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_init"));
    ASSIGN_OR_RETURN(std::vector<Tensor> v,
                     kvstore::ToTensors(values, count, k, "kv_init", "value"));
    return kv->store->Init(k, v);
  });
}

int kv_push(kv_store* kv, const kv_key* keys, const kv_tensor* values, size_t count, int priority) {
  return Guarded("kv_push", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_push"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_push"));
    ASSIGN_OR_RETURN(std::vector<Tensor> v,
                     kvstore::ToTensors(values, count, k, "kv_push", "value"));
    return kv->store->Push(k, v, priority);
  });
}

int kv_pull(kv_store* kv, const kv_key* keys, const kv_tensor* outs, size_t count, int priority) {
  return Guarded("kv_pull", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_pull"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_pull"));
    auto held = std::make_unique<kv_store::HeldOutputs>();
    ASSIGN_OR_RETURN(held->outs, kvstore::ToTensors(outs, count, k, "kv_pull", "out"));
    held->keys = std::move(k);
    RETURN_IF_ERROR(kv->store->Pull(held->keys, kvstore::Pointers(held->outs), priority));
    kv->Hold(std::move(held));
    return absl::OkStatus();
  });
}

int kv_pushpull(kv_store* kv, const kv_key* keys, const kv_tensor* values, const kv_tensor* outs,
                size_t count, int priority) {
  return Guarded("kv_pushpull", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_pushpull"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_pushpull"));
    ASSIGN_OR_RETURN(std::vector<Tensor> v,
                     kvstore::ToTensors(values, count, k, "kv_pushpull", "value"));
    auto held = std::make_unique<kv_store::HeldOutputs>();
    ASSIGN_OR_RETURN(held->outs, kvstore::ToTensors(outs, count, k, "kv_pushpull", "out"));
    held->keys = std::move(k);
    RETURN_IF_ERROR(kv->store->PushPull(held->keys, v, kvstore::Pointers(held->outs), priority));
    kv->Hold(std::move(held));
    return absl::OkStatus();
  });
}

int kv_value_spec(const kv_store* kv, const kv_key* key, int32_t* dtype, int32_t* ndim,
                  int64_t* shape, int32_t max_ndim) {
  return Guarded("kv_value_spec", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_value_spec"));
    if (key == nullptr || dtype == nullptr || ndim == nullptr ||
        (max_ndim > 0 && shape == nullptr)) {
      return absl::InvalidArgumentError("kv_value_spec: key, dtype, ndim or shape is NULL");
    }
    ASSIGN_OR_RETURN(Key k, kvstore::ToKey(*key));
    ASSIGN_OR_RETURN(auto spec, kv->store->ValueSpec(k));
    *dtype = static_cast<int32_t>(spec.first);
    *ndim = static_cast<int32_t>(spec.second.size());
    for (int32_t d = 0; d < *ndim && d < max_ndim; ++d) shape[d] = spec.second[d];
    return absl::OkStatus();
  });
}

int kv_row_sparse_new(int32_t dtype, const int64_t* shape, int32_t ndim, const int64_t* row_ids,
                      int64_t num_rows, const void* data, kv_row_sparse** out) {
  if (out != nullptr) *out = nullptr;
  return Guarded("kv_row_sparse_new", [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("kv_row_sparse_new: out is NULL");
    absl::StatusOr<kvstore::DType> type = kvstore::DTypeFromInt(dtype);
    if (!type.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_row_sparse_new: ", type.status().message()));
    }
    ASSIGN_OR_RETURN(kvstore::Shape s, kvstore::ToShape(shape, ndim, "kv_row_sparse_new"));
    if (s.empty()) {
      return absl::InvalidArgumentError("kv_row_sparse_new: a row-sparse value has rank >= 1");
    }
    if (num_rows < 0 || (num_rows > 0 && (row_ids == nullptr || data == nullptr))) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_row_sparse_new: ", num_rows, " rows, with row_ids or data NULL"));
    }
    if (num_rows == 0) {
      *out = new kv_row_sparse{RowSparse::Empty(*type, std::move(s))};
      return absl::OkStatus();
    }
    kvstore::Shape row_shape = kvstore::RowShape(s, num_rows);
    absl::Status valid = kvstore::ValidateShape(row_shape);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("kv_row_sparse_new: ", valid.message()));
    }
    Tensor rows = Tensor::Zeros(*type, row_shape);
    std::memcpy(rows.data(), data, rows.byte_size());
    ASSIGN_OR_RETURN(
        RowSparse value,
        RowSparse::Create(std::move(s), std::vector<int64_t>(row_ids, row_ids + num_rows),
                          std::move(rows)));
    *out = new kv_row_sparse{std::move(value)};
    return absl::OkStatus();
  });
}

void kv_row_sparse_free(kv_row_sparse* value) { delete value; }

int32_t kv_row_sparse_dtype(const kv_row_sparse* value) {
  return value == nullptr ? 0 : static_cast<int32_t>(value->value.dtype());
}
int32_t kv_row_sparse_ndim(const kv_row_sparse* value) {
  return value == nullptr ? 0 : static_cast<int32_t>(value->value.shape().size());
}
const int64_t* kv_row_sparse_shape(const kv_row_sparse* value) {
  return value == nullptr ? nullptr : value->value.shape().data();
}
int64_t kv_row_sparse_num_rows(const kv_row_sparse* value) {
  return value == nullptr ? 0 : value->value.num_rows();
}
const int64_t* kv_row_sparse_row_ids(const kv_row_sparse* value) {
  return value == nullptr ? nullptr : value->value.row_ids().data();
}
const void* kv_row_sparse_data(const kv_row_sparse* value) {
  return value == nullptr ? nullptr : value->value.data().data();
}

int kv_row_sparse_to_dense(const kv_row_sparse* value, const kv_tensor* out) {
  return Guarded("kv_row_sparse_to_dense", [&]() -> absl::Status {
    if (value == nullptr || out == nullptr) {
      return absl::InvalidArgumentError("kv_row_sparse_to_dense: value or out is NULL");
    }
    ASSIGN_OR_RETURN(Tensor o, kvstore::ToTensor(*out, "kv_row_sparse_to_dense: out"));
    if (!o.device().is_cpu() || o.dtype() != value->value.dtype() ||
        o.shape() != value->value.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_row_sparse_to_dense: out is ", o.Description(), ", the value is ",
                       kvstore::DTypeName(value->value.dtype()), " [",
                       absl::StrJoin(value->value.shape(), ","), "] on the CPU"));
    }
    Tensor dense = value->value.ToDense();
    std::memcpy(o.data(), dense.data(), dense.byte_size());
    return absl::OkStatus();
  });
}

int kv_init_row_sparse(kv_store* kv, const kv_key* key, const kv_row_sparse* value) {
  return Guarded("kv_init_row_sparse", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_init_row_sparse"));
    if (key == nullptr || value == nullptr) {
      return absl::InvalidArgumentError("kv_init_row_sparse: key or value is NULL");
    }
    ASSIGN_OR_RETURN(Key k, kvstore::ToKey(*key));
    return kv->store->Init(k, value->value);
  });
}

int kv_push_row_sparse(kv_store* kv, const kv_key* keys, const kv_row_sparse* const* values,
                       size_t count, int priority) {
  return Guarded("kv_push_row_sparse", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_push_row_sparse"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_push_row_sparse"));
    if (count > 0 && values == nullptr) {
      return absl::InvalidArgumentError("kv_push_row_sparse: values is NULL");
    }
    std::vector<RowSparse> v;
    v.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (values[i] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("kv_push_row_sparse: value ", i, " (key ", k[i].Quoted(), ") is NULL"));
      }
      v.push_back(values[i]->value);
    }
    return kv->store->Push(k, v, priority);
  });
}

int kv_row_sparse_pull(kv_store* kv, const kv_key* keys, kv_row_sparse* const* outs,
                       const int64_t* const* row_ids, const int64_t* num_row_ids, size_t count,
                       int priority) {
  return Guarded("kv_row_sparse_pull", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_row_sparse_pull"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_row_sparse_pull"));
    if (count > 0 && (outs == nullptr || row_ids == nullptr || num_row_ids == nullptr)) {
      return absl::InvalidArgumentError("kv_row_sparse_pull: outs, row_ids or num_row_ids is NULL");
    }
    std::vector<RowSparse*> o;
    std::vector<std::vector<int64_t>> ids;
    o.reserve(count);
    ids.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const int64_t n = num_row_ids[i];
      if (outs[i] == nullptr || n < 0 || (n > 0 && row_ids[i] == nullptr)) {
        return absl::InvalidArgumentError(absl::StrCat("kv_row_sparse_pull: output ", i, " (key ",
                                                       k[i].Quoted(), ") is NULL, or its ", n,
                                                       " row ids are NULL or negative in number"));
      }
      o.push_back(&outs[i]->value);
      ids.emplace_back(row_ids[i], row_ids[i] + n);
    }
    return kv->store->RowSparsePull(k, o, ids, priority);
  });
}

int kv_wait(kv_store* kv, const kv_key* keys, size_t count) {
  return Guarded("kv_wait", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_wait"));
    ASSIGN_OR_RETURN(std::vector<Key> k, kvstore::ToKeys(keys, count, "kv_wait"));
    absl::Status status = kv->store->Wait(k);
    kv->Release(&k);
    return status;
  });
}

int kv_wait_all(kv_store* kv) {
  return Guarded("kv_wait_all", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_wait_all"));
    absl::Status status = kv->store->WaitAll();
    kv->Release(nullptr);
    return status;
  });
}

int kv_barrier(kv_store* kv) {
  return Guarded("kv_barrier", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_barrier"));
    return kv->store->Barrier();
  });
}

int kv_set_updater(kv_store* kv, kv_updater_fn fn, void* user) {
  return Guarded("kv_set_updater", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_set_updater"));
    if (fn == nullptr) return absl::InvalidArgumentError("kv_set_updater: fn is NULL");
    return kv->store->SetUpdater([fn, user](const Key& key, const Tensor& received,
                                            Tensor* stored) {
      kv_key k{key.is_string() ? key.str_key().c_str() : nullptr, key.is_int() ? key.int_key() : 0};
      kv_tensor in = kvstore::FromTensor(received);
      kv_tensor out = kvstore::FromTensor(*stored);
      fn(&k, &in, &out, user);
    });
  });
}

int kv_set_optimizer(kv_store* kv, const char* name, const char* params) {
  return Guarded("kv_set_optimizer", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_set_optimizer"));
    if (name == nullptr) return absl::InvalidArgumentError("kv_set_optimizer: name is NULL");
    ASSIGN_OR_RETURN(kvstore::OptimizerConfig config,
                     kvstore::ParseOptimizerText(name, params == nullptr ? "" : params));
    return kv->store->SetOptimizer(config);
  });
}

int kv_set_gradient_compression(kv_store* kv, const char* params) {
  return Guarded("kv_set_gradient_compression", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_set_gradient_compression"));
    ASSIGN_OR_RETURN(kvstore::GradientCompression p,
                     kvstore::ParseCompression(params == nullptr ? "" : params));
    return kv->store->SetGradientCompression(p);
  });
}

int kv_save_optimizer_states(kv_store* kv, const char* path) {
  return Guarded("kv_save_optimizer_states", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_save_optimizer_states"));
    if (path == nullptr)
      return absl::InvalidArgumentError("kv_save_optimizer_states: path is NULL");
    return kv->store->SaveOptimizerStates(path);
  });
}

int kv_load_optimizer_states(kv_store* kv, const char* path) {
  return Guarded("kv_load_optimizer_states", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_load_optimizer_states"));
    if (path == nullptr)
      return absl::InvalidArgumentError("kv_load_optimizer_states: path is NULL");
    return kv->store->LoadOptimizerStates(path);
  });
}

int kv_init_table(kv_store* kv, const kv_key* key, const char* params) {
  return Guarded("kv_init_table", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_init_table"));
    if (key == nullptr) return absl::InvalidArgumentError("kv_init_table: key is NULL");
    ASSIGN_OR_RETURN(const Key k, kvstore::ToKey(*key));
    ASSIGN_OR_RETURN(const kvstore::TableConfig config,
                     kvstore::ParseTableText(params == nullptr ? "" : params));
    return kv->store->InitTable(k, config);
  });
}

int kv_pull_rows(kv_store* kv, const kv_key* key, const int64_t* ids, size_t count, float* out) {
  return Guarded("kv_pull_rows", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_pull_rows"));
    if (key == nullptr || (count > 0 && (ids == nullptr || out == nullptr))) {
      return absl::InvalidArgumentError("kv_pull_rows: key, ids or out is NULL");
    }
    ASSIGN_OR_RETURN(const Key k, kvstore::ToKey(*key));
    ASSIGN_OR_RETURN(const int64_t dim, kv->store->TableDim(k));
    Tensor rows = Tensor::Borrow(out, kvstore::DType::kFloat32, {static_cast<int64_t>(count), dim});
    return kv->store->PullRows(k, absl::MakeConstSpan(ids, count), &rows);
  });
}

int kv_push_rows(kv_store* kv, const kv_key* key, const int64_t* ids, size_t count,
                 const float* grads) {
  return Guarded("kv_push_rows", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_push_rows"));
    if (key == nullptr || (count > 0 && (ids == nullptr || grads == nullptr))) {
      return absl::InvalidArgumentError("kv_push_rows: key, ids or grads is NULL");
    }
    ASSIGN_OR_RETURN(const Key k, kvstore::ToKey(*key));
    ASSIGN_OR_RETURN(const int64_t dim, kv->store->TableDim(k));
    // Read only: the store never writes through a pushed tensor.
    const Tensor rows = Tensor::Borrow(const_cast<float*>(grads), kvstore::DType::kFloat32,
                                       {static_cast<int64_t>(count), dim});
    return kv->store->PushRows(k, absl::MakeConstSpan(ids, count), rows);
  });
}

int kv_send_command_to_servers(kv_store* kv, int head, const char* body) {
  return Guarded("kv_send_command_to_servers", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_send_command_to_servers"));
    return kv->store->SendCommandToServers(head, body == nullptr ? "" : body);
  });
}

int kv_num_dead_nodes(kv_store* kv, int group, int timeout_sec, int* out) {
  return Guarded("kv_num_dead_nodes", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_num_dead_nodes"));
    if (out == nullptr) return absl::InvalidArgumentError("kv_num_dead_nodes: out is NULL");
    if (group < KV_GROUP_SCHEDULER || group > KV_GROUP_ALL || timeout_sec < 0) {
      return absl::InvalidArgumentError(absl::StrCat("kv_num_dead_nodes: group ", group,
                                                     " is not in [1, 7] or timeout ", timeout_sec,
                                                     " s is negative"));
    }
    ASSIGN_OR_RETURN(int dead, kv->store->NumDeadNodes(static_cast<kvstore::NodeGroup>(group),
                                                       absl::Seconds(timeout_sec)));
    *out = dead;
    return absl::OkStatus();
  });
}

int kv_checkpoint(kv_store* kv, const char* dir) {
  return Guarded("kv_checkpoint", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_checkpoint"));
    if (dir == nullptr) return absl::InvalidArgumentError("kv_checkpoint: dir is NULL");
    return kv->store->Checkpoint(dir);
  });
}

int kv_run_server(kv_store* kv, kv_controller_fn controller, void* user) {
  return Guarded("kv_run_server", [&]() -> absl::Status {
    RETURN_IF_ERROR(kvstore::CheckStore(kv, "kv_run_server"));
    if (controller == nullptr) return kv->store->RunServer();
    return kv->store->RunServer(
        [controller, user](int head, absl::string_view body) -> absl::StatusOr<std::string> {
          const std::string text(body);
          controller(head, text.c_str(), text.size(), user);
          return std::string();
        });
  });
}

}  // extern "C"
