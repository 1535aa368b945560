#include "common/advertise.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvstore {
namespace {

// AddressText returns the numeric text of an IPv4 or IPv6 socket address ("" otherwise).
std::string AddressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
              sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

bool IsLinkLocal6(const sockaddr* address) {
  return address->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
}

bool IsLoopbackAddress(const std::string& text) {
  return text.rfind("127.", 0) == 0 || text == "::1";
}

// ResolvedHostName returns this machine's host name resolved to a non-loopback address, or
// the name itself.
std::string ResolvedHostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &found) != 0) return name;
  std::string chosen;
  for (addrinfo* a = found; a != nullptr && chosen.empty(); a = a->ai_next) {
    const std::string text = AddressText(a->ai_addr);
    if (!text.empty() && !IsLoopbackAddress(text) && !IsLinkLocal6(a->ai_addr)) chosen = text;
  }
  freeaddrinfo(found);
  return chosen.empty() ? std::string(name) : chosen;
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" ||
         host == "0:0:0:0:0:0:0:0";
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos && !host.empty() && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError("cannot list the network interfaces (getifaddrs failed)");
  }
  std::string v4, v6;
  std::set<std::string> names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const std::string text = AddressText(i->ifa_addr);
    if (text.empty()) continue;
    names.insert(i->ifa_name);
    if (name != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = text;
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty() && !IsLinkLocal6(i->ifa_addr)) {
      v6 = text;
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::NotFoundError(absl::StrCat(
      "network interface \"", name,
      "\" (DMLC_INTERFACE) has no address; interfaces with one: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::string> ChooseAdvertiseHost(const std::string& flag,
                                                const std::string& bind_host,
                                                const JobEnvironment& env) {
  std::string host;
  std::string source;
  if (!flag.empty()) {
    host = flag;
    source = "--advertise_host";
  } else if (env.node_host.has_value()) {
    host = *env.node_host;
    source = "DMLC_NODE_HOST";
  } else if (env.interface.has_value()) {
    absl::StatusOr<std::string> address = InterfaceAddress(*env.interface);
    if (!address.ok()) return address.status();
    host = *address;
    source = "DMLC_INTERFACE";
  } else if (!IsWildcardHost(bind_host)) {
    return bind_host;
  } else {
    return ResolvedHostName();
  }
  if (IsWildcardHost(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is the wildcard address \"", host,
                     "\", which no peer can connect to: advertise this machine's own address"));
  }
  return host;
}

}  // namespace kvstore
