// ElasticReference: the float64 reference of the training in sum_reference.h when one worker,
// the victim, may leave the job at any round (an elastic job; the victim is killed).
//
// The other workers' pushes are in every round. The victim's are in the rounds 1..K of each
// dist_sync round unit (a chunk of a key on a server), for a K unknown in advance: K >= the
// round while it lives, then fixed. Check keeps, for every element, the set of K that explain
// every value pulled so far exactly (a bit mask: bit K set when the element equals the others'
// pushes of rounds 1..R plus the victim's of rounds 1..min(R, K)); an element no K explains is
// an error naming it. Write saves the masks for the test, which knows the rounds units and the
// round the victim was killed in (Read).
#ifndef KVSTORE_TESTS_RELIABILITY_ELASTIC_REFERENCE_H_
#define KVSTORE_TESTS_RELIABILITY_ELASTIC_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstore::testing {

class ElasticReference {
 public:
  // Create: `workers` workers, `victim` one of them, rounds 1..`last` (at most 62).
  static absl::StatusOr<ElasticReference> Create(uint64_t seed, int workers, int victim,
                                                 int64_t last);

  // Check narrows the masks by the values pulled after `round` (rounds are checked in order):
  // `pulled(k, i)` is element i of SumKeys()[k]. DataLoss naming the key, element and values
  // when no K explains an element.
  absl::Status Check(int64_t round, const std::function<double(size_t, int64_t)>& pulled);

  // Write saves the masks to `path`, one line "KEY ELEMENT MASK" (MASK in hex) per element.
  absl::Status Write(const std::string& path) const;

  struct ElementMask {
    int64_t key = 0;
    int64_t element = 0;
    uint64_t mask = 0;
  };
  // Read returns the masks a Write saved.
  static absl::StatusOr<std::vector<ElementMask>> Read(const std::string& path);

 private:
  ElasticReference() = default;

  uint64_t seed_ = 0;
  int workers_ = 0;
  int victim_ = 0;
  int64_t last_ = 0;
  int64_t round_ = 0;  // The last round checked.
  // Per key and element: the initial value plus the other workers' pushes up to round_; the
  // victim's pushes of rounds 1..K (K = 0..last_); the K still possible.
  std::vector<std::vector<double>> others_;
  std::vector<std::vector<std::vector<double>>> victim_sums_;
  std::vector<std::vector<uint64_t>> masks_;
};

}  // namespace kvstore::testing

#endif  // KVSTORE_TESTS_RELIABILITY_ELASTIC_REFERENCE_H_
