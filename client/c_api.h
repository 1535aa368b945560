/* kvstore C API: the SDK (client/kvstore.h) for C and for every language that calls C (Perl's
 * FFI::Platypus, Python's ctypes, Go's cgo, Julia's ccall, ...), as MXNet reached its language
 * bindings through c_api.h. Plain C99: no C++ type, exception or Abseil type crosses it.
 *
 *   kv_store* kv = NULL;
 *   if (kv_create("local", &kv) != KV_OK) { fprintf(stderr, "%s\n", kv_last_error()); ... }
 *   int64_t shape[2] = {2, 3};
 *   float ones[6] = {1, 1, 1, 1, 1, 1}, out[6];
 *   kv_key key = {NULL, 3};                                   (int key 3; {"w", 0}: key "w")
 *   kv_tensor value = {ones, shape, 2, KV_FLOAT32, KV_CPU, 0};
 *   kv_tensor result = {out, shape, 2, KV_FLOAT32, KV_CPU, 0};
 *   kv_init(kv, &key, &value, 1);
 *   kv_push(kv, &key, &value, 1, 0);
 *   kv_pull(kv, &key, &result, 1, 0);
 *   kv_wait_all(kv);                                          (out now holds the value)
 *   kv_free(kv);
 *
 * Contract of every function (docs/c_api.md has each one's own):
 * - Status: functions returning int return KV_OK (0) or one of the kv_code values (Abseil's
 *   status codes, same numbers). On an error, kv_last_error() returns the message - naming the
 *   key, shape, dtype, peer, file or limit - and nothing was applied.
 * - Errors are per thread: every function returning a status sets the calling thread's
 *   kv_last_error() / kv_last_error_code() (a success clears them to "" and KV_OK); the pointer
 *   is valid until the thread's next such call.
 * - Buffers are the caller's: a kv_tensor describes memory the caller owns. Distributed stores
 *   ("dist_sync", "dist_async") return from kv_push, kv_pull, kv_pushpull and
 *   kv_row_sparse_pull once the operation is queued: the caller keeps values and outputs alive
 *   and unchanged until kv_wait on their keys (or kv_wait_all) has returned, and reads outputs
 *   only then. In-process stores ("local", "device") finish before returning. Errors the servers
 *   find are returned by kv_wait / kv_wait_all.
 * - Arrays given to a call (keys, tensors, shapes, row ids, strings) are read during the call
 *   only, except the tensors' data as above.
 * - Threading: a store may be used from several threads; calls on it are serialised. kv_free
 *   must not race with other calls on the same store.
 * - Keys: int keys (str == NULL) and string keys (str != NULL, UTF-8, NUL-terminated); one store
 *   takes one kind only.
 * - Blocking: kv_create of a distributed type blocks until the job has assembled; kv_init,
 *   kv_barrier, kv_wait, kv_wait_all, kv_set_optimizer, kv_send_command_to_servers and the
 *   checkpoint calls block until done. Every wait is bounded by the store's deadlines
 *   (DistOptions, from the launch environment).
 */
#ifndef KVSTORE_CLIENT_C_API_H_
#define KVSTORE_CLIENT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's contract; kv_api_version() returns the library's. */
#define KV_C_API_VERSION 1

/* Status codes: absl::StatusCode's numbers. */
typedef enum kv_code {
  KV_OK = 0,
  KV_CANCELLED = 1,
  KV_UNKNOWN = 2,
  KV_INVALID_ARGUMENT = 3,
  KV_DEADLINE_EXCEEDED = 4,
  KV_NOT_FOUND = 5,
  KV_ALREADY_EXISTS = 6,
  KV_PERMISSION_DENIED = 7,
  KV_RESOURCE_EXHAUSTED = 8,
  KV_FAILED_PRECONDITION = 9,
  KV_ABORTED = 10,
  KV_OUT_OF_RANGE = 11,
  KV_UNIMPLEMENTED = 12,
  KV_INTERNAL = 13,
  KV_UNAVAILABLE = 14,
  KV_DATA_LOSS = 15,
  KV_UNAUTHENTICATED = 16
} kv_code;

