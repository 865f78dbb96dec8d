#!/bin/bash
# The real Slurm test: starts a one-node cluster (minicluster.sh), submits jobs/train-cpu.sbatch with a tiny
# deck and 4 tasks, chains jobs/analyze.sbatch with --dependency=afterok, submits a 2-task sweep with
# jobs/submit-sweep.sh (strict vs readiness, simulated), waits with a bound, and checks what the jobs wrote
# (srun can exit 0 when nothing ran, so exit codes alone prove nothing): traces, summaries, the analysis
# outputs and the sweep report's speedup. The train job is submitted from a source tree whose path holds a space,
# the sweep goes to a folder whose name holds a comma. Then (run mode) two requeue cases: `scontrol requeue` of a
# running job, and the time-limit warning (`scancel -b -s TERM`, twice, as soon as the run is launched): a
# graceful stop, exit 3, and the job requeueing itself; both must resume and end with the losses of an
# uninterrupted run. Last, a plain `scancel`: the job's log keeps its end, and the job stays cancelled. The
# cluster is stopped on every way out (trap), leftover jobs first.
#
#   test_train_job.sh [run|simulate]     what the job runs (`conductor run` under srun --mpi=pmix -n 4, or
#                                        `conductor simulate` as one task)
# Environment (from add_script_test): CONDUCTOR_BINARY, CONDUCTOR_SOURCE_DIR. JOB_TIMEOUT (s, default 120).
# Exit 77 = skipped (not root, or Slurm packages missing), and only outside CI: with CI=true a missing
# prerequisite fails the test, since `make test` installs the packages there.
set -euo pipefail

mode=${1:-run}
[[ $mode == run || $mode == simulate ]] || {
  echo "usage: $0 [run|simulate]" >&2
  exit 2
}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${CONDUCTOR_SOURCE_DIR:?set CONDUCTOR_SOURCE_DIR to the source tree}
bin=${CONDUCTOR_BINARY:?set CONDUCTOR_BINARY to the conductor executable}
python=/usr/bin/python3
ntasks=4
t0=$SECONDS
say() { echo "slurm-test [$((SECONDS - t0))s]: $*"; }
fail() {
  echo "slurm-test: FAILED: $*" >&2
  exit 1
}

# A Slurm job environment around us (a developer testing inside an allocation) would confuse sbatch.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p')

# A run of this test that was killed outright (SIGKILL: no trap) leaves its daemons behind; stop those whose
# test driver is gone. Each cluster's processes carry its folder as a marker, so only they are signalled.
for stale in /tmp/conductor-slurm-test.*/cluster; do
  [[ -f $stale/pids ]] || continue
  owner=$(cat "${stale%/cluster}/owner.pid" 2>/dev/null || true)
  [[ -n $owner ]] && kill -0 "$owner" 2>/dev/null && continue # a live run of this test
  echo "slurm-test: stopping a stale cluster left in $stale"
  "$here/minicluster.sh" stop "$stale" || true
done

