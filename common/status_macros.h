// Status propagation macros shared by every module.
//
// RETURN_IF_ERROR(expr): evaluates an absl::Status expression and returns it from the enclosing
// function when it is not OK.
// ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T> expression; on error returns its
// status, otherwise moves the value into `lhs` (which may be a declaration: `auto x`).
#ifndef KVSTORE_COMMON_STATUS_MACROS_H_
#define KVSTORE_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVSTORE_CONCAT_INNER_(a, b) a##b
#define KVSTORE_CONCAT_(a, b) KVSTORE_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status kvstore_status_ = (expr);           \
    if (!kvstore_status_.ok()) return kvstore_status_; \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, expr) \
  KVSTORE_ASSIGN_OR_RETURN_IMPL_(KVSTORE_CONCAT_(kvstore_statusor_, __LINE__), lhs, expr)

#define KVSTORE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // KVSTORE_COMMON_STATUS_MACROS_H_
