#!/usr/bin/env python3
"""Launches a KVStore job: one scheduler, S kvservers and W workers, on 127.0.0.1 or over ssh.

Usage:
  python3 deploy/launch.py -n W [-s S] [--scheduler BIN] [--kvserver BIN]
      [--scheduler-arg=ARG ...] [--server-arg=ARG ...]
      [--timeout SECONDS] [--shutdown-timeout SECONDS] [--tls [--tls-mutual]]
      [--same-command] [--launcher ssh -H HOSTFILE [--host-ip IP] [--ssh-arg=ARG ...]]
      [--env NAME[=VALUE] ...] [--elastic] [--workers-started-by-command]
      [--etcd ENDPOINTS [--job NAME] [--standbys N]]
      -- worker_command [args ...]

The scheduler is started with --port=0 and reports the port it bound through a
file; the kvservers are then pointed at it, and W copies of the worker command
are run with the usual DMLC_* variables set (DMLC_ROLE=worker, DMLC_PS_ROOT_URI,
DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_WORKER_ID), and with
torch.distributed's, as torchrun sets them (RANK = DMLC_WORKER_ID, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR = worker 0's host, MASTER_PORT a free port), so that init_process_group() with
its default env:// rendezvous works in a worker.

Every process also gets KV_SECRET_FILE: a fresh job secret (mode 600, in the
launcher's temporary folder, deleted with it), so every call of the job is
authenticated. A KV_SECRET_FILE already set is used as it is.

With --tls, every link of the job is TLS: deploy/make-certs.sh makes a fresh CA
and a node certificate for 127.0.0.1 and localhost in the temporary folder, and
every process gets KV_TLS_CA, KV_TLS_CERT and KV_TLS_KEY naming them. With
--tls-mutual (implies --tls) the daemons also get --tls_mutual: they require a
client certificate signed by that CA, so only the job's own processes connect.
Without --tls, KV_TLS_* already set in the environment are passed on as they are.

Every line a process prints is relayed to stdout, prefixed with its role and
rank ("[scheduler] ", "[server 0] ", "[worker 1] ").

Exit status:
  0    all workers exited 0, then the scheduler and servers exited 0 by themselves
       (--elastic: the workers that remained exited 0, then the daemons 0)
  N    a worker exited with status N (the rest of the job is killed; --elastic: only
       when every worker failed)
  1    a daemon failed, did not shut down in time, or the job could not start
  124  the job ran longer than --timeout
  130/143/129  the launcher got SIGINT/SIGTERM/SIGHUP
Whatever happens, every process group started here is killed before exiting.

Pass daemon flags with the "=" form, e.g. --scheduler-arg=--register_timeout=30s.

--workers-started-by-command runs the worker command once, with the DMLC_* variables but
without DMLC_WORKER_ID, for a command that starts the W workers itself: torchrun
--nproc_per_node=W sets each worker's RANK and WORLD_SIZE, which the SDK reads when
DMLC_WORKER_ID is unset (kvstore.torch, docs/pytorch.md):

  python3 deploy/launch.py -n 2 --workers-started-by-command -- \
      torchrun --standalone --nproc_per_node=2 train.py

--etcd ENDPOINTS starts the scheduler with N standbys (--standbys, default 1), which elect
their leader through etcd (scheduler --etcd --job; docs/reliability.md); the kvservers and
workers find the leader there (--etcd --job, KV_ETCD_ENDPOINTS and KV_JOB). A scheduler that
dies is then logged, not fatal, while another runs: a standby takes over. --job names the job
in etcd (default: a fresh name).

--elastic runs an elastic job (docs/reliability.md): the scheduler gets --elastic (and
every process KV_ELASTIC=1, which a scheduler started by --same-command reads), so a worker
that dies or fails leaves the job and the others go on; the launcher then logs a worker
that exits non-zero and keeps the job running instead of ending it.

One command for every role (--same-command, as MXNet's tools/launch.py runs a job):
the scheduler, the servers and the workers all run the given command, with
DMLC_ROLE=scheduler|server|worker; the SDK's KVStore::Create makes a server or
scheduler process that daemon (KVStore::RunServer, docs/cluster.md). The launcher
picks a free port for the scheduler (DMLC_PS_ROOT_PORT) itself.

Several machines (--launcher ssh -H HOSTFILE, as MXNet's): the scheduler runs
here, on --host-ip; the servers, then the workers, go round-robin over the hosts
of HOSTFILE (one "host" or "host:ssh_port" per line, '#' comments) through
`ssh -o StrictHostKeyChecking=no -p PORT [--ssh-arg ...] HOST`, in this
directory on the remote host (a shared file system, as MXNet assumes). Each
remote process gets DMLC_*, KV_* and PS_* variables, those named by --env, and
DMLC_NODE_HOST=HOST; the job secret travels on the ssh connection's stdin into a
private temporary file on the remote host, never on a command line. When the
ssh connection closes (the launcher ends the job), the remote command's process
group gets SIGTERM. Without --same-command the servers run --kvserver (the same
path must exist on every host) bound to their host's address.
"""
import argparse
import atexit
import os
import shlex
import socket
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PROG = "launch.py"
HOST = "127.0.0.1"
POLL_S = 0.1          # how often process states are checked
KILL_GRACE_S = 3.0    # SIGTERM -> SIGKILL delay
PORT_WAIT_S = 30.0    # how long the scheduler may take to report its port
DAEMON_SETTLE_S = 1.5 # after a daemon fails, how long to wait for the scheduler's verdict


