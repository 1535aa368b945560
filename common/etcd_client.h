// EtcdClient: the calls a scheduler standby makes to etcd's v3 API (etcd 3.4 and later), through
// etcd's JSON gateway over HTTP/1.1 - no etcd stubs, no HTTP library: grant a lease and keep it
// alive, create a key under a lease only when it does not exist (an election), read a key,
// revoke a lease. The messages are proto/etcd_gateway.proto's.
//
// Each call connects to the endpoints in turn (the first that accepts), sends one POST and reads
// the whole answer within the client's timeout; errors name the endpoint, the path and what etcd
// answered. etcd holds no training data: only the leader's address, under a lease.
//
// Threading: thread-safe (calls share nothing but the immutable endpoints).
#ifndef KVSTORE_COMMON_ETCD_CLIENT_H_
#define KVSTORE_COMMON_ETCD_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvstore {

class EtcdClient {
 public:
  // Create checks `endpoints` ("HOST:PORT[,HOST:PORT...]", optionally with "http://"):
  // InvalidArgument naming the one that is malformed. `timeout` bounds each call.
  static absl::StatusOr<EtcdClient> Create(const std::string& endpoints,
                                           absl::Duration timeout = absl::Seconds(2));

  // GrantLease grants a lease of `ttl` (etcd may raise it to its minimum) and returns its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) const;
  // KeepAlive renews `lease` and returns the time it has left; NotFound once it has expired.
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease) const;
  // Revoke ends `lease` now, deleting the keys under it.
  absl::Status Revoke(int64_t lease) const;
  // PutIfAbsent creates `key` with `value` under `lease` when `key` does not exist, atomically;
  // returns true when it did, false when the key exists (its value in `*holder`).
  absl::StatusOr<bool> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease,
                                   std::string* holder) const;
  // Put sets `key` to `value`, under no lease (it stays).
  absl::Status Put(const std::string& key, const std::string& value) const;
  // Get returns the value of `key`; NotFound when there is none.
  absl::StatusOr<std::string> Get(const std::string& key) const;

  const std::string& endpoints() const { return text_; }

 private:
  struct Endpoint {
    std::string host;
    std::string port;
  };
  EtcdClient(std::string text, std::vector<Endpoint> endpoints, absl::Duration timeout)
      : text_(std::move(text)), endpoints_(std::move(endpoints)), timeout_(timeout) {}
  // Post sends `json` to `path` on the first endpoint that accepts a connection and returns
  // the answer's body (its first chunk's JSON for a streamed answer); an error for a status
  // other than 200, naming the endpoint, the path and etcd's message.
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& json) const;
  absl::StatusOr<std::string> PostTo(const Endpoint& endpoint, const std::string& path,
                                     const std::string& json) const;

  std::string text_;
  std::vector<Endpoint> endpoints_;
  absl::Duration timeout_;
};

}  // namespace kvstore

#endif  // KVSTORE_COMMON_ETCD_CLIENT_H_
