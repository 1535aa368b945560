#!/usr/bin/env bash
# Slurm for real: starts munged (a throwaway key, its own socket and folders), slurmctld and
# slurmd on this machine with a throwaway configuration (one node with 2 CPUs, no cgroups), all
# in a temporary folder on free ports; submits deploy/slurm/kvstore.sbatch with sbatch to run
# examples/dist_training (1 scheduler, 2 kvservers, 2 workers: 5 tasks); waits for the job
# (bounded) and checks, from the job's output file, scontrol and slurmctld's job-completion
# file, that training finished on both workers and that every task and the job exited 0. Stops
# every daemon it started, by PID. Prints "SKIPPED: reason" when Slurm or munge cannot start
# here, and "test cases: N | N passed | N failed" (tests/run_tests.sh counts it).
#
#   slurm_test.sh SCHEDULER KVSERVER DIST_TRAINING SBATCH_SCRIPT
set -uo pipefail

[ $# -eq 4 ] || { echo "usage: $0 SCHEDULER KVSERVER DIST_TRAINING SBATCH_SCRIPT" >&2; exit 2; }
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
scheduler_bin=$(abs "$1") kvserver_bin=$(abs "$2") training_bin=$(abs "$3") sbatch_script=$(abs "$4")
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

# The job: 5 tasks on 2 CPUs (--overcommit in the script's srun; sbatch's too).
bin="$base/bin"
mkdir -p "$bin/server/scheduler"
ln -s "$scheduler_bin" "$bin/server/scheduler/scheduler"
ln -s "$kvserver_bin" "$bin/server/kvserver"
scheduler_port=$(free_port)
cd "$base/submit"
job=$(sbatch --parsable --ntasks=5 --overcommit --time=5 --output="$base/submit/job-%j.out" \
        "$sbatch_script" --servers 2 --port "$scheduler_port" --bin "$bin" \
        --scheduler-arg=--register_timeout=60s -- "$training_bin" 2>&1)
if ! [[ "$job" =~ ^[0-9]+$ ]]; then
  fail "sbatch refused the job: $job"
else
  echo "slurm_test: submitted job $job"
  state=""
  deadline=$((SECONDS + JOB_WAIT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) break ;; esac
    sleep 0.5
  done
  out="$base/submit/job-$job.out"
  echo "--- job output (last 40 lines) ---"
  tail -n 40 "$out" 2>/dev/null
  echo "---"
  info=$(scontrol show job "$job" 2>/dev/null)
  if [ "$state" = COMPLETED ] && grep -q 'ExitCode=0:0' <<<"$info"; then
    pass "job $job COMPLETED with ExitCode=0:0 (scontrol)"
  else
    fail "job $job ended as '${state:-still running after ${JOB_WAIT_S} s}': $(grep -oE '(JobState|ExitCode|Reason)=[^ ]*' <<<"$info" | tr '\n' ' ')"
    # slurmd ends the job's processes when it is cancelled; wait (bounded) until it has.
    scancel "$job" 2>/dev/null
    for _ in $(seq 100); do
      scontrol show job "$job" 2>/dev/null | grep -qE 'JobState=(PENDING|RUNNING|COMPLETING)' || break
      sleep 0.1
    done
  fi
  # Every task reports its own exit status; all 5 exited 0 and srun did too.
  exits=$(grep -cE 'kvstore-slurm: task [0-4] \((scheduler|server|worker) [0-9]+\) on localhost exited 0$' "$out" 2>/dev/null)
  if [ "$exits" = 5 ] && grep -q "kvstore-slurm: job $job: srun exited 0" "$out"; then
    pass "all 5 tasks (scheduler, 2 servers, 2 workers) exited 0"
  else
    fail "$exits of 5 tasks reported exit 0: $(grep 'kvstore-slurm' "$out" 2>/dev/null | tr '\n' ' ')"
  fi
  # Training finished: both workers reached the last step and reported their test accuracy.
  trained=$(grep -cE '^[0-9]+: worker [01] .*accuracy' "$out" 2>/dev/null)
  if [ "$trained" = 2 ]; then
    pass "both workers finished training: $(grep -E 'accuracy' "$out" | tr '\n' ' ')"
  else
    fail "$trained of 2 workers reported a test accuracy"
  fi
  # slurmctld's own completion record.
  if grep -q "JobId=$job .*JobState=COMPLETED.*ExitCode=0:0" "$base/jobcomp.txt" 2>/dev/null; then
    pass "slurmctld's completion record: COMPLETED, ExitCode=0:0"
  else
    fail "completion record: $(grep "JobId=$job " "$base/jobcomp.txt" 2>/dev/null || echo none)"
  fi
fi
echo "test cases: $((passed + failed)) | $passed passed | $failed failed"
[ "$failed" -eq 0 ]
