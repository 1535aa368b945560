#include "common/unreachable_retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvstore {

grpc::Status CallWhileUnreachable(const std::string& peer, absl::Time deadline,
                                  const std::function<grpc::Status(absl::Time)>& attempt,
                                  const std::function<void(const std::string&)>& progress,
                                  absl::Duration progress_every, absl::Duration max_backoff) {
  const absl::Time started = absl::Now();
  absl::Time next_progress = started + progress_every;
  absl::Duration backoff = std::min(absl::Milliseconds(100), max_backoff);
  for (;;) {
    const grpc::Status status = attempt(deadline);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    const absl::Time now = absl::Now();
    if (now + backoff >= deadline) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat(peer, " was not reachable within ",
                       absl::FormatDuration(absl::Trunc(now - started, absl::Seconds(1))), ": ",
                       status.error_message()));
    }
    if (now >= next_progress && progress) {
      progress(absl::StrCat(
          peer, " is not reachable yet (", status.error_message(), "); retrying for ",
          absl::FormatDuration(absl::Trunc(deadline - now, absl::Seconds(1))), " more"));
      next_progress = now + progress_every;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, max_backoff);
  }
}

}  // namespace kvstore
