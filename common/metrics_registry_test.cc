#include "common/metrics_registry.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/metrics_http.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

// ParseSamples reads `name{labels} value` lines into a map keyed by the text before the value.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

TEST_CASE("MetricsRegistry: counters and histograms from many threads render exact totals",
          "[metrics]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  MetricsRegistry registry;
  Counter* push =
      registry.AddCounter("kvstore_test_requests_total", "Requests.", {{"method", "push"}});
  Counter* pull =
      registry.AddCounter("kvstore_test_requests_total", "Requests.", {{"method", "pull"}});
  REQUIRE(registry.AddCounter("kvstore_test_requests_total", "x", {{"method", "push"}}) == push);
  Histogram* latency = registry.AddHistogram("kvstore_test_latency_seconds", "Latency.",
                                             {{"method", "push"}}, {0.001, 0.01, 0.1});
  Gauge* gauge = registry.AddGauge("kvstore_test_held_bytes", "Bytes \"held\".");
  constexpr int kThreads = 4;
  std::vector<std::vector<double>> values(kThreads);
  std::vector<int64_t> pushes(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    pushes[t] = rng.Int(1000, 5000);
    for (int i = 0; i < 300; ++i) values[t].push_back(rng.Uniform(0, 0.2));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = 0; i < pushes[t]; ++i) push->Increment();
      pull->Increment(3);
      for (double v : values[t]) latency->Observe(v);
    });
  }
  for (auto& t : threads) t.join();
  const double held = rng.Int(1, 1 << 30);
  gauge->Set(held);
  registry.AddCollector([](MetricsWriter* out) {
    out->Family("kvstore_test_nodes", "Nodes.", MetricsWriter::Type::kGauge);
    out->Sample("kvstore_test_nodes", {{"role", "server"}, {"host", "a\"b"}}, 2);
  });

  // The reference, computed independently.
  int64_t total_pushes = 0;
  double sum = 0;
  int64_t below[4] = {0, 0, 0, 0};  // <= 0.001, <= 0.01, <= 0.1, all
  for (int t = 0; t < kThreads; ++t) {
    total_pushes += pushes[t];
    for (double v : values[t]) {
      sum += v;
      if (v <= 0.001) ++below[0];
      if (v <= 0.01) ++below[1];
      if (v <= 0.1) ++below[2];
      ++below[3];
    }
  }
  const std::string text = registry.Render();
  INFO(text);
  CHECK(text.find("# TYPE kvstore_test_requests_total counter\n") != std::string::npos);
  CHECK(text.find("# TYPE kvstore_test_latency_seconds histogram\n") != std::string::npos);
  CHECK(text.find("# HELP kvstore_test_held_bytes Bytes \"held\".\n") != std::string::npos);
  const auto samples = ParseSamples(text);
  CHECK(samples.at("kvstore_test_requests_total{method=\"push\"}") == total_pushes);
  CHECK(samples.at("kvstore_test_requests_total{method=\"pull\"}") == 3 * kThreads);
  CHECK(samples.at("kvstore_test_latency_seconds_bucket{method=\"push\",le=\"0.001\"}") ==
        below[0]);
  CHECK(samples.at("kvstore_test_latency_seconds_bucket{method=\"push\",le=\"0.01\"}") == below[1]);
  CHECK(samples.at("kvstore_test_latency_seconds_bucket{method=\"push\",le=\"0.1\"}") == below[2]);
  CHECK(samples.at("kvstore_test_latency_seconds_bucket{method=\"push\",le=\"+Inf\"}") == below[3]);
  CHECK(samples.at("kvstore_test_latency_seconds_count{method=\"push\"}") == below[3]);
  CHECK(samples.at("kvstore_test_latency_seconds_sum{method=\"push\"}") ==
        Approx(sum).epsilon(1e-9));
  CHECK(samples.at("kvstore_test_held_bytes") == held);
  CHECK(samples.at("kvstore_test_nodes{role=\"server\",host=\"a\\\"b\"}") == 2);
}

TEST_CASE("MetricsHttpServer: GET /metrics on an OS-chosen port returns the registry",
          "[metrics][http]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  MetricsRegistry registry;
  AddProcessCollector(&registry);
  Counter* counter = registry.AddCounter("kvstore_test_total", "Test.");
  const int64_t n = rng.Int(1, 1000000);
  counter->Increment(n);
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  REQUIRE(server.ok());
  REQUIRE((*server)->port() > 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto response = client.Get("/metrics");
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->get_header_value("Content-Type").find("version=0.0.4") != std::string::npos);
  const auto samples = ParseSamples(response->body);
  CHECK(samples.at("kvstore_test_total") == n);
  CHECK(samples.at("process_resident_memory_bytes") > 1e5);
  CHECK(samples.at("process_open_fds") >= 1);

  SECTION("a port in use is refused with the address named") {
    auto second = MetricsHttpServer::Start("127.0.0.1", (*server)->port(), &registry);
    REQUIRE_FALSE(second.ok());
    CHECK(second.status().code() == absl::StatusCode::kUnavailable);
    CHECK(std::string(second.status().message()).find(std::to_string((*server)->port())) !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace kvstore
