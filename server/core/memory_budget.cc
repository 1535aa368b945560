#include "server/core/memory_budget.h"

#include "absl/strings/str_cat.h"

namespace kvstore {

absl::Status MemoryBudget::Check(int64_t bytes, absl::string_view what) const {
  const int64_t held = this->held();
  if (bytes <= limit_ - held) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(what, " would take this server's memory (", held,
                                                   " bytes held) over its budget of ", limit_,
                                                   " bytes"));
}

}  // namespace kvstore
