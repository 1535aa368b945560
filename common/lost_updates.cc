#include "common/lost_updates.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvstore {

std::string Describe(const LostUpdates& loss, int64_t acknowledged, bool exact) {
  const int64_t first = loss.restored_round + 1;
  const int64_t last = std::max(loss.reported_round, acknowledged);
  const std::string head = absl::StrCat(loss.server, " died and was ", loss.restored);
  if (last < first) {
    return absl::StrCat(head, ": no update it had acknowledged after round ", loss.restored_round,
                        " is known lost", exact ? "" : " (later ones may be)");
  }
  return absl::StrCat(head, ": the updates of rounds ", first, " to ", last,
                      exact ? "" : " (at least)", " that it had acknowledged are lost");
}

}  // namespace kvstore
