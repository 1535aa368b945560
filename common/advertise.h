// Advertised addresses: the host a daemon (or worker) tells the rest of the job to connect to,
// as opposed to the address it binds.
//
// A daemon binds `--host` (server/daemon_options.h chooses it when unset; 0.0.0.0 or :: for
// every interface) and
// registers `host:port` with the scheduler under the address ChooseAdvertiseHost picks. On a
// cluster the two differ: a kvserver bound to 0.0.0.0 must advertise an address the workers
// can reach, never the wildcard itself.
#ifndef KVSTORE_COMMON_ADVERTISE_H_
#define KVSTORE_COMMON_ADVERTISE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/environment.h"

namespace kvstore {

// IsWildcardHost is true for the addresses that mean "every interface": "", 0.0.0.0, ::, [::].
bool IsWildcardHost(absl::string_view host);

// FormatHostPort returns "host:port", with an IPv6 address in brackets ("[::1]:9091").
std::string FormatHostPort(absl::string_view host, int port);

// InterfaceAddress returns the address of the network interface `name` (its first IPv4
// address, else its first IPv6 address that is not link-local). NotFound naming the interface
// and listing the interfaces that have an address when it has none or does not exist.
absl::StatusOr<std::string> InterfaceAddress(const std::string& name);

// ChooseAdvertiseHost picks the advertised host, the first that applies:
//   1. `flag` (--advertise_host) when not empty;
//   2. DMLC_NODE_HOST (KV_NODE_HOST) from `env`;
//   3. the address of the interface DMLC_INTERFACE (KV_INTERFACE) names;
//   4. `bind_host` when it is not a wildcard;
//   5. this machine's host name resolved to an address that is not loopback (the name itself
//      when it does not resolve).
// InvalidArgument when the choice is a wildcard (0.0.0.0, ::), which no peer can connect to;
// InterfaceAddress's NotFound for an interface without an address.
absl::StatusOr<std::string> ChooseAdvertiseHost(const std::string& flag,
                                                const std::string& bind_host,
                                                const JobEnvironment& env);

}  // namespace kvstore

#endif  // KVSTORE_COMMON_ADVERTISE_H_
