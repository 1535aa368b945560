#!/usr/bin/env python3
"""Checks deploy/k8s and deploy/Containerfile offline against the binaries they run.

  k8s_manifests_test.py SCHEDULER KVSERVER DIST_TRAINING KVCTL ENVIRONMENT_CC FLAGS_USAGE_H \
      DEPLOY_MD

Parses every manifest (python3-yaml) and checks what can be checked without a cluster:
  - the kustomization lists every manifest; every object has a kind and a name;
  - every flag a container passes is one its binary lists in --help (run here), except the two
    flags still being added to the daemons, --advertise_host and --metrics_port, which may be
    missing from --help today (noted when they are);
  - ports agree: each daemon's --port is its "grpc" containerPort, its gRPC probes' port and its
    Service's targetPort; --metrics_port is the "metrics" port and the prometheus.io/port
    annotation; the kvservers and workers dial the scheduler's Service name and port;
  - sizes agree: kvserver replicas = KV_NUM_SERVERS = DMLC_NUM_SERVER, Job completions =
    parallelism = KV_NUM_WORKERS = DMLC_NUM_WORKER;
  - labels and selectors match (Services, StatefulSets, the NetworkPolicy);
  - every environment variable is one the project reads (common/environment.cc) or one a
    $(NAME) in the same container refers to;
  - the job secret: the kustomization makes Secret kvstore-job from job.secret; every container
    reads KV_SECRET_FILE from a copy (mode 0400) an init container makes from that Secret;
  - the kvserver's --memory_budget_bytes stays below its memory limit;
  - the Containerfile builds and copies every program the manifests run, installs the Debian
    package of every shared library those binaries need (readelf, dpkg -S), and the image tag is
    the programs' version;
  - docs/deploy.md's reference table lists every flag of the scheduler, kvserver and kvctl, and
    no flag that none of them has (but the two being added);
  - the pods run as local processes with their own commands, environment and init containers
    (what the cluster supplies - pod IP, Service name, field values, volumes - stood in for by
    127.0.0.1, free ports and a temporary folder) make a job that trains and ends with every
    process exiting 0.
Prints "test cases: N | N passed | N failed" (tests/run_tests.sh counts it).
"""
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
# Flags the daemons are gaining (bind vs advertised address; Prometheus metrics). Until they
# land, --help does not list them; exactly these may be absent.
PENDING_FLAGS = {"advertise_host", "metrics_port"}
# Shared libraries of the base image (debian:bookworm-slim).
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1"}
JOB_TIMEOUT_S = 60

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'}: {name}{'' if ok else ': ' + str(detail)}", flush=True)


def load():
    docs = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        with open(path) as f:
            docs[os.path.basename(path)] = [d for d in yaml.safe_load_all(f) if d]
    return docs


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", out, flags=re.M))


def flag_args(container):
    """{flag: value} of a container's args ("--name=value" or "--name")."""
    flags = {}
    for arg in container.get("args", []) + container.get("command", [])[1:]:
        m = re.fullmatch(r"--([A-Za-z0-9_]+)(?:=(.*))?", arg)
        if m:
            flags[m.group(1)] = m.group(2)
    return flags


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def env_value(container, name):
    e = env_of(container).get(name)
    return None if e is None else e.get("value")


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def quantity_bytes(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"([0-9]+)([A-Za-z]*)", str(q))
    return int(m.group(1)) * units.get(m.group(2), 1)


