#include "client/kvstore.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "client/dist_store.h"
#include "client/local_store.h"
#include "client/role_store.h"
#include "common/environment.h"
#include "common/job_auth.h"
#include "common/status_macros.h"

namespace kvstore {
namespace {

absl::Status CheckCount(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                        absl::string_view op) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of ", keys.size(), " keys with ", values.size(), " values"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputs(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                          absl::string_view op) {
  if (keys.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of ", keys.size(), " keys into ", outs.size(), " outputs"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (outs[i] == nullptr || !outs[i]->defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": key ", keys[i].Quoted(), ": output is null or undefined (allocate it first)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DistOptions> DistOptions::FromEnvironment() {
  absl::StatusOr<JobEnvironment> env = ReadJobEnvironment();
  if (!env.ok()) return env.status();
  DistOptions options;
  options.etcd_endpoints = env->etcd_endpoints.value_or("");
  options.job = env->job.value_or("");
  if (!env->scheduler_port && options.etcd_endpoints.empty()) {
    return absl::InvalidArgumentError(
        "a distributed store needs the scheduler's port: set DMLC_PS_ROOT_PORT (or "
        "KV_SCHEDULER_PORT) and DMLC_PS_ROOT_URI, as a launcher such as deploy/launch.py does "
        "(or KV_ETCD_ENDPOINTS and KV_JOB, to find it through etcd)");
  }
  options.scheduler_host = env->scheduler_host.value_or("127.0.0.1");
  options.scheduler_port = env->scheduler_port.value_or(0);
  options.requested_rank = env->rank.value_or(-1);
  if (env->secret_file.has_value()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(*env->secret_file);
    if (!secret.ok()) return secret.status();
    options.security.secret = *std::move(secret);
  }
  options.security.tls.ca_file = env->tls_ca.value_or("");
  options.security.tls.cert_file = env->tls_cert.value_or("");
  options.security.tls.key_file = env->tls_key.value_or("");
  options.log_level = env->log_level.value_or("");
  options.metrics_port = env->metrics_port.value_or(-1);
  options.trace_file = env->trace_file.value_or("");
  options.local_transport = env->local_transport.value_or(true);
  return options;
}

namespace {

// Role returns this process's role from the launch environment ("worker" when unset, "" when
// malformed).
std::string Role() {
  absl::StatusOr<JobEnvironment> env = ReadJobEnvironment();
  if (!env.ok()) return "";
  return env->role.value_or("worker");
}

}  // namespace

bool KVStore::IsWorkerNode() { return Role() == "worker"; }
bool KVStore::IsServerNode() { return Role() == "server"; }
bool KVStore::IsSchedulerNode() { return Role() == "scheduler"; }

absl::Status KVStore::InitPSEnv(const std::unordered_map<std::string, std::string>& envs) {
  return SetEnvironmentVariables(
      std::vector<std::pair<std::string, std::string>>(envs.begin(), envs.end()));
}

absl::StatusOr<std::unique_ptr<KVStore>> KVStore::Create(absl::string_view type) {
  if (type == "dist_sync" || type == "dist_async" || type == "dist_sync_device" ||
      type == "dist_device_sync") {
    // One program for every role (MXNet's launcher): a server or scheduler process gets the
    // store that is its daemon (client/role_store.h).
    absl::StatusOr<JobEnvironment> env = ReadJobEnvironment();
    if (!env.ok()) return env.status();
    if (env->role.has_value() && *env->role != "worker") {
      return std::unique_ptr<KVStore>(new RoleStore(std::string(type), *std::move(env)));
    }
    absl::StatusOr<DistOptions> options = DistOptions::FromEnvironment();
    if (!options.ok()) return options.status();
    return Create(type, *options);
  }
  return Create(type, DistOptions());
}

absl::StatusOr<std::unique_ptr<KVStore>> KVStore::Create(absl::string_view type,
                                                         const DistOptions& options) {
  if (type == "local" || type == "local_update_cpu" || type == "local_allreduce_cpu" ||
      type == "device" || type == "local_allreduce_device") {
    return std::unique_ptr<KVStore>(new LocalStore(std::string(type)));
  }
  if (type == "dist_sync" || type == "dist_async" || type == "dist_sync_device" ||
      type == "dist_device_sync") {
    absl::StatusOr<std::unique_ptr<DistStore>> store =
        DistStore::Connect(std::string(type), options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<KVStore>(std::move(store).value());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown KVStore type \"", type,
      "\"; supported: local, device, dist_sync, dist_sync_device, dist_async (and MXNet's "
      "local_update_cpu, dist_device_sync, "
      "local_allreduce_cpu, local_allreduce_device)"));
}

absl::Status KVStore::Init(absl::Span<const Key> keys, absl::Span<const Tensor> values) {
  RETURN_IF_ERROR(CheckCount(keys, values, "init"));
  RETURN_IF_ERROR(CheckDefined(keys, values, "init"));
  if (any_table_.load()) {
    absl::MutexLock lock(&tables_mu_);
    for (const Key& key : keys) {
      if (table_dims_.contains(key)) {
        return absl::AlreadyExistsError(
            absl::StrCat("init: key ", key.Quoted(), " is a table (InitTable)"));
      }
    }
  }
  return DoInit(keys, values);
}

absl::Status KVStore::InitTable(const Key& key, const TableConfig& config) {
  TableConfig named = config;
  named.name = absl::StrCat("key ", key.Quoted());
  RETURN_IF_ERROR(EmbeddingTable::Create(named).status());
  if (StoredSpec(key).ok()) {
    return absl::AlreadyExistsError(
        absl::StrCat("init_table: key ", key.Quoted(),
                     " holds a value already; a table needs a key of its own"));
  }
  {
    absl::MutexLock lock(&tables_mu_);
    if (table_dims_.contains(key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("init_table: key ", key.Quoted(), " is a table already"));
    }
  }
  RETURN_IF_ERROR(DoInitTable(key, named));
  absl::MutexLock lock(&tables_mu_);
  table_dims_[key] = config.dim;
  any_table_.store(true);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KVStore::TableDim(const Key& key) const {
  absl::MutexLock lock(&tables_mu_);
  auto found = table_dims_.find(key);
  if (found == table_dims_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", key.Quoted(), " is no table (InitTable makes one)"));
  }
  return found->second;
}

absl::StatusOr<int64_t> KVStore::CheckTableRows(const Key& key, size_t ids, const Tensor& rows,
                                                absl::string_view op) const {
  absl::StatusOr<int64_t> found = TableDim(key);
  if (!found.ok()) {
    return absl::Status(found.status().code(), absl::StrCat(op, ": ", found.status().message()));
  }
  const int64_t dim = *found;
  const Shape expected = {static_cast<int64_t>(ids), dim};
  if (!rows.defined() || !rows.device().is_cpu() || rows.dtype() != DType::kFloat32 ||
      rows.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": key ", key.Quoted(), ": the rows of ", ids, " ids must be a float32(", ids, ", ",
        dim, ")@cpu tensor, not ", rows.defined() ? rows.Description() : "an undefined one"));
  }
  return dim;
}

absl::Status KVStore::PullRows(const Key& key, absl::Span<const int64_t> ids, Tensor* out) {
  if (out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("pull_rows: key ", key.Quoted(), ": no output"));
  }
  ASSIGN_OR_RETURN(const int64_t dim, CheckTableRows(key, ids.size(), *out, "pull_rows"));
  return DoPullRows(key, dim, ids, out->data_as<float>());
}

absl::Status KVStore::PushRows(const Key& key, absl::Span<const int64_t> ids, const Tensor& grads) {
  ASSIGN_OR_RETURN(const int64_t dim, CheckTableRows(key, ids.size(), grads, "push_rows"));
  return DoPushRows(key, dim, ids, grads.data_as<const float>());
}

absl::Status KVStore::DoInitTable(const Key& key, const TableConfig&) {
  return absl::FailedPreconditionError(absl::StrCat("init_table: key ", key.Quoted(), ": a ", type_,
                                                    " store of this process holds no tables"));
}

absl::Status KVStore::DoPullRows(const Key& key, int64_t, absl::Span<const int64_t>, float*) {
  return DoInitTable(key, TableConfig());
}

absl::Status KVStore::DoPushRows(const Key& key, int64_t, absl::Span<const int64_t>, const float*) {
  return DoInitTable(key, TableConfig());
}

absl::Status KVStore::Init(const Key& key, const Tensor& value) {
  return Init(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1));
}

