#include "tests/bench/bench_job.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/job_auth.h"
#include "tests/job_secret.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace kvstore::bench {

// Die reports `message` and exits; the daemons and echo processes die with the benchmark
// (tests/process.h).
void Die(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, message.c_str());
  std::exit(1);
}

// Binary returns `flag` when set, else the runfile `path` of this binary: a regular file in
// the runfiles folder beside it (a copy made with `cp -rL`, whose MANIFEST still names the
// build it was copied from), else what the runfiles library finds.
std::string Binary(const std::string& flag, const char* argv0, const std::string& path) {
  if (!flag.empty()) return flag;
  const std::string copied = absl::StrCat(argv0, ".runfiles/kvstore/", path);
  struct stat info;
  if (lstat(copied.c_str(), &info) == 0 && S_ISREG(info.st_mode)) return copied;
  using bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  const std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv0, &error));
  if (runfiles == nullptr) Die(absl::StrCat("no runfiles to find ", path, " in: ", error));
  return runfiles->Rlocation("kvstore/" + path);
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

Tensor RandomTensor(std::mt19937_64& rng, size_t elements) {
  Tensor t = Tensor::Zeros(DType::kFloat32, {static_cast<int64_t>(elements)});
  std::uniform_real_distribution<float> dist(-1, 1);
  float* p = t.data_as<float>();
  for (size_t i = 0; i < elements; ++i) p[i] = dist(rng);
  return t;
}

namespace {

// JobSecurity: what the processes of a job are given (JobSpec's secret and tls).

JobSecurity MakeJobSecurity(const char* argv0, const std::string& tmp, const std::string& tag,
                            bool secret, bool tls) {
  JobSecurity security;
  if (secret) {
    security.secret_file = testing::WriteJobSecret(tmp);
    absl::StatusOr<std::string> read = ReadSecretFile(security.secret_file);
    if (!read.ok()) Die(read.status().ToString());
    security.workers.secret = *read;
  }
  if (tls) {
    const std::string script = Binary("", argv0, "deploy/make-certs.sh");
    security.certificates = absl::StrCat(tmp, "/kvbench-tls-", tag);
    std::filesystem::remove_all(security.certificates);
    std::filesystem::create_directories(security.certificates);
    testing::ProcessOptions quiet;
    quiet.log_path = security.certificates + "/make-certs.log";
    auto maker = Process::Start("make-certs.sh",
                                {"/bin/bash", script, security.certificates, "127.0.0.1"}, quiet);
    const absl::StatusOr<int> code =
        maker.ok() ? (*maker)->Wait(absl::Seconds(60)) : maker.status();
    if (!code.ok() || *code != 0) {
      Die(absl::StrCat("cannot make TLS certificates with ", script, ": ",
                       code.ok() ? (*maker)->output() : code.status().ToString()));
    }
    security.workers.tls.ca_file = security.certificates + "/ca.pem";
    security.workers.tls.cert_file = security.certificates + "/node.pem";
    security.workers.tls.key_file = security.certificates + "/node.key";
  }
  return security;
}

// StartDaemon starts a scheduler or kvserver, its output in `log`.
std::unique_ptr<Process> StartDaemon(const std::string& name, std::vector<std::string> argv,
                                     const std::string& log, const JobSecurity& security) {
  testing::ProcessOptions options;
  options.log_path = log;
  if (security.secret_file.empty()) {
    argv.push_back("--insecure");
  } else {
    options.env.emplace_back("KV_SECRET_FILE", security.secret_file);
  }
  if (security.workers.tls.enabled()) {
    options.env.emplace_back("KV_TLS_CA", security.workers.tls.ca_file);
    options.env.emplace_back("KV_TLS_CERT", security.workers.tls.cert_file);
    options.env.emplace_back("KV_TLS_KEY", security.workers.tls.key_file);
  }
  auto daemon = Process::Start(name, std::move(argv), std::move(options));
  if (!daemon.ok()) Die(daemon.status().ToString());
  return *std::move(daemon);
}

}  // namespace

std::unique_ptr<Job> StartJob(const char* argv0, int servers, int workers, const JobSpec& spec) {
  auto job = std::make_unique<Job>();
  const std::string tmp = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  const std::string tag =
      absl::StrCat(getpid(), "-", servers, "s", workers, "w", spec.observe ? "-observe" : "");
  const std::string port_file = absl::StrCat(tmp, "/kvbench-port-", tag);
  unlink(port_file.c_str());
  const std::string scheduler = Binary(spec.scheduler, argv0, "server/scheduler/scheduler");
  const std::string kvserver = Binary(spec.kvserver, argv0, "server/kvserver");
  job->security = MakeJobSecurity(argv0, tmp, tag, spec.secret, spec.tls);
  const std::string log_level = spec.observe ? "--log_level=info" : "--log_level=warn";
  const std::string metrics_port = spec.observe ? "--metrics_port=0" : "--metrics_port=-1";
  job->daemons.push_back(StartDaemon(
      "scheduler",
      std::vector<std::string>{
          scheduler, "--port=0", "--port_file=" + port_file,
          absl::StrCat("--num_servers=", servers), absl::StrCat("--num_workers=", workers),
          "--register_timeout=60s", log_level, metrics_port,
          absl::StrCat("--replicas=", spec.replicas),
          absl::StrCat("--signed_payloads=", spec.signed_payloads),
          spec.chunk_bytes > 0 ? absl::StrCat("--chunk_bytes=", spec.chunk_bytes) : log_level},
      absl::StrCat(tmp, "/kvbench-scheduler-", tag, ".log"), job->security));
  const absl::StatusOr<int> reported =
      job->daemons.back()->WaitForPortFile(port_file, absl::Seconds(30));
  if (!reported.ok()) Die(absl::StrCat(scheduler, ": ", reported.status().ToString()));
  const int port = *reported;
  for (int s = 0; s < servers; ++s) {
    std::vector<std::string> argv = {kvserver,
                                     absl::StrCat("--scheduler=127.0.0.1:", port),
                                     absl::StrCat("--rank=", s),
                                     "--updater=sum",
                                     absl::StrCat("--serving_threads=", spec.serving_threads),
                                     log_level,
                                     metrics_port};
    if (!spec.serving_poll.empty()) argv.push_back("--serving_poll=" + spec.serving_poll);
    job->daemons.push_back(StartDaemon(absl::StrCat("server ", s), std::move(argv),
                                       absl::StrCat(tmp, "/kvbench-server", s, "-", tag, ".log"),
                                       job->security));
  }
  job->workers.resize(workers);
  const std::shared_ptr<CompletionThread> completions =
      spec.shared_completion_thread ? NewCompletionThread() : nullptr;
  std::vector<std::thread> joining;
  for (int w = 0; w < workers; ++w) {
    joining.emplace_back([&job, &spec, w, port, completions] {
      DistOptions options;
      options.completion_thread = completions;
      options.scheduler_port = port;
      options.security = job->security.workers;
      options.requested_rank = w;
      options.register_timeout = absl::Seconds(60);
      if (spec.connections > 0) options.connections_per_server = spec.connections;
      options.local_transport = spec.local_path;
      if (spec.observe_workers) options.metrics_port = 0;
      auto store = KVStore::Create(spec.store_type, options);
      if (!store.ok()) Die(absl::StrCat("worker ", w, ": ", store.status().ToString()));
      job->workers[w] = *std::move(store);
    });
  }
  for (auto& t : joining) t.join();
  return job;
}

}  // namespace kvstore::bench
