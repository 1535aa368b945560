#include "common/etcd_client.h"

#include <google/protobuf/util/json_util.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "proto/etcd_gateway.pb.h"

namespace kvstore {
namespace {

// Wait polls `fd` for `events` until `deadline`; DeadlineExceeded naming `what` otherwise.
absl::Status Wait(int fd, short events, absl::Time deadline, const std::string& what) {
  for (;;) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return absl::DeadlineExceededError(absl::StrCat(what, ": no answer in time"));
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": poll: ", std::strerror(errno)));
    }
  }
}

// Dechunk decodes an HTTP/1.1 chunked body; false when it is malformed or cut short.
bool Dechunk(absl::string_view body, std::string* out) {
  while (!body.empty()) {
    const size_t line_end = body.find("\r\n");
    if (line_end == absl::string_view::npos) return false;
    absl::string_view size_text = body.substr(0, line_end);
    size_text = size_text.substr(0, size_text.find(';'));
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size)) return false;
    body.remove_prefix(line_end + 2);
    if (size == 0) return true;
    if (body.size() < size + 2) return false;
    out->append(body.data(), size);
    body.remove_prefix(size + 2);
  }
  return false;
}

template <typename Message>
absl::Status FromJson(absl::string_view json, Message* message, const std::string& what) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status =
      google::protobuf::util::JsonStringToMessage(std::string(json), message, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat(what, ": etcd's answer does not parse (",
                                            status.ToString(), "): ", json.substr(0, 200)));
  }
  return absl::OkStatus();
}

template <typename Message>
std::string ToJson(const Message& message) {
  // etcd's own field names ("create_revision"), which its gateway reads.
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace

absl::StatusOr<EtcdClient> EtcdClient::Create(const std::string& endpoints,
                                              absl::Duration timeout) {
  std::vector<Endpoint> parsed;
  for (absl::string_view one : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    one = absl::StripAsciiWhitespace(one);
    absl::ConsumePrefix(&one, "http://");
    absl::ConsumeSuffix(&one, "/");
    const size_t colon = one.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(one.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint \"", one, "\" is not HOST:PORT (e.g. 127.0.0.1:2379)"));
    }
    std::string host(one.substr(0, colon));
    if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
      host = host.substr(1, host.size() - 2);
    }
    parsed.push_back(Endpoint{std::move(host), absl::StrCat(port)});
  }
  if (parsed.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  return EtcdClient(endpoints, std::move(parsed), timeout);
}

absl::StatusOr<std::string> EtcdClient::Post(const std::string& path,
                                             const std::string& json) const {
  absl::Status last;
  for (const Endpoint& endpoint : endpoints_) {
    absl::StatusOr<std::string> body = PostTo(endpoint, path, json);
    // Another endpoint is tried only when this one could not be reached.
    if (body.ok() || !absl::IsUnavailable(body.status())) return body;
    last = body.status();
  }
  return last;
}