absl::Status KVStore::CheckDefined(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                                   absl::string_view op) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!values[i].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": key ", keys[i].Quoted(), ": value is undefined"));
    }
  }
  return absl::OkStatus();
}

absl::Status KVStore::Push(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                           int priority) {
  RETURN_IF_ERROR(CheckCount(keys, values, "push"));
  return DoPush(keys, values, priority);
}

absl::Status KVStore::Push(const Key& key, const Tensor& value, int priority) {
  return Push(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1), priority);
}

absl::Status KVStore::Push(const Key& key, absl::Span<const Tensor> values, int priority) {
  const std::vector<Key> keys(values.size(), key);
  return Push(keys, values, priority);
}

absl::Status KVStore::Pull(absl::Span<const Key> keys, absl::Span<Tensor* const> outs,
                           int priority) {
  RETURN_IF_ERROR(CheckOutputs(keys, outs, "pull"));
  return DoPull(keys, outs, priority);
}

absl::Status KVStore::Pull(const Key& key, Tensor* out, int priority) {
  return Pull(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&out, 1), priority);
}

absl::Status KVStore::Pull(const Key& key, absl::Span<Tensor* const> outs, int priority) {
  const std::vector<Key> keys(outs.size(), key);
  return Pull(keys, outs, priority);
}

