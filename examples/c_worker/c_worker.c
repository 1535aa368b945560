/* c_worker: a worker written in C against the installed SDK's C API (client/c_api.h), built
 * outside Bazel and run by deploy/sdk/sdk_install_test.sh in a job of real daemons:
 *
 *   cc -std=c99 c_worker.c -o c_worker $(pkg-config --cflags --libs kvstore) -lm
 *   DMLC_PS_ROOT_URI=... DMLC_PS_ROOT_PORT=... DMLC_NUM_WORKER=W c_worker SEED [ROUNDS]
 *
 * Joins the job as a dist_sync worker and initialises a float32 key of 3 x 1000 and a float64
 * key of 7 (int keys 3 and 9); then for ROUNDS rounds pushes values every worker regenerates
 * from SEED (key 3 as the sum of two "devices") and pulls them back: with the servers' default
 * updater (assign) the pulled value is the sum of every worker's push of the round, checked here
 * against that sum in float64. It also pulls rows of key 3 with kv_row_sparse_pull and checks
 * that a push to a key never initialised fails with KV_NOT_FOUND naming it, then meets the
 * others at a barrier. Prints the largest error and exits 0 when every value is within
 * tolerance, 1 otherwise (naming the key, round and element).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/c_api.h"

#define ROWS 3
#define COLS 1000
#define SMALL 7

/* splitmix64: the value stream of (seed, worker, round, key, device), uniform in [-1, 1). */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static double value(uint64_t seed, int worker, int round, int key, int device, int64_t i) {
  uint64_t h = mix(seed ^ mix((uint64_t)worker * 1000003u + (uint64_t)(round + 1) * 7919u +
                              (uint64_t)key * 131u + (uint64_t)device));
  h = mix(h + (uint64_t)i);
  return (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int fail(const char* what) {
  fprintf(stderr, "c_worker: %s failed: %s (code %d)\n", what, kv_last_error(),
          kv_last_error_code());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: c_worker SEED [ROUNDS]\n");
    return 2;
  }
  uint64_t seed = strtoull(argv[1], NULL, 10);
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  kv_store* kv = NULL;
  if (kv_create("dist_sync", &kv) != KV_OK) return fail("kv_create");
  int rank = kv_rank(kv), workers = kv_num_workers(kv);
  printf("c_worker rank %d of %d (%s, C API %d, SDK %s), seed %llu\n", rank, workers, kv_type(kv),
         kv_api_version(), kv_version(), (unsigned long long)seed);

  static float big[2][ROWS * COLS], big_out[ROWS * COLS];
  static double small[SMALL], small_out[SMALL];
  int64_t big_shape[2] = {ROWS, COLS}, small_shape[1] = {SMALL};
  kv_key keys[3] = {{NULL, 3}, {NULL, 3}, {NULL, 9}};
  kv_tensor values[3] = {{big[0], big_shape, 2, KV_FLOAT32, KV_CPU, 0},
                         {big[1], big_shape, 2, KV_FLOAT32, KV_CPU, 0},
                         {small, small_shape, 1, KV_FLOAT64, KV_CPU, 0}};
  kv_tensor outs[2] = {{big_out, big_shape, 2, KV_FLOAT32, KV_CPU, 0},
                       {small_out, small_shape, 1, KV_FLOAT64, KV_CPU, 0}};
  kv_key pull_keys[2] = {{NULL, 3}, {NULL, 9}};
  int64_t i;
  for (i = 0; i < ROWS * COLS; ++i) big[0][i] = (float)value(seed, 0, -1, 3, 0, i);
  for (i = 0; i < SMALL; ++i) small[i] = value(seed, 0, -1, 9, 0, i);
  {
    kv_tensor init[2] = {values[0], values[2]};
    if (kv_init(kv, pull_keys, init, 2) != KV_OK) return fail("kv_init");
  }

  double worst = 0.0;
  int r, w, d;
  for (r = 0; r < rounds; ++r) {
    for (d = 0; d < 2; ++d)
      for (i = 0; i < ROWS * COLS; ++i) big[d][i] = (float)value(seed, rank, r, 3, d, i);
    for (i = 0; i < SMALL; ++i) small[i] = value(seed, rank, r, 9, 0, i);
    if (kv_push(kv, keys, values, 3, 0) != KV_OK) return fail("kv_push");
    if (kv_pull(kv, pull_keys, outs, 2, 0) != KV_OK) return fail("kv_pull");
    if (kv_wait_all(kv) != KV_OK) return fail("kv_wait_all");
    for (i = 0; i < ROWS * COLS; ++i) {
      double want = 0.0, err;
      for (w = 0; w < workers; ++w)
        for (d = 0; d < 2; ++d) want += (double)(float)value(seed, w, r, 3, d, i);
      err = fabs(big_out[i] - want);
      if (err > worst) worst = err;
      if (err > 1e-5 * (1.0 + fabs(want))) {
        fprintf(stderr, "c_worker: key 3 round %d element %lld: %.9g, float64 sum %.9g\n", r,
                (long long)i, big_out[i], want);
        return 1;
      }
    }
    for (i = 0; i < SMALL; ++i) {
      double want = 0.0, err;
      for (w = 0; w < workers; ++w) want += value(seed, w, r, 9, 0, i);
      err = fabs(small_out[i] - want);
      if (err > worst) worst = err;
      if (err > 1e-12 * (1.0 + fabs(want))) {
        fprintf(stderr, "c_worker: key 9 round %d element %lld: %.17g, float64 sum %.17g\n", r,
                (long long)i, small_out[i], want);
        return 1;
      }
    }
  }

  /* Rows 2 and 0 of key 3 (unsorted): the output lists 0 and 2 with the last round's sums. */
  {
    kv_row_sparse* rows = NULL;
    int64_t ids[2] = {2, 0}, count = 2;
    const int64_t* id_list = ids;
    const float* data;
    if (kv_row_sparse_new(KV_FLOAT32, big_shape, 2, NULL, 0, NULL, &rows) != KV_OK)
      return fail("kv_row_sparse_new");
    if (kv_row_sparse_pull(kv, &pull_keys[0], &rows, &id_list, &count, 1, 0) != KV_OK)
      return fail("kv_row_sparse_pull");
    if (kv_wait(kv, &pull_keys[0], 1) != KV_OK) return fail("kv_wait");
    if (kv_row_sparse_num_rows(rows) != 2 || kv_row_sparse_row_ids(rows)[0] != 0 ||
        kv_row_sparse_row_ids(rows)[1] != 2) {
      fprintf(stderr, "c_worker: row_sparse_pull of rows {2, 0} returned %lld rows\n",
              (long long)kv_row_sparse_num_rows(rows));
      return 1;
    }
    data = (const float*)kv_row_sparse_data(rows);
    for (i = 0; i < COLS; ++i) {
      if (data[i] != big_out[i] || data[COLS + i] != big_out[2 * COLS + i]) {
        fprintf(stderr, "c_worker: row_sparse_pull element %lld differs from the pull\n",
                (long long)i);
        return 1;
      }
    }
    kv_row_sparse_free(rows);
  }

  /* A key never initialised: the error names it and nothing is sent. */
  {
    kv_key unknown = {NULL, 12345};
    int code = kv_push(kv, &unknown, &values[2], 1, 0);
    if (code != KV_NOT_FOUND || strstr(kv_last_error(), "12345") == NULL) {
      fprintf(stderr, "c_worker: push to key 12345 returned %d: %s\n", code, kv_last_error());
      return 1;
    }
  }
  if (kv_barrier(kv) != KV_OK) return fail("kv_barrier");
  printf("c_worker rank %d: %d rounds match the float64 sums (largest error %.3g)\n", rank, rounds,
         worst);
  kv_free(kv);
  return 0;
}
