// LostUpdates: a kvserver of a job without replicas that died and was restarted into the
// running job - from a checkpoint (--restore) or from nothing - and the updates it had
// acknowledged that are gone with it.
//
// Two sides know part of the range. The scheduler knows what the replacement restored and the
// highest round the dead server's heartbeats reported; but the server may have acknowledged
// rounds after its last heartbeat. Each worker knows the rounds the server acknowledged to it
// (its acknowledged pushes of the keys the server holds), which in dist_sync is the server's
// own count. Describe names the range with both.
//
// Threading: plain values and a pure function.
#ifndef KVSTORE_COMMON_LOST_UPDATES_H_
#define KVSTORE_COMMON_LOST_UPDATES_H_

#include <cstdint>
#include <string>

namespace kvstore {

struct LostUpdates {
  int rank = 0;
  // "server 1 (was HOST:PORT, now HOST:PORT, node 7)".
  std::string server;
  // "restarted from checkpoint ID at round R" or "restarted without a checkpoint (every value
  // it held is lost)".
  std::string restored;
  // The round the replacement restored (0 without a checkpoint), and the highest round the
  // dead server's heartbeats reported.
  int64_t restored_round = 0;
  int64_t reported_round = 0;
};

// Describe returns "<server> died and was <restored>: the updates of rounds A to B that it had
// acknowledged are lost", A = restored_round + 1 and B = max(reported_round, `acknowledged`),
// the highest round the describer saw the server acknowledge. " (at least)" follows B unless
// `exact` (`acknowledged` is the server's true last round: a dist_sync worker's count). When
// B < A, no acknowledged update is known lost, and the message says so.
std::string Describe(const LostUpdates& loss, int64_t acknowledged, bool exact);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_LOST_UPDATES_H_