namespace {

absl::Status CheckBucket(const Tensor* bucket, absl::string_view op) {
  if (bucket == nullptr || !bucket->defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the bucket is null or undefined"));
  }
  if (!bucket->device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the bucket ", bucket->Description(), " is not on the CPU"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KVStore::PushBucket(absl::Span<const Key> keys, const Tensor& bucket, int priority) {
  RETURN_IF_ERROR(CheckBucket(&bucket, "push"));
  return DoPushBucket(keys, bucket, priority);
}

absl::Status KVStore::PullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority) {
  RETURN_IF_ERROR(CheckBucket(bucket, "pull"));
  return DoPullBucket(keys, bucket, priority);
}

absl::Status KVStore::PushPullBucket(absl::Span<const Key> keys, const Tensor& bucket, Tensor* out,
                                     int priority) {
  RETURN_IF_ERROR(CheckBucket(&bucket, "pushpull"));
  RETURN_IF_ERROR(CheckBucket(out, "pushpull"));
  return DoPushPullBucket(keys, bucket, out, priority);
}

absl::Status KVStore::PushBucket(absl::Span<const int64_t> keys, const Tensor& bucket,
                                 int priority) {
  RETURN_IF_ERROR(CheckBucket(&bucket, "push"));
  return DoIntKeyBucket(keys, &bucket, nullptr, priority);
}

absl::Status KVStore::PullBucket(absl::Span<const int64_t> keys, Tensor* bucket, int priority) {
  RETURN_IF_ERROR(CheckBucket(bucket, "pull"));
  return DoIntKeyBucket(keys, nullptr, bucket, priority);
}

absl::Status KVStore::PushPullBucket(absl::Span<const int64_t> keys, const Tensor& bucket,
                                     Tensor* out, int priority) {
  RETURN_IF_ERROR(CheckBucket(&bucket, "pushpull"));
  RETURN_IF_ERROR(CheckBucket(out, "pushpull"));
  return DoIntKeyBucket(keys, &bucket, out, priority);
}

absl::Status KVStore::DoIntKeyBucket(absl::Span<const int64_t> keys, const Tensor* in, Tensor* out,
                                     int priority) {
  const std::vector<Key> list(keys.begin(), keys.end());
  if (out == nullptr) return DoPushBucket(list, *in, priority);
  if (in == nullptr) return DoPullBucket(list, out, priority);
  return DoPushPullBucket(list, *in, out, priority);
}

absl::StatusOr<std::vector<Tensor>> KVStore::BucketViews(absl::Span<const Key> keys,
                                                         const Tensor& bucket) const {
  std::vector<Tensor> views;
  views.reserve(keys.size());
  size_t offset = 0;
  int64_t elements = 0;
  for (const Key& key : keys) {
    absl::StatusOr<std::pair<DType, Shape>> spec = StoredSpec(key);
    if (!spec.ok()) return spec.status();
    if (spec->first != bucket.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", key.Quoted(), " holds ", DTypeName(spec->first),
                       ShapeToString(spec->second), " but the bucket is ", bucket.Description()));
    }
    elements += NumElements(spec->second);
    if (elements <= bucket.num_elements()) {
      absl::StatusOr<Tensor> view = bucket.View(offset, spec->first, spec->second);
      if (!view.ok()) return view.status();
      views.push_back(*std::move(view));
      offset += views.back().byte_size();
    }
  }
  if (elements != bucket.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", keys.size(), " keys hold ", elements, " elements but the bucket ",
                     bucket.Description(), " holds ", bucket.num_elements()));
  }
  return views;
}

absl::Status KVStore::DoPushBucket(absl::Span<const Key> keys, const Tensor& bucket, int priority) {
  absl::StatusOr<std::vector<Tensor>> views = BucketViews(keys, bucket);
  if (!views.ok()) return views.status();
  return DoPush(keys, *views, priority);
}

absl::Status KVStore::DoPullBucket(absl::Span<const Key> keys, Tensor* bucket, int priority) {
  absl::StatusOr<std::vector<Tensor>> views = BucketViews(keys, *bucket);
  if (!views.ok()) return views.status();
  std::vector<Tensor*> outs;
  for (Tensor& view : *views) outs.push_back(&view);
  RETURN_IF_ERROR(DoPull(keys, outs, priority));
  return Wait(keys);  // The views live in this frame: the pull must have filled them.
}