/* Element types (the numbers of proto/kvstore.proto's DType). */
typedef enum kv_dtype {
  KV_FLOAT32 = 1,
  KV_FLOAT16 = 2,
  KV_BFLOAT16 = 3,
  KV_FLOAT64 = 4,
  KV_INT32 = 5,
  KV_INT64 = 6
} kv_dtype;

/* Where a tensor's data lives. */
typedef enum kv_device_type { KV_CPU = 0, KV_CUDA = 1 } kv_device_type;

/* Node groups of kv_num_dead_nodes (ps-lite's). */
typedef enum kv_node_group {
  KV_GROUP_SCHEDULER = 1,
  KV_GROUP_SERVERS = 2,
  KV_GROUP_WORKERS = 4,
  KV_GROUP_SERVERS_AND_WORKERS = 6,
  KV_GROUP_ALL = 7
} kv_node_group;

/* The largest rank of a tensor. */
#define KV_MAX_NDIM 32

/* kv_key: an int key (str NULL, the key in id) or a string key (str, id ignored). 16 bytes. */
typedef struct kv_key {
  const char* str;
  int64_t id;
} kv_key;

/* kv_tensor: a dense row-major array the caller owns. `shape` holds `ndim` sizes (ndim 0: a
 * scalar); `data` holds their product of elements of `dtype` (kv_dtype), on the CPU or on CUDA
 * device `device_id` (`device_type`, kv_device_type). 32 bytes. */
typedef struct kv_tensor {
  void* data;
  const int64_t* shape;
  int32_t ndim;
  int32_t dtype;
  int32_t device_type;
  int32_t device_id;
} kv_tensor;

/* Opaque handles. */
typedef struct kv_store kv_store;
typedef struct kv_row_sparse kv_row_sparse;

/* kv_updater_fn merges `received` (the sum of a push) into `stored`, in place: MXNet's updater
 * (key, input, stored). Called by in-process stores on the pushing thread, once per key per
 * push; the tensors are valid during the call only; it must not call back into the store. */
typedef void (*kv_updater_fn)(const kv_key* key, const kv_tensor* received, const kv_tensor* stored,
                              void* user);

/* kv_controller_fn runs a server command of head >= 16 (MXNet's server controller); `body` holds
 * `body_len` bytes (NUL-terminated too). */
typedef void (*kv_controller_fn)(int head, const char* body, size_t body_len, void* user);

/* --- Errors and versions ------------------------------------------------------------------ */

/* The message of the calling thread's last status-returning call; "" when it succeeded. */
const char* kv_last_error(void);
/* The code of that call; KV_OK when it succeeded. */
int kv_last_error_code(void);
/* KV_C_API_VERSION of the library. */
int kv_api_version(void);
/* The SDK's version, "MAJOR.MINOR.PATCH". */
const char* kv_version(void);

/* --- Roles and environment --------------------------------------------------------------- */

/* 1 when this process's role (DMLC_ROLE, KV_ROLE) is worker or unset / server / scheduler. */
int kv_is_worker_node(void);
int kv_is_server_node(void);
int kv_is_scheduler_node(void);
/* Sets launch variables (DMLC_ROLE, DMLC_PS_ROOT_URI, ...) for stores created later; call it
 * before kv_create and before other threads read the environment. */
int kv_init_ps_env(const char* const* names, const char* const* values, size_t count);

/* --- Stores ------------------------------------------------------------------------------ */

/* Creates a store of `type`: "local", "device" (or MXNet's aliases), "dist_sync", "dist_async"
 * or "dist_sync_device" (joining the job the launch environment describes). *out is NULL on an
 * error. */
int kv_create(const char* type, kv_store** out);
/* Frees a store (NULL: nothing). A distributed store first waits, bounded, for its queued
 * operations. */