absl::StatusOr<std::string> EtcdClient::PostTo(const Endpoint& endpoint, const std::string& path,
                                               const std::string& json) const {
  const std::string what = absl::StrCat("etcd at ", endpoint.host, ":", endpoint.port, path);
  const absl::Time deadline = absl::Now() + timeout_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(endpoint.host.c_str(), endpoint.port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat(what, ": ", gai_strerror(rc)));
  }
  UniqueFd fd;
  std::string refused;
  for (addrinfo* a = found; a != nullptr && !fd.ok(); a = a->ai_next) {
    UniqueFd attempt(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol));
    if (!attempt.ok()) continue;
    if (connect(attempt.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      refused = std::strerror(errno);
      continue;
    }
    if (!Wait(attempt.get(), POLLOUT, deadline, what).ok()) continue;
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(attempt.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      refused = std::strerror(error);
      continue;
    }
    fd = std::move(attempt);
  }
  freeaddrinfo(found);
  if (!fd.ok()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": cannot connect", refused.empty() ? "" : " (" + refused + ")"));
  }
  const std::string request =
      absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", endpoint.host, ":", endpoint.port,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", json.size(),
                   "\r\nConnection: close\r\n\r\n", json);
  for (size_t sent = 0; sent < request.size();) {
    RETURN_IF_ERROR(Wait(fd.get(), POLLOUT, deadline, what));
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  // The answer: read until etcd closes the connection (Connection: close), or a streamed
  // answer's first message has arrived in full.
  std::string answer;
  char buffer[16384];
  for (;;) {
    const size_t head_end = answer.find("\r\n\r\n");
    if (head_end != std::string::npos &&
        absl::StrContains(absl::AsciiStrToLower(answer.substr(0, head_end)),
                          "transfer-encoding: chunked")) {
      // A keep-alive answers as a stream: its first chunk is the whole answer.
      absl::string_view rest = absl::string_view(answer).substr(head_end + 4);
      const size_t line_end = rest.find("\r\n");
      uint64_t size = 0;
      if (line_end != absl::string_view::npos &&
          absl::SimpleHexAtoi(rest.substr(0, rest.substr(0, line_end).find(';')), &size) &&
          rest.size() >= line_end + 2 + size) {
        break;
      }
    }
    RETURN_IF_ERROR(Wait(fd.get(), POLLIN, deadline, what));
    const ssize_t n = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat(what, ": recv: ", std::strerror(errno)));
    }
    answer.append(buffer, static_cast<size_t>(n));
    if (answer.size() > (1 << 20)) {
      return absl::InternalError(absl::StrCat(what, ": the answer is over 1 MiB"));
    }
  }
  const size_t head_end = answer.find("\r\n\r\n");
  if (head_end == std::string::npos || !absl::StartsWith(answer, "HTTP/1.")) {
    return absl::UnavailableError(
        absl::StrCat(what, ": not an HTTP answer: ", answer.substr(0, 100)));
  }
  const std::string head = absl::AsciiStrToLower(answer.substr(0, head_end));
  std::string body = answer.substr(head_end + 4);
  if (absl::StrContains(head, "transfer-encoding: chunked")) {
    std::string decoded;
    Dechunk(body, &decoded);  // A streamed answer stops after its first chunk: not an error.
    body = std::move(decoded);
  }
  const std::vector<std::string> status_line =
      absl::StrSplit(answer.substr(0, answer.find("\r\n")), ' ');
  if (status_line.size() < 2 || status_line[1] != "200") {
    return absl::FailedPreconditionError(absl::StrCat(what, " answered ",
                                                      status_line.size() > 1 ? status_line[1] : "?",
                                                      ": ", body.substr(0, 300)));
  }
  return body;
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) const {
  etcd::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  ASSIGN_OR_RETURN(const std::string body, Post("/v3/lease/grant", ToJson(request)));
  etcd::LeaseGrantResponse response;
  RETURN_IF_ERROR(FromJson(body, &response, "granting a lease"));
  if (!response.error().empty() || response.id() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd granted no lease: ", response.error().empty() ? body : response.error()));
  }
  return response.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease) const {
  etcd::LeaseKeepAliveRequest request;
  request.set_id(lease);
  ASSIGN_OR_RETURN(const std::string body, Post("/v3/lease/keepalive", ToJson(request)));
  etcd::LeaseKeepAliveResult result;
  RETURN_IF_ERROR(FromJson(body.substr(0, body.find('\n')), &result, "keeping a lease alive"));
  if (result.result().ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return absl::Seconds(result.result().ttl());
}

absl::Status EtcdClient::Revoke(int64_t lease) const {
  etcd::LeaseRevokeRequest request;
  request.set_id(lease);
  return Post("/v3/lease/revoke", ToJson(request)).status();
}

absl::StatusOr<bool> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value,
                                             int64_t lease, std::string* holder) const {
  etcd::TxnRequest txn;
  etcd::Compare* absent = txn.add_compare();
  absent->set_target(etcd::Compare::CREATE);
  absent->set_result(etcd::Compare::EQUAL);
  absent->set_key(key);
  absent->set_create_revision(0);
  etcd::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(key);
  ASSIGN_OR_RETURN(const std::string body, Post("/v3/kv/txn", ToJson(txn)));
  etcd::TxnResponse response;
  RETURN_IF_ERROR(FromJson(body, &response, "creating " + key));
  if (response.succeeded()) return true;
  if (holder != nullptr) {
    holder->clear();
    for (const etcd::ResponseOp& op : response.responses()) {
      for (const etcd::KeyValue& kv : op.response_range().kvs()) *holder = kv.value();
    }
  }
  return false;
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value) const {
  etcd::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  return Post("/v3/kv/put", ToJson(request)).status();
}

absl::StatusOr<std::string> EtcdClient::Get(const std::string& key) const {
  etcd::RangeRequest request;
  request.set_key(key);
  ASSIGN_OR_RETURN(const std::string body, Post("/v3/kv/range", ToJson(request)));
  etcd::RangeResponse response;
  RETURN_IF_ERROR(FromJson(body, &response, "reading " + key));
  if (response.kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("etcd at ", text_, " has no key ", key));
  }
  return response.kvs(0).value();
}

}  // namespace kvstore
