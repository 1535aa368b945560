#include "common/view_epoch.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvstore {
namespace {

constexpr absl::string_view kMarker = "routed by view epoch ";
constexpr absl::string_view kNeed = "; this copy needs epoch ";

}  // namespace

absl::Status StaleViewError(uint64_t have, uint64_t need) {
  return absl::AbortedError(
      absl::StrCat(kMarker, have, kNeed, need,
                   " (the job's servers changed): learn the new view and send again"));
}

std::optional<uint64_t> RequiredViewEpoch(const absl::Status& status) {
  if (!absl::IsAborted(status)) return std::nullopt;
  const absl::string_view message = status.message();
  const size_t marker = message.find(kMarker);
  if (marker == absl::string_view::npos) return std::nullopt;
  const size_t need = message.find(kNeed, marker);
  if (need == absl::string_view::npos) return std::nullopt;
  absl::string_view digits = message.substr(need + kNeed.size());
  digits = digits.substr(0, digits.find(' '));
  uint64_t epoch = 0;
  if (!absl::SimpleAtoi(digits, &epoch)) return std::nullopt;
  return epoch;
}

uint64_t ParseViewEpoch(const std::string& value) {
  uint64_t epoch = 0;
  return absl::SimpleAtoi(value, &epoch) ? epoch : 0;
}

}  // namespace kvstore