class JobEnd(Exception):
    """Ends the job early with an exit status and a one-line reason."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status, self.reason = status, reason


def describe(rc):
    return f"exited with status {rc}" if rc >= 0 else f"was killed by signal {-rc}"


class Job:
    """The processes of one job, their output relays and their cleanup."""

    def __init__(self, timeout):
        self.procs = []            # (name, Popen), in start order
        self.readers = []          # relay threads, one per pipe
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.got_signal = None     # set by the signal handler, acted on in check()
        self.cleaned = False

    def log(self, msg):
        with self.lock:
            sys.stdout.flush()
            print(f"{PROG}: {msg}", file=sys.stderr, flush=True)

    def on_signal(self, signum, _frame):
        # Only record it: raising here could leave a half-started child untracked.
        if self.got_signal is None:
            self.got_signal = signum

    def check(self):
        """Raises JobEnd if the launcher was signalled or the job ran out of time."""
        if self.got_signal is not None:
            name = signal.Signals(self.got_signal).name
            raise JobEnd(128 + self.got_signal, f"got {name}; stopping the job")
        if time.monotonic() > self.deadline:
            raise JobEnd(124, f"job timed out after {self.timeout:g} s; killing it")

    def _relay(self, name, pipe):
        prefix = f"[{name}] "
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode(errors="replace")
                if not line.endswith("\n"):
                    line += "\n"
                with self.lock:   # whole lines only, never interleaved
                    sys.stdout.write(prefix + line)
                    sys.stdout.flush()

    def start(self, name, cmd, env, stdin=subprocess.DEVNULL):
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=stdin,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)  # own group, killable as one
        except OSError as e:
            raise JobEnd(127 if name.startswith("worker") else 1,
                         f"cannot start {name} ({cmd[0]}): {e.strerror}")
        self.procs.append((name, proc))
        for pipe in (proc.stdout, proc.stderr):
            t = threading.Thread(target=self._relay, args=(name, pipe), daemon=True)
            t.start()
            self.readers.append(t)
        return proc

    @staticmethod
    def _killpg(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self):
        """SIGTERM every process group, SIGKILL after KILL_GRACE_S. Idempotent."""
        if self.cleaned:
            return
        self.cleaned = True
        live = [p for _, p in self.procs if p.poll() is None]
        # Groups whose leader already exited may still hold its children: signal all.
        for _, p in self.procs:
            self._killpg(p, signal.SIGTERM)
        end = time.monotonic() + KILL_GRACE_S
        while any(p.poll() is None for p in live) and time.monotonic() < end:
            time.sleep(0.05)
        for _, p in self.procs:
            self._killpg(p, signal.SIGKILL)
            p.wait()
        for t in self.readers:
            t.join(timeout=1.0)


def wait_for_port(job, sched, port_file):
    """Polls for the port the scheduler writes (decimal + newline) into port_file."""
    end = time.monotonic() + PORT_WAIT_S
    while True:
        try:
            with open(port_file) as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        if text.endswith("\n"):
            try:
                return int(text)
            except ValueError:
                raise JobEnd(1, f"scheduler wrote a bad port file: {text.strip()!r}")
        if sched.poll() is not None:
            raise JobEnd(1, f"scheduler {describe(sched.returncode)} before reporting its port")
        job.check()
        if time.monotonic() > end:
            raise JobEnd(1, f"scheduler did not report its port within {PORT_WAIT_S:g} s")
        time.sleep(POLL_S)


def write_secret(tmpdir):
    """Writes a fresh random job secret to a file only this user can read; returns its path."""
    path = os.path.join(tmpdir, "job.secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


def make_certs(tmpdir):
    """Makes a CA and node certificate with make-certs.sh; returns the KV_TLS_* variables."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make-certs.sh")
    certs = os.path.join(tmpdir, "tls")
    done = subprocess.run(["bash", script, certs, HOST, "localhost"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise JobEnd(1, f"cannot make the job's TLS certificates ({script}): "
                        f"{done.stdout.decode(errors='replace').strip()}")
    return {"KV_TLS_CA": os.path.join(certs, "ca.pem"),
            "KV_TLS_CERT": os.path.join(certs, "node.pem"),
            "KV_TLS_KEY": os.path.join(certs, "node.key")}


def free_port(host):
    """A port free on `host` now (the OS's choice), for a scheduler that cannot report its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def read_hostfile(path):
    """[(host, ssh_port)] from a hostfile: "host" or "host:port" per line, '#' comments."""
    hosts = []
    try:
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                host, _, port = line.rpartition(":") if line.count(":") == 1 else (line, "", "")
                if not host:
                    host, port = line, ""
                try:
                    hosts.append((host, int(port) if port else 22))
                except ValueError:
                    raise JobEnd(1, f"hostfile {path}: bad ssh port in {line!r}")
    except OSError as e:
        raise JobEnd(1, f"cannot read hostfile {path}: {e.strerror}")
    if not hosts:
        raise JobEnd(1, f"hostfile {path} lists no host")
    return hosts


# The remote side of an ssh launch: read the job secret from stdin into a private file, start
# the command in a session of its own, and SIGTERM that session when the connection closes.
REMOTE_WRAPPER = r"""
umask 077
secret=$(mktemp) || exit 1
IFS= read -r line && printf '%s\n' "$line" > "$secret"
export KV_SECRET_FILE="$secret"
cd {cwd} || exit 1
exec 3<&0
setsid {cmd} < /dev/null &
pid=$!
# A background job's stdin is /dev/null unless redirected: the watcher reads the connection's.
( cat <&3 > /dev/null; kill -TERM -- -$pid 2>/dev/null ) > /dev/null 2>&1 &
watcher=$!
wait $pid
rc=$?
kill $watcher 2>/dev/null
rm -f "$secret"
exit $rc
"""


def remote_variables(env, args):
    """The variables an ssh launch passes on: DMLC_*, KV_*, PS_* and those named by --env."""
    names = set(args.env_names)
    return {k: v for k, v in env.items()
            if k != "KV_SECRET_FILE" and (k.startswith(("DMLC_", "KV_", "PS_")) or k in names)}


def ssh_command(args, host, ssh_port, cmd, env):
    """The local ssh command line that runs `cmd` with `env`'s job variables on `host`."""
    exports = " ".join(f"export {k}={shlex.quote(v)};" for k, v in
                       sorted(remote_variables(env, args).items()))
    script = exports + REMOTE_WRAPPER.format(cwd=shlex.quote(os.getcwd()),
                                             cmd=" ".join(shlex.quote(c) for c in cmd))
    return ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes", "-p", str(ssh_port),
            *args.ssh_arg, host, "bash -c " + shlex.quote(script)]


def run(args, worker_cmd, job, tmpdir):
    """Runs the job; returns normally only if everything succeeded."""
    ns, nw = args.num_servers, args.num_workers
    base = {k: v for k, v in os.environ.items()
            if k not in ("DMLC_ROLE", "DMLC_WORKER_ID", "DMLC_SERVER_ID", "DMLC_PS_ROOT_PORT")}
    for pair in args.env_pairs:
        name, _, value = pair.partition("=")
        base[name] = value
    hosts = read_hostfile(args.hostfile) if args.launcher == "ssh" else None
    host_ip = args.host_ip or HOST
    common = {"DMLC_PS_ROOT_URI": host_ip, "DMLC_NUM_SERVER": str(ns),
              "DMLC_NUM_WORKER": str(nw)}
    if args.elastic:
        common["KV_ELASTIC"] = "1"
    # A fresh job secret, readable by this user only: every process of the job finds it
    # through KV_SECRET_FILE, so every call is authenticated (docs/security.md).
    if "KV_SECRET_FILE" not in os.environ:
        common["KV_SECRET_FILE"] = write_secret(tmpdir)
    # TLS on every link (docs/security.md): the job's own CA and certificate.
    tls_args = []
    if args.tls:
        common.update(make_certs(tmpdir))
        if args.tls_mutual:
            tls_args = ["--tls_mutual"]

    schedulers = []
    if args.etcd:
        # A leader and its standbys, elected through etcd; every node finds the leader there.
        common["KV_ETCD_ENDPOINTS"] = args.etcd
        common["KV_JOB"] = args.job
        for k in range(1 + args.standbys):
            port_file = os.path.join(tmpdir, f"scheduler-{k}.port")
            name = "scheduler" if k == 0 else f"scheduler {k}"
            proc = job.start(name,
                             [args.scheduler, f"--host={host_ip}", "--port=0",
                              f"--port_file={port_file}", f"--num_servers={ns}",
                              f"--num_workers={nw}", f"--etcd={args.etcd}", f"--job={args.job}",
                              *tls_args, *(["--elastic"] if args.elastic else []),
                              *args.scheduler_arg],
                             {**base, **common, "DMLC_ROLE": "scheduler"})
            schedulers.append((name, proc))
            port = wait_for_port(job, proc, port_file)
        sched = schedulers[0][1]
    elif args.same_command:
        # MXNet's way: the scheduler is the user's program too, so the launcher picks its port.
        port = free_port(host_ip)
        common["DMLC_PS_ROOT_PORT"] = str(port)
        sched = job.start("scheduler", worker_cmd, {**base, **common, "DMLC_ROLE": "scheduler"})
    else:
        port_file = os.path.join(tmpdir, "scheduler.port")
        sched = job.start("scheduler",
                          [args.scheduler, f"--host={host_ip}", "--port=0",
                           f"--port_file={port_file}", f"--num_servers={ns}",
                           f"--num_workers={nw}", *tls_args,
                           *(["--elastic"] if args.elastic else []), *args.scheduler_arg],
                          {**base, **common, "DMLC_ROLE": "scheduler"})
        port = wait_for_port(job, sched, port_file)
        common["DMLC_PS_ROOT_PORT"] = str(port)
    with job.lock:
        transport = ", mutual TLS" if args.tls_mutual else ", TLS" if args.tls else ""
        mode = ", one command for every role" if args.same_command else ""
        where = f", over ssh on {len(hosts)} hosts" if hosts else ""
        at = (f"{len(schedulers)} schedulers elected through etcd at {args.etcd} (job {args.job})"
              if args.etcd else f"scheduler at {host_ip}:{port}")
        print(f"{PROG}: {at}, {ns} servers, {nw} workers{transport}{mode}{where}", flush=True)

    def start_node(name, index, cmd, env):
        """Starts a server or worker here, or on the next host of the hostfile over ssh."""
        if hosts is None:
            return job.start(name, cmd, env)
        host, ssh_port = hosts[index % len(hosts)]
        env = {**env, "DMLC_NODE_HOST": host}
        proc = job.start(name, ssh_command(args, host, ssh_port, cmd, env), env,
                         stdin=subprocess.PIPE)
        secret = open(env["KV_SECRET_FILE"]).read().strip() if "KV_SECRET_FILE" in env else ""
        try:
            proc.stdin.write((secret + "\n").encode())
            proc.stdin.flush()
        except OSError:
            pass  # ssh already failed; its status says why.
        return proc

    daemons = schedulers if args.etcd else [("scheduler", sched)]
    for i in range(ns):
        env = {**base, **common, "DMLC_ROLE": "server", "DMLC_SERVER_ID": str(i)}
        if args.same_command:
            cmd = worker_cmd
        else:
            server_host = hosts[i % len(hosts)][0] if hosts else HOST
            to_scheduler = ([f"--etcd={args.etcd}", f"--job={args.job}"] if args.etcd
                            else [f"--scheduler={host_ip}:{port}"])
            cmd = [args.kvserver, f"--host={server_host}", "--port=0", *to_scheduler,
                   f"--rank={i}", *tls_args, *args.server_arg]
        daemons.append((f"server {i}", start_node(f"server {i}", i, cmd, env)))
    if args.workers_started_by_command:
        # One command starts the W workers itself (torchrun sets each one's RANK and
        # WORLD_SIZE, which a worker reads when DMLC_WORKER_ID is unset).
        workers = [start_node("workers", ns, worker_cmd,
                              {**base, **common, "DMLC_ROLE": "worker"})]
    else:
        # torch.distributed's variables too, as torchrun sets them, so that a worker's
        # init_process_group() (env://, e.g. the "kvstore" backend or gloo) needs no more.
        master = hosts[ns % len(hosts)][0] if hosts else host_ip
        torch_vars = {"MASTER_ADDR": master, "MASTER_PORT": str(free_port(host_ip)),
                      "WORLD_SIZE": str(nw)}
        workers = [start_node(f"worker {j}", ns + j, worker_cmd,
                              {**base, **common, **torch_vars, "DMLC_ROLE": "worker",
                               "DMLC_WORKER_ID": str(j), "RANK": str(j),
                               "LOCAL_RANK": str(j if hosts is None else j // len(hosts))})
                   for j in range(nw)]

    # Watch until every worker is done; the first failure ends the job (--elastic: the job
    # goes on without it, and ends failed only when every worker failed).
    lost = {}
    while True:
        job.check()
        for j, w in enumerate(workers):
            rc = w.poll()
            if rc is not None and rc != 0:
                if not args.elastic:
                    raise JobEnd(rc if rc > 0 else 1, f"worker {j} {describe(rc)}")
                if j not in lost:
                    lost[j] = rc
                    job.log(f"worker {j} {describe(rc)}; the job goes on without it (--elastic)")
        if args.elastic and len(lost) == nw:
            j, rc = next(iter(lost.items()))
            raise JobEnd(rc if rc > 0 else 1, f"every worker failed; worker {j} {describe(rc)}")
        # With standbys, a scheduler that dies is not the end while another runs.
        if args.etcd:
            for name, d in list(daemons):
                if name.startswith("scheduler") and d.poll() not in (None, 0):
                    if any(o.poll() is None for n, o in daemons if n.startswith("scheduler")):
                        job.log(f"{name} {describe(d.returncode)}; a standby takes over")
                        daemons.remove((name, d))
        # A daemon may exit 0 just before the last worker process does; that is fine.
        if any(d.poll() not in (None, 0) for _, d in daemons):
            # Servers refused by the scheduler exit at once and the scheduler a moment
            # later: give it that moment, so the report names the root cause first.
            end = time.monotonic() + DAEMON_SETTLE_S
            while sched.poll() is None and time.monotonic() < end:
                time.sleep(POLL_S)
            failed = [f"{name} {describe(d.returncode)}" for name, d in daemons
                      if d.poll() not in (None, 0)]
            raise JobEnd(1, "; ".join(failed) + " while workers were running")
        if all(w.poll() is not None for w in workers) and len(lost) < nw:
            break
        time.sleep(POLL_S)

    # All workers succeeded: the scheduler should now shut itself and the servers down.
    end = time.monotonic() + args.shutdown_timeout
    while any(d.poll() is None for _, d in daemons) and time.monotonic() < end:
        job.check()
        time.sleep(POLL_S)
    stuck = [name for name, d in daemons if d.poll() is None]
    if stuck:
        job.log(f"warning: {', '.join(stuck)} still running {args.shutdown_timeout:g} s "
                "after the workers finished; killing")
        job.kill_all()
    failed = [f"{name} did not exit by itself" if name in stuck
              else f"{name} {describe(d.returncode)}"
              for name, d in daemons if name in stuck or d.returncode != 0]
    if failed:
        raise JobEnd(1, "; ".join(failed))


def parse_args(argv):
    own, cmd = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog=PROG, usage="%(prog)s -n W [-s S] [options] -- worker_command ...",
                                description="Launch a KVStore job on 127.0.0.1 or, with --launcher ssh, on the hosts of a hostfile.")
    p.add_argument("-n", "--num-workers", type=int, required=True, help="number of workers")
    p.add_argument("-s", "--num-servers", type=int, help="number of kvservers (default: -n)")
    p.add_argument("--scheduler", default="bazel-bin/server/scheduler/scheduler",
                   help="scheduler binary (default: %(default)s)")
    p.add_argument("--kvserver", default="bazel-bin/server/kvserver",
                   help="kvserver binary (default: %(default)s)")
    p.add_argument("--scheduler-arg", action="append", default=[], metavar="ARG",
                   help="extra scheduler flag (repeatable; use --scheduler-arg=--flag=value)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra kvserver flag (repeatable; use --server-arg=--flag=value)")
    p.add_argument("--timeout", type=float, default=600, help="kill the job after this many seconds "
                   "and exit 124 (default: %(default)s)")
    p.add_argument("--shutdown-timeout", type=float, default=20, help="how long the daemons may take "
                   "to exit after the workers finish (default: %(default)s)")
    p.add_argument("--tls", action="store_true", help="TLS on every link, with a fresh CA and "
                   "certificate made by make-certs.sh")
    p.add_argument("--tls-mutual", action="store_true", help="like --tls, and the daemons "
                   "require client certificates (--tls_mutual)")
    p.add_argument("--same-command", action="store_true", help="run the command for every role "
                   "(scheduler, servers, workers) with DMLC_ROLE set, as MXNet's launcher does")
    p.add_argument("--launcher", choices=("local", "ssh"), default="local",
                   help="local: every process here; ssh: servers and workers on the hosts of -H")
    p.add_argument("-H", "--hostfile", help="ssh launcher: hosts, one 'host[:ssh_port]' a line")
    p.add_argument("--host-ip", help="the scheduler's address, which every node must reach "
                   "(default: 127.0.0.1 locally; with ssh, this host's name resolved unless "
                   "every host is loopback)")
    p.add_argument("--ssh-arg", action="append", default=[], metavar="ARG",
                   help="extra ssh option (repeatable; e.g. --ssh-arg=-i --ssh-arg=KEY)")
    p.add_argument("--elastic", action="store_true", help="an elastic job: a worker that dies "
                   "or fails leaves it and the others go on (scheduler --elastic)")
    p.add_argument("--workers-started-by-command", action="store_true",
                   help="run the worker command once, without DMLC_WORKER_ID: it starts the -n "
                   "workers itself (torchrun --nproc_per_node=W, which sets RANK and "
                   "WORLD_SIZE)")
    p.add_argument("--etcd", help="etcd endpoints (HOST:PORT,...): run the scheduler with "
                   "standbys elected through etcd, and every node finds the leader there")
    p.add_argument("--job", help="the job's name in etcd (default: a fresh one)")
    p.add_argument("--standbys", type=int, default=1,
                   help="with --etcd: standby schedulers besides the leader (default: %(default)s)")
    p.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="pass variable NAME (or set it to VALUE) to every process (repeatable)")
    args = p.parse_args(own)
    args.env_names = [e for e in args.env if "=" not in e]
    args.env_pairs = [e for e in args.env if "=" in e]
    args.tls = args.tls or args.tls_mutual
    if args.launcher == "ssh" and not args.hostfile:
        p.error("--launcher ssh needs -H HOSTFILE")
    if args.launcher == "ssh" and args.host_ip is None:
        try:
            hosts = [h for h, _ in read_hostfile(args.hostfile)]
        except JobEnd as e:
            p.error(e.reason)
        if not all(h == "localhost" or h.startswith("127.") for h in hosts):
            args.host_ip = socket.gethostbyname(socket.getfqdn())
    if args.num_servers is None:
        args.num_servers = args.num_workers
    if not cmd:
        p.error("missing worker command after --")
    if args.num_workers < 1 or args.num_servers < 1:
        p.error("-n and -s must be at least 1")
    if args.timeout <= 0 or args.shutdown_timeout <= 0:
        p.error("timeouts must be positive")
    if args.workers_started_by_command and (args.same_command or args.launcher == "ssh"):
        p.error("--workers-started-by-command runs one local command: not with --same-command "
                "or --launcher ssh")
    if args.etcd and args.same_command:
        p.error("--etcd starts the scheduler and its standbys: not with --same-command")
    if args.standbys < 0:
        p.error("--standbys must be 0 or more")
    if args.etcd and not args.job:
        args.job = f"launch-{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
    if args.same_command and (args.scheduler_arg or args.server_arg):
        p.error("--scheduler-arg and --server-arg do not apply with --same-command: the "
                "command runs every role and reads its settings from DMLC_*/KV_* variables")
    for what in () if args.same_command else ("scheduler", "kvserver"):
        path = getattr(args, what)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"{what} binary not found or not executable: {path} (build it, or pass --{what})")
    return args, cmd


def main(argv):
    args, worker_cmd = parse_args(argv)
    job = Job(args.timeout)
    atexit.register(job.kill_all)   # last resort if something unexpected escapes
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, job.on_signal)
    tmpdir = tempfile.mkdtemp(prefix="kvstore-launch-")
    status = 0
    try:
        run(args, worker_cmd, job, tmpdir)
    except JobEnd as e:
        job.log(e.reason)
        status = e.status
    finally:
        job.kill_all()
        shutil.rmtree(tmpdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
