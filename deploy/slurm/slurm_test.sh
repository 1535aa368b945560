#!/usr/bin/env bash
# Slurm for real: starts munged (a throwaway key, its own socket and folders), slurmctld and
# slurmd on this machine with a throwaway configuration (one node with 2 CPUs, no cgroups), all
# in a temporary folder on free ports; submits deploy/slurm/kvstore.sbatch with sbatch to run
# examples/dist_training twice (1 scheduler, 2 kvservers, 2 workers; then 1 kvserver and 2
# workers with --tls); waits for each job (bounded) and checks, from the job's output file,
# scontrol and slurmctld's job-completion file, that training finished on every worker and that
# every task and the job exited 0 (and that the TLS job's daemons listened with TLS). Stops
# every daemon it started, by PID. Prints "SKIPPED: reason" when Slurm or munge cannot start
# here, and "test cases: N | N passed | N failed" (tests/run_tests.sh counts it).
#
#   slurm_test.sh SCHEDULER KVSERVER DIST_TRAINING SBATCH_SCRIPT MAKE_CERTS
set -uo pipefail

[ $# -eq 5 ] || { echo "usage: $0 SCHEDULER KVSERVER DIST_TRAINING SBATCH_SCRIPT MAKE_CERTS" >&2; exit 2; }
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
scheduler_bin=$(abs "$1") kvserver_bin=$(abs "$2") training_bin=$(abs "$3") sbatch_script=$(abs "$4")
make_certs=$(abs "$5")
JOB_WAIT_S=${KV_SLURM_JOB_WAIT_S:-120}   # the whole job, queued to completed
DAEMON_WAIT_S=20                         # each daemon to answer

# In /tmp: the munge socket's path must stay under the 108 bytes of a Unix socket address.
base=$(mktemp -d /tmp/kvslurm.XXXXXX)
chmod 755 "$base"
pids=()
cleanup() {
  # Stop what was started, newest first: SIGTERM, then SIGKILL after 5 s.
  local pid i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$base"
}
trap cleanup EXIT

skip() {
  echo "SKIPPED: $*"
  echo "test cases: 0 | 0 passed | 0 failed"
  exit 0
}
for tool in munged slurmctld slurmd sbatch scontrol srun; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (deploy/install-deps.sh installs slurm-wlm and munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munged: a fresh key, socket, log, seed and PID file of its own.
# The socket's folder must be searchable by all (munged checks), the key's private.
mkdir -p "$base/munge" "$base/munge-key" && chmod 755 "$base/munge" && chmod 700 "$base/munge-key"
dd if=/dev/urandom of="$base/munge-key/munge.key" bs=1024 count=1 status=none
chmod 400 "$base/munge-key/munge.key"
socket="$base/munge/munge.socket"
munged -F --key-file="$base/munge-key/munge.key" --socket="$socket" --log-file="$base/munge/munged.log" \
  --seed-file="$base/munge/munged.seed" --pid-file="$base/munge/munged.pid" \
  >"$base/munge/stdout" 2>&1 &
pids+=($!)
for _ in $(seq $((DAEMON_WAIT_S * 10))); do
  [ -S "$socket" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
[ -S "$socket" ] || skip "munged did not start in ${DAEMON_WAIT_S} s: $(tail -n 3 "$base/munge/munged.log" "$base/munge/stdout" 2>/dev/null)"

# A one-node cluster: this machine as "localhost" with 2 CPUs.
ctld_port=$(free_port) slurmd_port=$(free_port)
mkdir -p "$base/state" "$base/spool" "$base/submit"
cat > "$base/slurm.conf" <<CONF
ClusterName=kvtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
SlurmctldPidFile=$base/slurmctld.pid
SlurmdPidFile=$base/slurmd.pid
SlurmctldLogFile=$base/slurmctld.log
SlurmdLogFile=$base/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$base/jobcomp.txt
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=kvtest Nodes=localhost Default=YES MaxTime=10 State=UP
CONF
export SLURM_CONF="$base/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" >"$base/slurmctld.stdout" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$base/slurmd.stdout" 2>&1 &
pids+=($!)
idle=""
for _ in $(seq $((DAEMON_WAIT_S * 5))); do
  kill -0 "${pids[1]}" 2>/dev/null && kill -0 "${pids[2]}" 2>/dev/null || break
  idle=$(scontrol show node localhost 2>/dev/null | grep -o 'State=[A-Z+]*' || true)
  [[ "$idle" == State=IDLE* ]] && break
  sleep 0.2
done
if [[ "$idle" != State=IDLE* ]]; then
  skip "slurmctld/slurmd did not bring node localhost up in ${DAEMON_WAIT_S} s ($idle):" \
       "$(tail -n 5 "$base/slurmctld.log" "$base/slurmd.log" "$base/slurmd.stdout" 2>/dev/null)"
fi
echo "slurm_test: slurmctld on port $ctld_port, slurmd on $slurmd_port, node localhost idle"

passed=0 failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

bin="$base/bin"
mkdir -p "$bin/server/scheduler" "$base/submit/deploy"
ln -s "$scheduler_bin" "$bin/server/scheduler/scheduler"
ln -s "$kvserver_bin" "$bin/server/kvserver"
# The script finds make-certs.sh in the submission folder (a clone of the repository).
ln -s "$make_certs" "$base/submit/deploy/make-certs.sh"

# run_job NAME SERVERS WORKERS [SCRIPT_OPTION ...]: submits the script for a dist_training job
# of 1 + SERVERS + WORKERS tasks on 2 CPUs (--overcommit, in the script's srun too), waits for
# it and checks how it ended. Sets $out to its output file.
run_job() {
  local name=$1 servers=$2 workers=$3
  shift 3
  local tasks=$((1 + servers + workers)) job state info exits trained deadline
  job=$(cd "$base/submit" && sbatch --parsable --ntasks="$tasks" --overcommit --time=5 \
          --output="$base/submit/job-%j.out" "$sbatch_script" --servers "$servers" \
          --port "$(free_port)" --bin "$bin" --scheduler-arg=--register_timeout=60s "$@" \
          -- "$training_bin" 2>&1)
  if ! [[ "$job" =~ ^[0-9]+$ ]]; then
    fail "$name: sbatch refused the job: $job"
    out=/dev/null
    return
  fi
  echo "slurm_test: $name: submitted job $job ($servers servers, $workers workers)"
  deadline=$((SECONDS + JOB_WAIT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;; esac
    sleep 0.5
  done
  out="$base/submit/job-$job.out"
  echo "--- $name: job output (last 40 lines) ---"
  tail -n 40 "$out" 2>/dev/null
  echo "---"
  info=$(scontrol show job "$job" 2>/dev/null)
  if [ "$state" = COMPLETED ] && grep -q 'ExitCode=0:0' <<<"$info"; then
    pass "$name: job $job COMPLETED with ExitCode=0:0 (scontrol)"
  else
    fail "$name: job $job ended as '${state:-still running after ${JOB_WAIT_S} s}': $(grep -oE '(JobState|ExitCode|Reason)=[^ ]*' <<<"$info" | tr '\n' ' ')"
    # slurmd ends the job's processes when it is cancelled; wait (bounded) until it has.
    scancel "$job" 2>/dev/null
    for _ in $(seq 100); do
      info=$(scontrol show job "$job" 2>/dev/null)
      grep -qE 'JobState=(PENDING|RUNNING|COMPLETING)' <<<"$info" || break
      sleep 0.1
    done
  fi
  # Every task reports its own exit status; all exited 0 and srun did too.
  exits=$(grep -cE "kvstore-slurm: task [0-9]+ \((scheduler|server|worker) [0-9]+\) on localhost exited 0$" "$out" 2>/dev/null)
  if [ "$exits" = "$tasks" ] && grep -q "kvstore-slurm: job $job: srun exited 0" "$out"; then
    pass "$name: all $tasks tasks (scheduler, $servers servers, $workers workers) exited 0"
  else
    fail "$name: $exits of $tasks tasks reported exit 0: $(grep 'kvstore-slurm' "$out" 2>/dev/null | tr '\n' ' ')"
  fi
  # Training finished: every worker reached the last step and reported its test accuracy.
  trained=$(grep -cE '^[0-9]+: worker [0-9]+ .*test accuracy' "$out" 2>/dev/null)
  if [ "$trained" = "$workers" ]; then
    pass "$name: $workers workers finished training: $(grep -E 'test accuracy' "$out" | tr '\n' ' ')"
  else
    fail "$name: $trained of $workers workers reported a test accuracy"
  fi
  # slurmctld's own completion record.
  if grep -q "JobId=$job .*JobState=COMPLETED.*ExitCode=0:0" "$base/jobcomp.txt" 2>/dev/null; then
    pass "$name: slurmctld's completion record: COMPLETED, ExitCode=0:0"
  else
    fail "$name: completion record: $(grep "JobId=$job " "$base/jobcomp.txt" 2>/dev/null || echo none)"
  fi
}

run_job plaintext 2 2
# With --tls the script makes a CA and a certificate for the allocation's nodes; every link is
# TLS (the daemons say so when they start listening).
run_job tls 1 2 --tls
if grep -qE "scheduler listening on localhost:[0-9]+ \(TLS" "$out" &&
   [ "$(grep -cE "kvserver listening on localhost:[0-9]+ \(TLS" "$out")" = 1 ]; then
  pass "tls: the scheduler and the kvserver listened with TLS"
else
  fail "tls: $(grep -E 'listening on' "$out" | tr '\n' ' ')"
fi
# A worker that fails ends the job at once (--kill-on-bad-exit): the rest of the step is
# terminated and the job FAILED (with the status srun reports, 143 for the terminated tasks),
# well before the daemons' 60 s registration timeout. The bound is on the job's own run time
# (scontrol's StartTime to EndTime): a job submitted while the node still finishes the last one
# waits for slurmctld's next scheduling pass, which is not the job's doing.
# run_seconds INFO: EndTime - StartTime of `scontrol show job` output, in seconds.
run_seconds() {
  local start end
  start=$(grep -o 'StartTime=[0-9T:-]*' <<<"$1" | cut -d= -f2)
  end=$(grep -o 'EndTime=[0-9T:-]*' <<<"$1" | cut -d= -f2)
  if [ -z "$start" ] || [ -z "$end" ]; then echo 999999; return; fi
  echo $(( $(date -d "$end" +%s) - $(date -d "$start" +%s) ))
}
started=$SECONDS
job=$(cd "$base/submit" && sbatch --parsable --ntasks=4 --overcommit --time=5 \
        --output="$base/submit/job-%j.out" "$sbatch_script" --servers 1 --port "$(free_port)" \
        --bin "$bin" --scheduler-arg=--register_timeout=60s -- /bin/sh -c \
        'if [ "$DMLC_WORKER_ID" = 1 ]; then exit 3; fi; exec "$0"' "$training_bin" 2>&1)
state=""
if [[ "$job" =~ ^[0-9]+$ ]]; then
  for _ in $(seq $((JOB_WAIT_S * 2))); do
    state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 0.5
  done
fi
out="$base/submit/job-$job.out"
info=$(scontrol show job "$job" 2>/dev/null)
if [ "$state" = FAILED ] && ! grep -q 'ExitCode=0:0' <<<"$info" &&
   grep -qE 'kvstore-slurm: task [0-9]+ \(worker 1\) on localhost exited 3$' "$out" &&
   grep -qE "kvstore-slurm: job $job: srun exited [1-9]" "$out" &&
   [ "$(run_seconds "$info")" -lt 40 ]; then
  pass "failing worker: job $job FAILED after running $(run_seconds "$info") s ($(grep -o 'ExitCode=[0-9:]*' <<<"$info"))"
else
  fail "failing worker: job '$job' ended as '$state' after $((SECONDS - started)) s (run $(run_seconds "$info") s): $(tail -n 15 "$out" 2>/dev/null | tr '\n' ' ')"
  scancel "$job" 2>/dev/null
fi

echo "test cases: $((passed + failed)) | $passed passed | $failed failed"
[ "$failed" -eq 0 ]