void kv_free(kv_store* kv);
/* The type the store was created with; valid while the store lives. */
const char* kv_type(const kv_store* kv);
/* This worker's rank in [0, num_workers) and the number of workers (0 and 1 in process). */
int kv_rank(const kv_store* kv);
int kv_num_workers(const kv_store* kv);
/* When nonzero, freeing a distributed worker's store waits for every worker (MXNet's
 * barrier_before_exit); off by default. */
void kv_set_barrier_before_exit(kv_store* kv, int barrier_before_exit);

/* --- Dense values ------------------------------------------------------------------------ */

/* Stores values[i] under keys[i] (each key once; every worker calls it; rank 0's values are
 * kept). Returns once the keys are initialised. */
int kv_init(kv_store* kv, const kv_key* keys, const kv_tensor* values, size_t count);
/* Pushes values[i] into keys[i]; values of a repeated key (several devices) are summed first
 * and the sum goes through the updater. */
int kv_push(kv_store* kv, const kv_key* keys, const kv_tensor* values, size_t count, int priority);
/* Pulls the newest value of keys[i] into outs[i] (a key may repeat: one output per device). */
int kv_pull(kv_store* kv, const kv_key* keys, const kv_tensor* outs, size_t count, int priority);
/* Pushes like kv_push, then pulls each key's updated value into outs[i] (one per value; an
 * output may be the pushed value's own buffer). */
int kv_pushpull(kv_store* kv, const kv_key* keys, const kv_tensor* values, const kv_tensor* outs,
                size_t count, int priority);

/* The dtype and shape stored under `key` (no request is sent): *ndim gets the rank, `shape`
 * the first min(rank, max_ndim) sizes. */
int kv_value_spec(const kv_store* kv, const kv_key* key, int32_t* dtype, int32_t* ndim,
                  int64_t* shape, int32_t max_ndim);

/* --- Row-sparse values ------------------------------------------------------------------- */

/* A row-sparse value of `dtype` and shape `shape` (rank >= 1) holding the rows `row_ids`
 * (num_rows of them, in [0, shape[0])) whose elements are copied from `data` (num_rows times
 * the product of shape[1:] elements, CPU memory). num_rows 0 with data NULL: an empty value,
 * the form of a kv_row_sparse_pull output. */
int kv_row_sparse_new(int32_t dtype, const int64_t* shape, int32_t ndim, const int64_t* row_ids,
                      int64_t num_rows, const void* data, kv_row_sparse** out);
void kv_row_sparse_free(kv_row_sparse* value);
/* Its parts; pointers valid until the value is changed (a pull into it) or freed. */
int32_t kv_row_sparse_dtype(const kv_row_sparse* value);
int32_t kv_row_sparse_ndim(const kv_row_sparse* value);
const int64_t* kv_row_sparse_shape(const kv_row_sparse* value);
int64_t kv_row_sparse_num_rows(const kv_row_sparse* value);
const int64_t* kv_row_sparse_row_ids(const kv_row_sparse* value);
const void* kv_row_sparse_data(const kv_row_sparse* value);
/* Writes the dense value (zeros in unlisted rows; rows listed twice summed) into `out`, a CPU
 * tensor of the value's dtype and shape. */
int kv_row_sparse_to_dense(const kv_row_sparse* value, const kv_tensor* out);

int kv_init_row_sparse(kv_store* kv, const kv_key* key, const kv_row_sparse* value);
/* Pushes row-sparse values: a key's values are summed row by row and merged as a value whose
 * unlisted rows are zero. */
int kv_push_row_sparse(kv_store* kv, const kv_key* keys, const kv_row_sparse* const* values,
                       size_t count, int priority);
/* Fills outs[i] with the rows row_ids[i] (num_row_ids[i] ids, unsorted and repeated allowed) of
 * the newest value of keys[i]: the output then lists them sorted without duplicates. Each output
 * has the stored dtype and shape (kv_row_sparse_new with no rows). */
