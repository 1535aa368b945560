// Helpers shared by the files that implement ServerEngine (server_engine*.cc); not part of its
// interface.
#ifndef KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_
#define KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_

#include <cstdint>

#include "common/tensor.h"

namespace kvstore::server_engine_internal {

// View wraps `elements` elements of `dtype` at `data` as a tensor that does not own them.
inline Tensor View(const void* data, DType dtype, int64_t elements) {
  return Tensor::Borrow(const_cast<void*>(data), dtype, Shape{elements});
}

// NumElementsOf returns the number of elements of a value of `shape`.
inline int64_t NumElementsOf(const Shape& shape) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  return total;
}

}  // namespace kvstore::server_engine_internal

#endif  // KVSTORE_SERVER_CORE_SERVER_ENGINE_INTERNAL_H_