absl::Status KVStore::DoPushPullBucket(absl::Span<const Key> keys, const Tensor& bucket,
                                       Tensor* out, int priority) {
  absl::StatusOr<std::vector<Tensor>> values = BucketViews(keys, bucket);
  if (!values.ok()) return values.status();
  absl::StatusOr<std::vector<Tensor>> views = BucketViews(keys, *out);
  if (!views.ok()) return views.status();
  std::vector<Tensor*> outs;
  for (Tensor& view : *views) outs.push_back(&view);
  RETURN_IF_ERROR(DoPushPull(keys, *values, outs, priority));
  return Wait(keys);
}

absl::Status KVStore::PushPull(absl::Span<const Key> keys, absl::Span<const Tensor> values,
                               absl::Span<Tensor* const> outs, int priority) {
  RETURN_IF_ERROR(CheckCount(keys, values, "pushpull"));
  RETURN_IF_ERROR(CheckOutputs(keys, outs, "pushpull"));
  return DoPushPull(keys, values, outs, priority);
}

absl::Status KVStore::PushPull(const Key& key, const Tensor& value, Tensor* out, int priority) {
  return PushPull(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1),
                  absl::MakeConstSpan(&out, 1), priority);
}

absl::Status KVStore::SetGradientCompression(const GradientCompression& params) {
  absl::StatusOr<CompressionParams> parsed = MakeCompressionParams(params.type, params.threshold);
  if (!parsed.ok()) return parsed.status();
  return DoSetGradientCompression(*parsed);
}

namespace {

absl::Status CheckRowSparse(const Key& key, const RowSparse& value, absl::string_view op) {
  const Tensor& data = value.data();
  if (!data.defined() || !data.device().is_cpu() ||
      data.shape() != RowShape(value.shape(), value.num_rows())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": key ", key.Quoted(),
                     ": the rows of a row-sparse value must be a CPU tensor of "
                     "shape ",
                     ShapeToString(RowShape(value.shape(), value.num_rows()))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KVStore::Init(const Key& key, const RowSparse& value) {
  RETURN_IF_ERROR(CheckRowSparse(key, value, "init"));
  if (absl::Status s =
          CheckRowIds(value.row_ids(), value.shape()[0], absl::StrCat("init: key ", key.Quoted()));
      !s.ok()) {
    return s;
  }
  return Init(key, value.ToDense());
}

absl::Status KVStore::Push(absl::Span<const Key> keys, absl::Span<const RowSparse> values,
                           int priority) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", keys.size(), " keys with ", values.size(), " values"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(CheckRowSparse(keys[i], values[i], "push"));
  }
  return DoPushRowSparse(keys, values, priority);
}

absl::Status KVStore::Push(const Key& key, const RowSparse& value, int priority) {
  return Push(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&value, 1), priority);
}

absl::Status KVStore::RowSparsePull(absl::Span<const Key> keys, absl::Span<RowSparse* const> outs,
                                    absl::Span<const std::vector<int64_t>> row_ids, int priority) {
  if (keys.size() != outs.size() || keys.size() != row_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("row_sparse_pull of ", keys.size(),
                                                   " keys into ", outs.size(), " outputs with ",
                                                   row_ids.size(), " row id lists"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (outs[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("row_sparse_pull: key ", keys[i].Quoted(), ": output is null"));
    }
  }
  return DoRowSparsePull(keys, outs, row_ids, priority);
}

absl::Status KVStore::RowSparsePull(const Key& key, RowSparse* out,
                                    const std::vector<int64_t>& row_ids, int priority) {
  return RowSparsePull(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&out, 1),
                       absl::MakeConstSpan(&row_ids, 1), priority);
}

absl::Status KVStore::RowSparsePull(const Key& key, absl::Span<RowSparse* const> outs,
                                    absl::Span<const std::vector<int64_t>> row_ids, int priority) {
  if (row_ids.size() != 1 && row_ids.size() != outs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_sparse_pull of key ", key.Quoted(), " into ", outs.size(), " outputs with ",
        row_ids.size(), " row id lists (give one list, or one per output)"));
  }
  const std::vector<Key> keys(outs.size(), key);
  std::vector<std::vector<int64_t>> ids(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) ids[i] = row_ids[row_ids.size() == 1 ? 0 : i];
  return RowSparsePull(keys, outs, ids, priority);
}

absl::Status KVStore::SetOptimizer(const OptimizerConfig& config) {
  RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  return DoSetOptimizer(config);
}

}  // namespace kvstore