int kv_row_sparse_pull(kv_store* kv, const kv_key* keys, kv_row_sparse* const* outs,
                       const int64_t* const* row_ids, const int64_t* num_row_ids, size_t count,
                       int priority);

/* --- Synchronisation --------------------------------------------------------------------- */

/* Blocks until every operation issued on `keys` / on any key has completed; returns the first
 * error among them. */
int kv_wait(kv_store* kv, const kv_key* keys, size_t count);
int kv_wait_all(kv_store* kv);
/* Blocks until every worker has called it (returns at once in process). */
int kv_barrier(kv_store* kv);

/* --- Updaters, optimizers, compression --------------------------------------------------- */

/* Replaces an in-process store's updater with `fn` (MXNet's _set_updater); `user` is passed to
 * every call and stays the caller's (fn NULL: InvalidArgument). A distributed store's updaters
 * run on its servers: an error. */
int kv_set_updater(kv_store* kv, kv_updater_fn fn, void* user);
/* Runs optimizer `name` ("sgd", "adam", ...) as the updater, locally or on every server, with
 * hyper-parameters as text: "learning_rate=0.1 momentum=0.9 wd=1e-4" (blanks or commas between
 * fields; bools as true/false/1/0; NULL or "": defaults). Fresh optimizer state. */
int kv_set_optimizer(kv_store* kv, const char* name, const char* params);
/* Gradient compression, MXNet's compression_params as text: "type=2bit threshold=0.5",
 * "type=1bit", "type=none" (off). */
int kv_set_gradient_compression(kv_store* kv, const char* params);
/* Writes / reads the updater's state to / from the file `path` (every server's part). */
int kv_save_optimizer_states(kv_store* kv, const char* path);
int kv_load_optimizer_states(kv_store* kv, const char* path);

/* --- Tables (docs/tables.md) ------------------------------------------------------------- */

/* Makes `key` a table: float32 rows keyed by any int64 id, created on first use. `params` as
 * text, "dim=64 initializer=normal std=0.01 optimizer=adagrad lr=0.05 admit_after=2": dim
 * (required); initializer zeros|uniform|normal with low, high (uniform), mean, std (normal),
 * seed; optimizer sgd|adagrad|adam with lr, wd, rescale_grad, clip_gradient, beta1, beta2,
 * epsilon; admit_after, evict_unseen_rounds, evict_unseen_seconds, max_rows, max_bytes,
 * evict_over_budget (true/false). Every worker calls it; it returns once the table exists. */
int kv_init_table(kv_store* kv, const kv_key* key, const char* params);
/* Writes the rows of ids[0..count) (any order, repeats allowed) into `out`, count x dim
 * float32 of the caller's. Blocks until they are there. */
int kv_pull_rows(kv_store* kv, const kv_key* key, const int64_t* ids, size_t count, float* out);
/* Pushes `grads`, count x dim float32, the gradients of the rows of ids[0..count) (repeats
 * summed). Blocks until applied (dist_sync: until every worker pushed the round). */
int kv_push_rows(kv_store* kv, const kv_key* key, const int64_t* ids, size_t count,
                 const float* grads);

/* --- Servers ----------------------------------------------------------------------------- */

/* Runs controller command (head, body) on every server; returns after all ran it. In process:
 * KV_OK, nothing done (as MXNet). */
int kv_send_command_to_servers(kv_store* kv, int head, const char* body);
/* *out: how many nodes of `group` (kv_node_group) sent no heartbeat within timeout_sec. */
int kv_num_dead_nodes(kv_store* kv, int group, int timeout_sec, int* out);
/* Every server writes its shard to ROOT/dir on its machine (between rounds). */
int kv_checkpoint(kv_store* kv, const char* dir);
/* In a server or scheduler process (DMLC_ROLE), serves until the job ends; `controller` (may be
 * NULL) runs command heads >= 16 on a server. */
int kv_run_server(kv_store* kv, kv_controller_fn controller, void* user);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVSTORE_CLIENT_C_API_H_ */
