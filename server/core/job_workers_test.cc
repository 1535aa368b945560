// JobWorkers: who may send, dropping workers, and the messages that name them.
#include "server/core/job_workers.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/test_util.h"

namespace kvstore {
namespace {

using testing::TestRng;

TEST_CASE("JobWorkers admits its workers and the scheduler until a worker is dropped") {
  TestRng rng;
  INFO(rng.Describe());
  std::vector<uint64_t> ids;
  const int n = static_cast<int>(rng.Int(2, 6));
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<uint64_t>(100 + 3 * i));
  JobWorkers workers(ids);
  CHECK(workers.size() == ids.size());
  for (uint64_t id : ids) CHECK(workers.CheckSender(id).ok());
  CHECK(workers.CheckSender(kSchedulerNodeId).ok());
  const absl::Status stranger = workers.CheckSender(7);
  CHECK(stranger.code() == absl::StatusCode::kPermissionDenied);
  CHECK(std::string(stranger.message()).find("node id 7 is not a worker") != std::string::npos);
  CHECK_FALSE(workers.any_dropped());

  const size_t rank = static_cast<size_t>(rng.Int(0, n - 1));
  // Not workers (7, the scheduler) are left out; a repeated id counts once.
  const std::vector<uint64_t> asked = {7, ids[rank], kSchedulerNodeId, ids[rank]};
  const std::vector<uint64_t> dropping = workers.Dropping(asked);
  REQUIRE(dropping == std::vector<uint64_t>{ids[rank]});
  CHECK(workers.CheckSender(ids[rank]).ok());  // Dropping only says which.
  CHECK(workers.MarkDropped(dropping) == 1);
  CHECK(workers.any_dropped());
  CHECK(workers.dropped() == 1);
  const absl::Status left = workers.CheckSender(ids[rank]);
  CHECK(left.code() == absl::StatusCode::kPermissionDenied);
  CHECK(
      std::string(left.message()).find("(worker " + std::to_string(rank) + ") has left the job") !=
      std::string::npos);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i != rank) CHECK(workers.CheckSender(ids[i]).ok());
  }
  CHECK(workers.CheckSender(kSchedulerNodeId).ok());
  CHECK(workers.Dropping(asked).empty());                  // Already dropped.
  CHECK(workers.MarkDropped({kSchedulerNodeId, 7}) == 1);  // Neither is a worker.
}

}  // namespace
}  // namespace kvstore