def main():
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    (scheduler_bin, kvserver_bin, training_bin, kvctl_bin, environment_cc, flags_usage_h,
     deploy_md) = sys.argv[1:]
    scheduler_bin, kvserver_bin, training_bin, kvctl_bin = (
        os.path.abspath(b) for b in (scheduler_bin, kvserver_bin, training_bin, kvctl_bin))
    docs = load()
    objects = [o for f, file_docs in docs.items() if f != "kustomization.yaml" for o in file_docs]
    by_kind = {}
    for o in objects:
        by_kind.setdefault((o["kind"], o["metadata"]["name"]), o)
    check("every object has apiVersion, kind and metadata.name",
          all(o.get("apiVersion") and o.get("kind") and o.get("metadata", {}).get("name")
              for o in objects), [o.get("kind") for o in objects])

    kustomization = docs["kustomization.yaml"][0]
    manifests = sorted(f for f in docs if f != "kustomization.yaml")
    check("kustomization.yaml lists every manifest", sorted(kustomization["resources"]) == manifests,
          f"{kustomization['resources']} vs {manifests}")

    sched_set = by_kind.get(("StatefulSet", "kvstore-scheduler"))
    server_set = by_kind.get(("StatefulSet", "kvstore-kvserver"))
    job = by_kind.get(("Job", "kvstore-worker"))
    sched_svc = by_kind.get(("Service", "kvstore-scheduler"))
    server_svc = by_kind.get(("Service", "kvstore-kvserver"))
    policy = by_kind.get(("NetworkPolicy", "kvstore-daemons"))
    if not all([sched_set, server_set, job, sched_svc, server_svc, policy]):
        check("the scheduler and kvserver Services and StatefulSets, the worker Job and the "
              "NetworkPolicy exist", False, sorted(by_kind))
        return finish()
    sched = pod_spec(sched_set)["containers"][0]
    server = pod_spec(server_set)["containers"][0]
    worker = pod_spec(job)["containers"][0]

    # Flags against --help.
    version = re.search(r'kVersion\[\] = "([0-9.]+)"', open(flags_usage_h).read()).group(1)
    programs = {"/usr/local/bin/kvstore-scheduler": scheduler_bin, "/usr/local/bin/kvserver": kvserver_bin,
                "/usr/local/bin/dist_training": training_bin, "/usr/local/bin/kvctl": kvctl_bin}
    for name, c in (("scheduler", sched), ("kvserver", server), ("worker", worker)):
        binary = programs.get(c["command"][0])
        if binary is None:
            check(f"{name} runs a program of the image", False, c["command"])
            continue
        used = set(flag_args(c))
        if not used:
            continue   # the worker takes none (and the example has no --help to ask)
        known = help_flags(binary)
        unknown = used - known - PENDING_FLAGS
        for pending in sorted(used & PENDING_FLAGS - known):
            print(f"NOTE: {name}: --{pending} is not in {os.path.basename(binary)} --help yet "
                  "(a flag being added to the daemons); tolerated")
        check(f"{name}: every flag is one {os.path.basename(binary)} --help lists "
              f"({len(used)} flags)", known and not unknown, f"unknown: {sorted(unknown)}")

    # Ports.
    def port_named(c, name):
        return next((p["containerPort"] for p in c.get("ports", []) if p.get("name") == name), None)

    for name, c, svc, template in (("scheduler", sched, sched_svc, sched_set["spec"]["template"]),
                                   ("kvserver", server, server_svc, server_set["spec"]["template"])):
        flags = flag_args(c)
        grpc = port_named(c, "grpc")
        probes = [c[p]["grpc"]["port"] for p in ("readinessProbe", "livenessProbe")
                  if "grpc" in c.get(p, {})]
        svc_ports = svc["spec"]["ports"]
        target = svc_ports[0].get("targetPort")
        check(f"{name}: --port, the grpc containerPort, both gRPC probes and the Service agree",
              flags.get("port") is not None and int(flags["port"]) == grpc and len(probes) == 2
              and all(p == grpc for p in probes) and target in ("grpc", grpc)
              and svc_ports[0]["port"] == grpc,
              f"--port={flags.get('port')} grpc={grpc} probes={probes} service={svc_ports}")
        metrics = port_named(c, "metrics")
        annotation = template["metadata"].get("annotations", {}).get("prometheus.io/port")
        check(f"{name}: --metrics_port, the metrics containerPort and prometheus.io/port agree",
              flags.get("metrics_port") is not None and int(flags["metrics_port"]) == metrics
              and annotation == str(metrics),
              f"--metrics_port={flags.get('metrics_port')} metrics={metrics} annotation={annotation}")

    sched_port = sched_svc["spec"]["ports"][0]["port"]
    sched_name = sched_svc["metadata"]["name"]
    check("the kvservers and workers dial the scheduler's Service name and port",
          env_value(server, "KV_SCHEDULER_HOST") == sched_name
          and env_value(server, "KV_SCHEDULER_PORT") == str(sched_port)
          and env_value(worker, "DMLC_PS_ROOT_URI") == sched_name
          and env_value(worker, "DMLC_PS_ROOT_PORT") == str(sched_port),
          f"service {sched_name}:{sched_port}")

    # Sizes.
    servers = server_set["spec"]["replicas"]
    workers = job["spec"]["completions"]
    check(f"sizes agree: {servers} servers, {workers} workers",
          env_value(sched, "KV_NUM_SERVERS") == str(servers)
          and env_value(worker, "DMLC_NUM_SERVER") == str(servers)
          and job["spec"]["parallelism"] == workers
          and env_value(sched, "KV_NUM_WORKERS") == str(workers)
          and env_value(worker, "DMLC_NUM_WORKER") == str(workers)
          and job["spec"].get("completionMode") == "Indexed"
          and sched_set["spec"]["replicas"] == 1,
          "replicas, completions, parallelism and the KV_NUM_*/DMLC_NUM_* values differ")
    rank_field = env_of(worker).get("DMLC_WORKER_ID", {}).get("valueFrom", {}).get("fieldRef", {})
    check("a worker's rank is its completion index",
          rank_field.get("fieldPath") == "metadata.annotations['batch.kubernetes.io/job-completion-index']",
          rank_field)

    # Labels and selectors.
    def matches(selector, labels):
        return all(labels.get(k) == v for k, v in selector.items())

    problems = []
    for svc, workload in ((sched_svc, sched_set), (server_svc, server_set)):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        if not matches(svc["spec"]["selector"], labels):
            problems.append(f"Service {svc['metadata']['name']} does not select its pods")
        if not matches(workload["spec"]["selector"]["matchLabels"], labels):
            problems.append(f"{workload['metadata']['name']}'s selector misses its template")
        if ("Service", workload["spec"]["serviceName"]) not in by_kind:
            problems.append(f"{workload['metadata']['name']}'s serviceName has no Service")
    other = sched_set["spec"]["template"]["metadata"]["labels"]
    if matches(server_svc["spec"]["selector"], other) or matches(
            sched_svc["spec"]["selector"], server_set["spec"]["template"]["metadata"]["labels"]):
        problems.append("a Service selects the other daemon's pods")
    if server_svc["spec"].get("clusterIP") != "None":
        problems.append("the kvserver Service is not headless")
    sel = policy["spec"]["podSelector"]
    for workload in (sched_set, server_set):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        ok = matches(sel.get("matchLabels", {}), labels) and all(
            labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", []))
        if not ok:
            problems.append(f"the NetworkPolicy does not cover {workload['metadata']['name']}")
    frm = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    if not matches(frm, job["spec"]["template"]["metadata"]["labels"]):
        problems.append("the NetworkPolicy does not admit the workers")
    for rule in policy["spec"]["ingress"]:
        for p in rule.get("ports", []):
            for c in (sched, server):
                if port_named(c, p["port"]) is None:
                    problems.append(f"the NetworkPolicy's port {p['port']} is not a port of {c['name']}")
    check("labels and selectors match (Services, StatefulSets, NetworkPolicy)", not problems, problems)

    # Environment variables.
    read = set(re.findall(r'"((?:KV|DMLC)_[A-Z_]+)"', open(environment_cc).read()))
    problems = []
    for w in (sched_set, server_set, job):
        for c in pod_spec(w)["containers"]:
            text = " ".join(c.get("command", []) + c.get("args", []) +
                            [str(e.get("value", "")) for e in c.get("env", [])])
            referenced = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text))
            for name in env_of(c):
                if name not in read and name not in referenced:
                    problems.append(f"{c['name']}: {name}")
            for name in referenced - set(env_of(c)):
                problems.append(f"{c['name']}: $({name}) refers to no variable of the container")
    check(f"every environment variable is read by the project ({len(read)} names in "
          "common/environment.cc) or referred to by $(NAME)", read and not problems, problems)

    # The job secret.
    generator = {g["name"]: g for g in kustomization.get("secretGenerator", [])}
    problems = []
    if "job.secret" not in generator.get("kvstore-job", {}).get("files", []):
        problems.append("the kustomization does not make Secret kvstore-job from job.secret")
    for w in (sched_set, server_set, job):
        spec = pod_spec(w)
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec["containers"]:
            path = env_value(c, "KV_SECRET_FILE")
            mount = next((m for m in c.get("volumeMounts", [])
                          if path and os.path.dirname(path) == m["mountPath"]), None)
            if mount is None:
                problems.append(f"{c['name']}: KV_SECRET_FILE={path} is not in a mounted volume")
                continue
            if "emptyDir" not in volumes[mount["name"]]:
                problems.append(f"{c['name']}: the secret's volume is not the init container's copy")
            # An init container copies the Secret's file there, mode 0400, owned by the user.
            user = spec["securityContext"]["runAsUser"]
            inits = [i for i in spec.get("initContainers", [])
                     if any(m["name"] == mount["name"] for m in i.get("volumeMounts", []))]
            script = " ".join(" ".join(i.get("command", [])) for i in inits)
            src_mounts = [m for i in inits for m in i.get("volumeMounts", [])
                          if "secret" in volumes[m["name"]]]
            ok = (inits and src_mounts and f"chmod 0400 {path}" in script
                  and f"chown {user}:{user} {path}" in script
                  and f"{src_mounts[0]['mountPath']}/job.secret" in script
                  and volumes[src_mounts[0]["name"]]["secret"]["secretName"] == "kvstore-job"
                  and volumes[src_mounts[0]["name"]]["secret"].get("defaultMode") == 0o400)
            if not ok:
                problems.append(f"{c['name']}: no init container copies Secret kvstore-job's "
                                f"job.secret to {path} with mode 0400 for user {user}")
    check("the job secret is Secret kvstore-job, mounted as a file and copied for each daemon "
          "and worker", not problems, problems)

    limit = quantity_bytes(server["resources"]["limits"]["memory"])
    budget = int(flag_args(server).get("memory_budget_bytes") or 0)
    check("the kvserver's --memory_budget_bytes is below its memory limit",
          0 < budget < limit, f"budget {budget}, limit {limit}")

    # The image.
    images = {c["image"] for w in (sched_set, server_set, job)
              for c in pod_spec(w)["containers"] + pod_spec(w).get("initContainers", [])}
    check(f"every container runs image kvstore:{version}", images == {f"kvstore:{version}"}, images)
    containerfile = open(os.path.join(HERE, "..", "Containerfile")).read()
    commands = {pod_spec(w)["containers"][0]["command"][0] for w in (sched_set, server_set, job)}
    copy = re.search(r"^COPY --from=build (.*) /usr/local/bin/$", containerfile, flags=re.M)
    copied = {"/usr/local/bin/" + os.path.basename(p) for p in copy.group(1).split()} if copy else set()
    targets = ("//server:kvserver", "//server/scheduler", "//client/kvctl", "//examples:dist_training")
    check("the Containerfile builds and installs every program the manifests run",
          commands <= copied and all(t in containerfile for t in targets),
          f"run {sorted(commands)}, copied {sorted(copied)}")
    stage = containerfile.split("FROM docker.io/library/debian:bookworm-slim", 1)[-1]
    installed = set(re.findall(r"^\s+([a-z0-9][a-z0-9.+-]+) \\$", stage, flags=re.M))
    needed, missing = set(), []
    for binary in (scheduler_bin, kvserver_bin, training_bin, kvctl_bin):
        dyn = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True).stdout
        needed |= set(re.findall(r"\(NEEDED\).*\[(.*)\]", dyn))
    # One dpkg -S for all of them: "package[, package]: path" per file found.
    paths = [f"{d}/{lib}" for lib in sorted(needed)
             for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu")]
    found = subprocess.run(["dpkg", "-S"] + paths, capture_output=True, text=True, timeout=60)
    owners = {}
    for line in found.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        owners.setdefault(os.path.basename(path), set()).update(
            p.strip().split(":")[0] for p in pkgs.split(","))
    for lib in sorted(needed):
        packages = owners.get(lib, set())
        if not packages & (installed | BASE_PACKAGES):
            missing.append(f"{lib} ({', '.join(sorted(packages)) or 'no package'})")
    check(f"the runtime image installs the package of each of {len(needed)} shared libraries",
          needed and not missing, f"missing: {missing}")

    # The reference table of docs/deploy.md.
    text = open(deploy_md).read()
    section = text.split("## Reference: flags and environment", 1)[-1].split("\n## ", 1)[0]
    documented = set()
    for row in section.splitlines():
        if row.startswith("| `--"):
            documented |= set(re.findall(r"`--([a-z_]+)`", row.split("|")[1]))
    binaries_flags = set()
    for binary in (scheduler_bin, kvserver_bin, kvctl_bin):
        binaries_flags |= help_flags(binary)
    check(f"docs/deploy.md's reference table lists the {len(binaries_flags)} flags of the "
          "scheduler, kvserver and kvctl, and no other",
          binaries_flags and not (binaries_flags - documented)
          and not (documented - binaries_flags - PENDING_FLAGS),
          f"undocumented: {sorted(binaries_flags - documented)}; documented but absent: "
          f"{sorted(documented - binaries_flags - PENDING_FLAGS)}")

    # The pods, run here as processes.
    known_flags = {b: help_flags(b) for b in (scheduler_bin, kvserver_bin)}
    ok, detail = run_pods([sched_set, server_set, job], programs, known_flags)
    check("the pods' own commands, run here as processes (init containers first), make a job: "
          "every process exits 0 and every worker trained", ok, detail)
    return finish()

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_pods(workloads, programs, known_flags):
    """Runs the job's pods as local processes and returns (ok, detail).

    Each pod's init containers, then its container, run the manifests' own commands and
    environment with what a cluster would supply replaced: the pod's IP is 127.0.0.1, the
    scheduler's Service name resolves to 127.0.0.1, the daemons listen on 127.0.0.1 rather than
    0.0.0.0 (a test stays on loopback), fixed ports become free ones (every pod here shares one
    host), /run/kvstore and /var/lib/kvstore live in a temporary folder, the pods' user
    (runAsUser) is this process's, and the pod index / completion index fields hold the pod's
    index. A flag still being added to the daemons (PENDING_FLAGS) that the binary does not list
    yet is left out.
    """
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    procs = []
    try:
        secret_src = os.path.join(tmp, "secret-src")
        os.makedirs(secret_src)
        with open(os.path.join(secret_src, "job.secret"), "w") as f:
            f.write(os.urandom(32).hex())
        ports = {}

        def port_for(pod, port):
            return ports.setdefault((pod if port != "9091" else "", port), str(free_port()))

        def rewrite(text, pod_dir, pod):
            text = re.sub(r"(/run/kvstore|/var/lib/kvstore)", lambda m: pod_dir + m.group(1), text)
            text = re.sub(r"(--(?:port|metrics_port)=|^)(9091|9092|9100)$",
                          lambda m: m.group(1) + port_for(pod, m.group(2)), text)
            text = "--host=127.0.0.1" if text == "--host=0.0.0.0" else text   # loopback only
            return "127.0.0.1" if text == "kvstore-scheduler" else text

        def container_env(c, index):
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            for e in c.get("env", []):
                if "value" in e:
                    value = str(e["value"])
                else:
                    path = e["valueFrom"]["fieldRef"]["fieldPath"]
                    value = {"status.podIP": "127.0.0.1"}.get(path, str(index))
                value = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), ""), value)
                env[e["name"]] = value
            return env

        for w in workloads:
            count = w["spec"].get("replicas", w["spec"].get("completions", 1))
            for index in range(count):
                pod = f"{w['metadata']['name']}-{index}"
                pod_dir = os.path.join(tmp, pod)
                os.makedirs(os.path.join(pod_dir, "run", "kvstore", "secret"))
                os.makedirs(os.path.join(pod_dir, "var", "lib", "kvstore"))
                os.symlink(secret_src, os.path.join(pod_dir, "run", "kvstore", "secret-src"))
                spec = pod_spec(w)
                user = spec["securityContext"]["runAsUser"]
                for init in spec.get("initContainers", []):
                    cmd = [rewrite(a, pod_dir, pod).replace(f"{user}:{user}",
                                                            f"{os.getuid()}:{os.getgid()}")
                           for a in init["command"]]
                    p = subprocess.run(cmd, env=container_env(init, index), capture_output=True,
                                       text=True, timeout=30)
                    if p.returncode != 0:
                        return False, f"{pod}: init container {init['name']} exited {p.returncode}: {p.stderr}"
                c = spec["containers"][0]
                env = container_env(c, index)
                env = {k: rewrite(v, pod_dir, pod) for k, v in env.items()}
                binary = programs[c["command"][0]]
                argv = [binary]
                for arg in c.get("args", []):
                    m = re.fullmatch(r"--([A-Za-z0-9_]+)(?:=.*)?", arg)
                    if m and m.group(1) in PENDING_FLAGS and m.group(1) not in known_flags.get(binary, set()):
                        continue
                    arg = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), ""), arg)
                    argv.append(rewrite(arg, pod_dir, pod))
                log = open(os.path.join(tmp, pod + ".log"), "w")
                procs.append((pod, subprocess.Popen(argv, env=env, stdout=log,
                                                     stderr=subprocess.STDOUT, cwd=pod_dir)))
                print(f"k8s_manifests_test: pod {pod}: {' '.join(argv[1:])} "
                      f"{' '.join(f'{k}={v}' for k, v in env.items() if k != 'PATH')}", flush=True)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        for _, p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        statuses = {name: p.poll() for name, p in procs}
        logs = {name: open(os.path.join(tmp, name + ".log")).read() for name, _ in procs}
        workers = [n for n in logs if n.startswith("kvstore-worker-")]
        trained = [n for n in workers if "test accuracy" in logs[n]]
        for n in trained:
            print(f"k8s_manifests_test: {n}: {logs[n].strip().splitlines()[-1]}")
        ok = all(s == 0 for s in statuses.values()) and workers and len(trained) == len(workers)
        return ok, (f"exit statuses {statuses} (None: running after {JOB_TIMEOUT_S} s): " +
                    " | ".join(f"{n}: {logs[n][-500:]}" for n in logs))
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def finish():
    passed = sum(results)
    print(f"test cases: {len(results)} | {passed} passed | {len(results) - passed} failed")
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
