#!/usr/bin/env python3
"""Tests the systemd units of deploy/systemd without a running systemd.

  systemd_units_test.py SCHEDULER KVSERVER DIST_TRAINING

1. `systemd-analyze verify` passes, without a warning, on kvstore-scheduler.service and on
   kvserver@0.service, each alone and with tls.conf as a drop-in (copies whose ExecStart names
   the binaries given, which exist).
2. `systemd-analyze security --offline=yes` rates both units' exposure at most 2.0 (hardened).
3. The units' commands run a job: the test reads each unit's [Service] section, builds the
   command and environment systemd would (EnvironmentFile, Environment, LoadCredential as %d,
   %i, %S, ${VAR} and $VAR expansion), starts the scheduler and kvserver@0 and kvserver@1 that
   way on 127.0.0.1, and runs two examples/dist_training workers against them: every process
   exits 0 and both workers report their test accuracy.
Prints "test cases: N | N passed | N failed" (tests/run_tests.sh counts it).
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"scheduler": "kvstore-scheduler.service", "kvserver": "kvserver@.service"}
INSTALLED = {"scheduler": "/usr/local/bin/kvstore-scheduler", "kvserver": "/usr/local/bin/kvserver"}
JOB_TIMEOUT_S = 60
MAX_EXPOSURE = 2.0

results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}: {name}{'' if ok else ': ' + detail}", flush=True)


def unit_copy(directory, unit, binaries, dropin=False):
    """Writes `unit` into `directory` with ExecStart naming the real binary; returns its path."""
    text = open(os.path.join(HERE, UNITS[unit])).read()
    text = text.replace(INSTALLED[unit], binaries[unit])
    path = os.path.join(directory, UNITS[unit])
    with open(path, "w") as f:
        f.write(text)
    if dropin:
        os.makedirs(path + ".d", exist_ok=True)
        shutil.copy(os.path.join(HERE, "tls.conf"), os.path.join(path + ".d", "tls.conf"))
    return path


def verify(tmp, binaries):
    for dropin in (False, True):
        for unit, name in (("scheduler", "kvstore-scheduler.service"),
                           ("kvserver", "kvserver@0.service")):
            d = tempfile.mkdtemp(dir=tmp)
            unit_copy(d, unit, binaries, dropin)
            # Run from the folder so the instance name finds its template beside it.
            p = subprocess.run(["systemd-analyze", "verify", name], cwd=d, capture_output=True,
                               text=True, timeout=60,
                               env={**os.environ, "SYSTEMD_UNIT_PATH": d + ":"})
            out = (p.stdout + p.stderr).strip()
            check(f"systemd-analyze verify {name}{' + tls.conf' if dropin else ''}",
                  p.returncode == 0 and out == "", f"status {p.returncode}: {out}")


def security(tmp, binaries):
    for unit, name in (("scheduler", "kvstore-scheduler.service"),
                       ("kvserver", "kvserver@0.service")):
        d = tempfile.mkdtemp(dir=tmp)
        unit_copy(d, unit, binaries)
        p = subprocess.run(["systemd-analyze", "security", "--offline=yes", name], cwd=d,
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "SYSTEMD_UNIT_PATH": d + ":"})
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout)
        level = float(m.group(1)) if m else None
        check(f"systemd-analyze security {name}: exposure {level}",
              level is not None and level <= MAX_EXPOSURE,
              f"status {p.returncode}, wanted at most {MAX_EXPOSURE}: {p.stdout[-2000:]}{p.stderr}")


def service_section(path):
    """The [Service] settings of a unit file, as (key, value) in order."""
    settings, section = [], None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            settings.append((key, value))
    return settings


def read_env_file(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def expand_specifiers(text, instance, creds, state):
    return (text.replace("%i", instance).replace("%d", creds).replace("%S", state)
            .replace("%%", "%"))


def command_line(unit_path, instance, creds_root, state, env_file):
    """Returns (argv, environment, credentials dir) systemd would use for the unit."""
    creds = os.path.join(creds_root, f"{os.path.basename(unit_path)}-{instance or 'main'}")
    os.makedirs(creds, mode=0o700)
    env, exec_start = {}, None
    for key, value in service_section(unit_path):
        value = expand_specifiers(value, instance, creds, state)
        if key == "EnvironmentFile":
            env.update(read_env_file(env_file))   # the test's kvstore.env stands for the file
        elif key == "Environment":
            for assignment in shlex.split(value):
                k, _, v = assignment.partition("=")
                env[k] = v
        elif key == "LoadCredential":
            cred_id, _, source = value.partition(":")
            source = {"/etc/kvstore/job.secret": env_file + ".secret"}.get(source, source)
            dest = os.path.join(creds, cred_id)
            shutil.copy(source, dest)
            os.chmod(dest, 0o400)   # as systemd makes it: readable by the service's user only
        elif key == "ExecStart":
            exec_start = value
    argv = []
    for word in shlex.split(exec_start):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):      # $VAR: split into words
            argv.extend(env.get(word[1:], "").split())
        else:                                                     # ${VAR}: one word
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""),
                               word))
    return argv, env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp, binaries, training):
    d = tempfile.mkdtemp(dir=tmp)
    units = {u: unit_copy(d, u, binaries) for u in UNITS}
    env_file = os.path.join(d, "kvstore.env")
    port = free_port()
    # The installed example, with this job's values.
    text = open(os.path.join(HERE, "kvstore.env")).read()
    values = {"KV_SCHEDULER_HOST": "127.0.0.1", "KV_SCHEDULER_PORT": str(port),
              "KV_NUM_SERVERS": "2", "KV_NUM_WORKERS": "2",
              "KVSTORE_SCHEDULER_BIND": "127.0.0.1", "KVSTORE_KVSERVER_BIND": "127.0.0.1",
              "KVSTORE_SCHEDULER_FLAGS": "--register_timeout=60s",
              "KVSTORE_KVSERVER_FLAGS": "--register_timeout=60s"}
    for k, v in values.items():
        text, n = re.subn(rf"^{k}=.*$", f"{k}={v}", text, flags=re.M)
        if n != 1:
            check(f"kvstore.env sets {k}", False, "not found in deploy/systemd/kvstore.env")
            return
    with open(env_file, "w") as f:
        f.write(text)
    with open(env_file + ".secret", "w") as f:
        f.write(os.urandom(32).hex())
    os.chmod(env_file + ".secret", 0o600)
    creds_root, state = os.path.join(d, "credentials"), os.path.join(d, "state")
    os.makedirs(state)

    procs = []
    try:
        for unit, instance in (("scheduler", ""), ("kvserver", "0"), ("kvserver", "1")):
            argv, env = command_line(units[unit], instance, creds_root, state, env_file)
            print(f"systemd_units_test: {UNITS[unit].replace('@', '@' + instance)}: "
                  f"{shlex.join(argv)}", flush=True)
            log = open(os.path.join(d, f"{unit}{instance}.log"), "w")
            procs.append((f"{unit}{instance}", subprocess.Popen(
                argv, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                stdout=log, stderr=subprocess.STDOUT, cwd=d)))
        # The workers: the job's variables, as a worker host's environment would hold them.
        worker_env = {k: v for k, v in read_env_file(env_file).items() if k.startswith("KV_")}
        worker_env["KV_SECRET_FILE"] = env_file + ".secret"
        for rank in range(2):
            log = open(os.path.join(d, f"worker{rank}.log"), "w")
            procs.append((f"worker{rank}", subprocess.Popen(
                [training], env={"PATH": os.environ.get("PATH", ""), **worker_env,
                                 "KV_RANK": str(rank)},
                stdout=log, stderr=subprocess.STDOUT, cwd=d)))
        deadline = time.monotonic() + JOB_TIMEOUT_S
        for name, p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        statuses = {name: p.poll() for name, p in procs}
        logs = {name: open(os.path.join(d, f"{name}.log")).read() for name, _ in procs}
        accuracy = [logs[f"worker{r}"] for r in range(2) if "test accuracy" in logs[f"worker{r}"]]
        ok = all(s == 0 for s in statuses.values()) and len(accuracy) == 2
        for r in range(2):
            lines = [l for l in logs[f"worker{r}"].splitlines() if "accuracy" in l]
            print(f"systemd_units_test: worker {r}: {lines}")
        check("the units' commands run a job: scheduler, kvserver@0, kvserver@1 and 2 workers "
              "exit 0, both workers trained", ok,
              f"exit statuses {statuses} (None: still running after {JOB_TIMEOUT_S} s); logs: " +
              " | ".join(f"{n}: {logs[n][-600:]}" for n in logs))
        checkpoint_root = os.path.join(state, "kvstore", "kvserver-0")
        check("kvserver@0's checkpoint root is its state folder", os.path.isdir(checkpoint_root),
              f"{checkpoint_root} was not created")
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    binaries = {"scheduler": os.path.abspath(sys.argv[1]), "kvserver": os.path.abspath(sys.argv[2])}
    training = os.path.abspath(sys.argv[3])
    if shutil.which("systemd-analyze") is None:
        print("SKIPPED: systemd-analyze is not installed (deploy/install-deps.sh installs systemd)")
        print("test cases: 0 | 0 passed | 0 failed")
        return 0
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    try:
        verify(tmp, binaries)
        security(tmp, binaries)
        run_job(tmp, binaries, training)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    passed = sum(results)
    print(f"test cases: {len(results)} | {passed} passed | {len(results) - passed} failed")
    return 0 if passed == len(results) and results else 1


if __name__ == "__main__":
    sys.exit(main())