work=$(mktemp -d /tmp/conductor-slurm-test.XXXXXX)
chmod 755 "$work" # munged wants its socket's folders traversable by all
echo $$ >"$work/owner.pid"
cluster=$work/cluster
cleanup() {
  local rc=$?
  # Finish the cleanup whatever happens now: no second signal, broken output pipe or failing echo stops it.
  trap - EXIT
  trap '' INT TERM HUP PIPE
  set +e
  if [[ -f $cluster/pids ]]; then
    say "stopping the cluster"
    # Into a file first: our output may be a closed pipe, and the stop must not die writing to it.
    "$here/minicluster.sh" stop "$cluster" >"$work/stop.log" 2>&1 || {
      echo "slurm-test: the cluster did not stop cleanly" >&2
      [[ $rc -ne 0 ]] || rc=1
    }
    cat "$work/stop.log"
  fi
  if [[ $rc -eq 0 || $rc -eq 77 ]]; then
    rm -rf "$work"
  else
    local f
    for f in "$work"/*.log; do # the job logs, whole unless long
      [[ -f $f ]] || continue
      echo "----- $f"
      if [[ $(wc -l <"$f") -le 120 ]]; then cat "$f"; else head -n 60 "$f"; echo "[...]"; tail -n 60 "$f"; fi
    done
    for f in "$cluster"/log/*.log; do
      [[ -f $f ]] || continue
      echo "----- tail of $f"
      tail -n 15 "$f"
    done
    echo "slurm-test: kept $work for inspection" >&2
  fi
  say "total $((SECONDS - t0)) s, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
trap 'exit 141' PIPE # a closed output pipe must not skip the cleanup

rc=0
"$here/minicluster.sh" start "$cluster" --cpus "$ntasks" || rc=$?
if [[ $rc -eq 77 ]]; then
  [[ ${CI:-} == true ]] && fail "CI=true but the cluster cannot run here (see above); scripts/deps.sh installs it"
  echo "SKIPPED: no Slurm cluster possible here (see above)"
  exit 77
fi
[[ $rc -eq 0 ]] || fail "the cluster did not start (exit $rc)"
source "$cluster/env"
say "cluster up"

# The tiny deck: 4 stages (= 4 tasks), a few steps of a very small model, given as the script's argument. The job
# finds its source tree from the job record (Command=: the script's path, here with a space, and its arguments).
deck=$here/tiny.yaml
out=$work/run
cd "$work"
ln -s "$src" "$work/src tree"
train_id=$(env -u DECK OUTPUT="$out" COMMAND="$mode" CONDUCTOR_BINARY="$bin" OVERRIDES="run.steps=3" \
  sbatch --parsable --ntasks="$ntasks" --output="$work/train-%j.log" "$work/src tree/jobs/train-cpu.sbatch" "$deck")
[[ $train_id =~ ^[0-9]+$ ]] || fail "sbatch gave no job id: '$train_id'"
analyze_id=$(env RUN_DIR="$out" sbatch --parsable --dependency="afterok:$train_id" --kill-on-invalid-dep=yes \
  --output="$work/analyze-%j.log" "$src/jobs/analyze.sbatch")
[[ $analyze_id =~ ^[0-9]+$ ]] || fail "sbatch gave no job id for the analysis: '$analyze_id'"
say "submitted train job $train_id ($mode, $ntasks tasks) and analysis job $analyze_id (afterok)"

# The sweep workflow: submit-sweep.sh sizes a 2-task array (strict vs readiness under 10% jitter, simulated,
# one task each) and chains the comparison; its report must show the speedup over the strict run. The folder's name
# holds a comma (the analysis job gets it as its argument).
sweep_dir=$work/sweep,1
baseline=tiny-1f1b-strict-jitter10
submit_out=$(env SWEEP_DECKS="$deck" SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS="strict readiness:bfw"   SWEEP_NOISES=jitter10 SWEEP_DIR="$sweep_dir" COMMAND=simulate CONDUCTOR_BINARY="$bin" BASELINE=$baseline   "$src/jobs/submit-sweep.sh") || fail "submit-sweep.sh failed: $submit_out"
sweep_id=$(sed -n 's/^sweep=\([0-9]*\) analyze=\([0-9]*\) .*/\1/p' <<<"$submit_out")
sweep_analyze_id=$(sed -n 's/^sweep=\([0-9]*\) analyze=\([0-9]*\) .*/\2/p' <<<"$submit_out")
[[ -n $sweep_id && -n $sweep_analyze_id ]] || fail "submit-sweep.sh printed no job ids: $submit_out"
say "submitted sweep array $sweep_id (2 tasks, simulate) and its analysis $sweep_analyze_id (afterok)"

# wait_gone IDS LIMIT WHAT: waits until the jobs (comma-separated ids) have left the queue, at most LIMIT seconds.
wait_gone() {
  local deadline=$((SECONDS + $2)) left
  while :; do
    left=$(squeue -h -j "$1" -o '%i %T' 2>/dev/null || true)
    [[ -z $left ]] && return 0
    [[ $SECONDS -lt $deadline ]] || fail "$3 still queued or running after $2 s: $(echo $left)"
    sleep 1
  done
}

# job_field ID FIELD: one field of `scontrol show job` (JobState, Restarts, ...).
job_field() { scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# same_losses OUT REF STEPS WHAT: OUT's trace has steps 0..STEPS-1, each once, with REF's losses bit for bit.
same_losses() {
  "$python" - "$1/trace.h5" "$2/trace.h5" "$3" "$4" <<'EOF'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    sa, sb = a["steps"][...], b["steps"][...]
ok = list(sa["step"]) == list(range(int(sys.argv[3]))) and np.array_equal(sa["loss"], sb["loss"])
print(f"slurm-test: {sys.argv[4]} trace: {len(sa)} steps, each once; losses equal to the uninterrupted run: {ok}")
sys.exit(0 if ok else 1)
EOF
}

jobs="$train_id,$analyze_id,$sweep_id,$sweep_analyze_id"
wait_gone "$jobs" "${JOB_TIMEOUT:-120}" "jobs"
say "all jobs left the queue"

# Every record of every job (an array job has one per task) must be COMPLETED with exit code 0:0.
records=0
for id in ${jobs//,/ }; do
  while read -r line; do
    [[ -n $line ]] || continue
    records=$((records + 1))
    jid=$(tr ' ' '\n' <<<"$line" | sed -n 's/^JobId=//p')
    task=$(tr ' ' '\n' <<<"$line" | sed -n 's/^ArrayTaskId=//p')
    state=$(tr ' ' '\n' <<<"$line" | sed -n 's/^JobState=//p')
    code=$(tr ' ' '\n' <<<"$line" | sed -n 's/^ExitCode=//p')
    say "job $jid${task:+ (array task $task)}: $state, exit $code"
    [[ $state == COMPLETED && $code == 0:0 ]] || fail "job $jid${task:+ task $task} ended $state with exit code $code"
  done < <(scontrol -o show job "$id")
done
[[ $records -eq 5 ]] || fail "expected 5 job records (train, analysis, 2 sweep tasks, analysis), found $records"

train_log=$work/train-$train_id.log
grep -q "conductor-job: done: $out" "$train_log" || fail "the train job log lacks its done line"
grep -E '^conductor-job: running:|^summary:' "$train_log" | sed 's/^/  | /'
if [[ $mode == run ]]; then
  grep -qF "srun --mpi=pmix --ntasks=$ntasks" "$out/job.txt" || fail "job.txt does not show srun --mpi=pmix -n $ntasks"
fi
grep -qx "deck: $deck" "$out/job.txt" || fail "the train job did not run the deck given as its argument: $(cat "$out/job.txt")"
grep -qF "command: $work/src\ tree/scripts/conductor-launch" "$out/job.txt" || [[ $mode != run ]] ||
  fail "the train job did not find its source tree under '$work/src tree': $(cat "$out/job.txt")"

# What the run wrote, and what the analysis made of it.
"$python" - "$out" "$mode" "$ntasks" <<'EOF' || fail "the job's outputs are wrong (above)"
import json, os, sys
import h5py, numpy as np

out, mode, ntasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
problems = []
def check(ok, msg):
    if not ok:
        problems.append(msg)

with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
check(isinstance(summary, dict) and summary, "summary.json is not a non-empty JSON object")

steps, microbatches = 3, 4  # tiny.yaml with run.steps=3
with h5py.File(os.path.join(out, "trace.h5"), "r") as t:
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in t.attrs.items()}
    ev = t["events"][...]
    st = t["steps"][...]
check(int(attrs["pipeline"]) == ntasks, f"trace pipeline = {attrs['pipeline']}, expected {ntasks}")
if mode == "run":
    check(attrs["source"] == "runtime", f"trace source = {attrs['source']!r}, expected 'runtime'")
    check(int(attrs["world_size"]) == ntasks, f"trace world_size = {attrs['world_size']}, expected {ntasks}")
    hosts = attrs["hostnames"]
    check(len(hosts) == ntasks, f"trace has {len(hosts)} hostnames, expected one per rank ({ntasks})")
check(len(st) == steps, f"trace has {len(st)} step records, expected {steps}")
forward = ev[ev["kind"] == 0]  # EventKind::F
for r in range(ntasks):
    n = int(np.sum(forward["rank"] == r))
    check(n == steps * microbatches, f"rank {r} has {n} forward ops, expected {steps * microbatches}")
# ANNOUNCE rows (kind 6) take start_ns from the producing rank and end_ns from the receiving one: two clocks,
# aligned only to within the common clock's skew (docs/trace.md); every other row is one rank's clock.
one_clock = ev[ev["kind"] != 6]
check(bool(np.all(one_clock["end_ns"] >= one_clock["start_ns"])), "some trace events end before they start")

with open(os.path.join(out, "bubbles.json")) as f:
    bubbles = json.load(f)
check(bool(bubbles), "bubbles.json is empty")
with open(os.path.join(out, "timeline.png"), "rb") as f:
    check(f.read(8) == b"\x89PNG\r\n\x1a\n", "timeline.png is not a PNG")
check(os.path.getsize(os.path.join(out, "timeline.png")) > 5000, "timeline.png is suspiciously small")
with open(os.path.join(out, "report.md")) as f:
    report = f.read()
check("|" in report, "report.md has no table")

for p in problems:
    print("slurm-test: " + p, file=sys.stderr)
print(f"slurm-test: trace has {len(ev)} events from {len(set(ev['rank'].tolist()))} ranks, {len(st)} steps; "
      f"analysis wrote bubbles.json, timeline.png, report.md")
sys.exit(1 if problems else 0)
EOF
# The sweep: one folder per task with its combination and outputs; a report comparing both with the speedup.
for t in 000-tiny-1f1b-strict-jitter10 001-tiny-1f1b-readiness-bfw-jitter10; do
  d=$sweep_dir/$t
  for f in combination.txt job.txt summary.json trace.h5 bubbles.json timeline.png; do
    [[ -s $d/$f ]] || fail "sweep task folder $d lacks $f"
  done
done
grep -qx "execution: readiness:bfw" "$sweep_dir/001-tiny-1f1b-readiness-bfw-jitter10/combination.txt" ||
  fail "sweep task 1's combination.txt does not say readiness:bfw"
[[ $(wc -l <"$sweep_dir/manifest.tsv") -eq 3 ]] || fail "manifest.tsv should list 2 tasks"
report=$sweep_dir/report.md
grep -q "speedup vs $baseline" "$report" || fail "the sweep report has no speedup column against $baseline"
speedup=$(grep -F "| tiny-1f1b-readiness-bfw-jitter10 |" "$report" | awk -F'|' '{print $(NF-1)}' | tr -d ' x')
[[ $speedup =~ ^[0-9]+\.[0-9]+$ ]] || fail "no speedup for the readiness run in $report"
say "sweep report: readiness+bfw vs strict speedup ${speedup}x"

# start_now ID: a requeued job waits about two minutes before it is eligible again; not in a test. (Once it is
# pending; `scontrol update` spells the begin time StartTime.) Not in the same second as the end of its previous
# run: slurmd revoked that run's credential, and a new one created in the same second counts as revoked too ("Job
# credential revoked": the job ends FAILED); hence the two seconds' wait. Nor while the previous run's step daemons
# are still cleaning up: the new attempt's first step has the same id (ID.0) and the pmix plugin fails to create its
# socket folder (spmix_appdir_0_ID.0) while the old one exists ("pmixp_usock_create_srv"); a real cluster's
# requeue delay hides both.
start_now() {
  local deadline=$((SECONDS + 60)) st
  while :; do
    st=$(squeue -h -j "$1" -o %T 2>/dev/null || true)
    if [[ $st == PENDING ]]; then
      while pgrep -f "slurmstepd: \[$1\." >/dev/null || compgen -G "$cluster/tmp/spmix_appdir_*_$1.*" >/dev/null; do
        [[ $SECONDS -lt $deadline ]] || fail "job $1's previous step daemons did not end within 60 s"
        sleep 0.2
      done
    fi
    [[ $st == PENDING ]] && sleep 2 && scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 && return 0
    [[ -z $st || $st == RUNNING ]] && return 0 # already started (or gone: the caller checks the outcome)
    [[ $SECONDS -lt $deadline ]] || fail "job $1 is still $st after 60 s, not pending"
    sleep 0.2
  done
}

# Submits train-cpu.sbatch for the test deck: NAME's run folder OUTPUT, OVERRIDES, its log $work/NAME-<id>.log;
# prints the job id (the caller exits when there is none: `id=$(submit_train ...) || exit 1`).
submit_train() { # NAME OUTPUT OVERRIDES
  local id
  id=$(env DECK="$deck" OUTPUT="$2" CONDUCTOR_BINARY="$bin" OVERRIDES="$3" \
    sbatch --parsable --ntasks="$ntasks" --output="$work/$1-%j.log" "$src/jobs/train-cpu.sbatch")
  [[ $id =~ ^[0-9]+$ ]] || fail "sbatch gave no job id for the $1 job: '$id'"
  echo "$id"
}

# Waits up to SECONDS for a line of LOG matching the grep pattern; else fails saying WHAT did not happen.
wait_for_line() { # LOG PATTERN SECONDS WHAT
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [[ $SECONDS -lt $deadline ]] || fail "$4 within $3 s"
    sleep 0.02
  done
}

# Requeue (issue 17): a running train job requeued with `scontrol requeue` restarts, resumes from its run
# folder's latest checkpoint, continues its trace, and ends with the losses of an uninterrupted run (strict
# execution: the same numerics at every run).
if [[ $mode == run ]]; then
  rq_out=$work/requeue
  rq_overrides="run.steps=120 checkpoint.every=1 schedule.execution=strict"
  rq_id=$(submit_train requeue "$rq_out" "$rq_overrides") || exit 1
  deadline=$((SECONDS + 60))
  until [[ -f $rq_out/checkpoints/latest ]]; do
    [[ $SECONDS -lt $deadline ]] || fail "the requeue job wrote no checkpoint within 60 s"
    sleep 0.2
  done
  scontrol requeue "$rq_id" || fail "scontrol requeue $rq_id failed"
  say "requeued job $rq_id at $(cat "$rq_out/checkpoints/latest")"
  start_now "$rq_id"
  wait_gone "$rq_id" 180 "the requeued job"
  state=$(job_field "$rq_id" JobState)
  restarts=$(job_field "$rq_id" Restarts)
  [[ $state == COMPLETED ]] || fail "the requeued job ended $state"
  [[ ${restarts:-0} -ge 1 ]] || fail "the job was not restarted (Restarts=$restarts)"
  grep -q "resuming from $rq_out/checkpoints" "$work/requeue-$rq_id.log" ||
    fail "the restarted job did not resume from its checkpoint (requeue-$rq_id.log)"
  # The resumed attempt's deck is the first's but for checkpoint.resume: one record, no note of a difference.
  if grep -q "differs from this one's" "$work/requeue-$rq_id.log" || compgen -G "$rq_out/deck.resolved-*" >/dev/null; then
    fail "the resumed attempt's deck was recorded as another deck: $(grep "differs" "$work/requeue-$rq_id.log")"
  fi
  ref_out=$work/requeue-reference
  # shellcheck disable=SC2086
  ${MPIEXEC:-mpiexec} -n "$ntasks" --oversubscribe "$bin" run "$deck" $rq_overrides "run.output=$ref_out" \
    >"$work/requeue-reference.log" 2>&1 || fail "the uninterrupted reference run failed"
  same_losses "$rq_out" "$ref_out" 120 "requeued" || fail "the requeued run's trace differs from the uninterrupted run's"
  say "requeue: restarted $restarts time(s), resumed from its checkpoint, same losses as an uninterrupted run"

  # The time-limit warning (issue 17): `#SBATCH --signal=B:TERM@LEAD` signals the batch shell; `scancel -b -s
  # TERM` does the same now instead of near a time limit, twice 50 ms apart (Slurm's warning plus a user's or
  # the final one), as soon as the job prints its launch line: before the srun step exists or while its tasks
  # start (the stop is delivered once they handle it; before, it reached nothing or killed them). The run must
  # stop gracefully on every rank (exit 3: summary, checkpoint of the stop's step; no checkpoint.every here),
  # the job requeue itself with steps remaining, resume from that checkpoint and end with every step once and
  # the losses of an uninterrupted run.
  tl_out=$work/timelimit
  tl_steps=200  # the stop comes after the first step or so (16 ms each): 200 leave seconds to spare
  tl_overrides="run.steps=$tl_steps schedule.execution=strict"
  tl_id=$(submit_train timelimit "$tl_out" "$tl_overrides") || exit 1
  tl_log=$work/timelimit-$tl_id.log
  wait_for_line "$tl_log" '^conductor-job: running: ' 60 "the time-limit job launched no run"
  scancel -b -s TERM "$tl_id" && sleep 0.05 && scancel -b -s TERM "$tl_id" || fail "scancel -b -s TERM $tl_id failed"
  say "signalled the batch shell of job $tl_id twice (SIGTERM, 50 ms apart)"
  deadline=$((SECONDS + 60))
  until [[ $(squeue -h -j "$tl_id" -o %T 2>/dev/null) == PENDING ]]; do
    [[ $SECONDS -lt $deadline ]] || fail "job $tl_id did not requeue itself within 60 s: $(tail -n 5 "$tl_log")"
    sleep 0.2
  done
  grep -q "stop requested (signal): stopped after step" "$tl_log" || fail "the run did not stop gracefully"
  grep -q "^summary: " "$tl_log" || fail "the stopped run printed no summary"
  grep -q "stopped cleanly before its last step (exit 3)" "$tl_log" || fail "the stop did not exit 3"
  stopped_at=$(sed -n 's/^conductor-job: stopped at step \([0-9]*\) of [0-9]*: requeueing.*/\1/p' "$tl_log")
  [[ -n $stopped_at && $stopped_at -lt $tl_steps ]] || fail "the job did not requeue itself after the stop"
  say "the run stopped cleanly at step $stopped_at and the job requeued itself"
  start_now "$tl_id"
  wait_gone "$tl_id" 180 "the requeued time-limit job"
  state=$(job_field "$tl_id" JobState)
  [[ $state == COMPLETED ]] || fail "the requeued time-limit job ended $state"
  grep -q "resuming from $tl_out/checkpoints (step-$(printf %06d "$stopped_at"))" "$tl_log" ||
    fail "the restarted job did not resume from the stop's checkpoint"
  tl_ref=$work/timelimit-reference
  # shellcheck disable=SC2086
  ${MPIEXEC:-mpiexec} -n "$ntasks" --oversubscribe "$bin" run "$deck" $tl_overrides "run.output=$tl_ref" \
    >"$work/timelimit-reference.log" 2>&1 || fail "the uninterrupted reference run failed"
  same_losses "$tl_out" "$tl_ref" "$tl_steps" "stopped and requeued" ||
    fail "the time-limit job's trace differs from the uninterrupted run's"
  say "time limit: graceful stop at step $stopped_at (exit 3), requeued itself, resumed, same losses"

  # A plain `scancel` signals every process of the job: the ranks stop, and the batch shell and the log's tee
  # must live to write the end of the log (before: tee died of the SIGTERM, the shell of SIGPIPE, the launch
  # stamp stayed behind). The job is cancelled, not requeued.
  sc_out=$work/scancel
  sc_id=$(submit_train scancel "$sc_out" "$tl_overrides") || exit 1
  sc_log=$work/scancel-$sc_id.log
  wait_for_line "$sc_log" '^step    3/' 60 "the scancel job ran no step"
  scancel "$sc_id" || fail "scancel $sc_id failed"
  wait_gone "$sc_id" 60 "the cancelled job"
  ending="^conductor-job: ('run' stopped cleanly before its last step|error: 'run' failed with exit code)"
  grep -Eq "$ending" "$sc_log" && grep -Eq "$ending" "$sc_out/job.log" ||
    fail "the cancelled job's log lost its end: $(tail -n 5 "$sc_log")"
  [[ ! -e $sc_out/.conductor-launch-stamp ]] || fail "the cancelled job left its launch stamp in $sc_out"
  state=$(job_field "$sc_id" JobState)
  restarts=$(job_field "$sc_id" Restarts)
  [[ $state == CANCELLED && ${restarts:-0} -eq 0 ]] || fail "the cancelled job ended $state after $restarts restarts"
  say "scancel: the log kept its end ($(grep -Eo "$ending" "$sc_log" | head -n1)); cancelled, not requeued"
fi
say "PASSED"
