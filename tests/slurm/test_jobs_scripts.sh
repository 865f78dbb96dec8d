#!/bin/bash
# The batch scripts in jobs/ without a cluster: DRY_RUN launch lines inside and outside a (faked) Slurm job,
# the task-count check, loud failures on a missing binary, deck or bad override, the sweep's task id ->
# combination mapping (a bijection onto the product of the axes), and deck fragments (`@FILE`) passed to conductor.
# Environment (from add_script_test): CONDUCTOR_BINARY, CONDUCTOR_SOURCE_DIR.
set -uo pipefail
src=${CONDUCTOR_SOURCE_DIR:?}
bin=${CONDUCTOR_BINARY:?}
work=$(mktemp -d /tmp/conductor-jobs-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
pass=0
ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# expect CODE PATTERN -- command...: exit code CODE and PATTERN (grep -E) in stdout+stderr.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]]; then
    bad "'$*' exited $rc, expected $code; output:"$'\n'"$out"
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    bad "'$*' output lacks /$pattern/; output:"$'\n'"$out"
  else
    ok
  fi
  LAST=$out
}
# Never let a developer's Slurm allocation leak into the fake jobs below.
while read -r v; do unset "$v"; done < <(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p')
export CONDUCTOR_ROOT=$src CONDUCTOR_BINARY=$bin DRY_RUN=1
unset MPIEXEC # add_script_test sets it; the launcher outside Slurm is then plain mpirun (checked with it below)

# --- usage at the top of each script, printed by --help
for script in train.sbatch train-cpu.sbatch sweep.sbatch analyze.sbatch submit-sweep.sh; do
  expect 0 "OVERRIDES|override|RUN_DIR" -- bash "$src/jobs/$script" --help
done

# --- scripts/conductor-launch: bad input, and the launch command's exit status passed on (its signal handling:
# tests/faults/test_signals.py).
expect 2 "launch command 'no-such-mpirun' not found" -- "$src/scripts/conductor-launch" no-such-mpirun -np 2
expect 2 "CONDUCTOR_LAUNCH_GRACE_S='soon': expected a number of seconds" -- \
  env CONDUCTOR_LAUNCH_GRACE_S=soon "$src/scripts/conductor-launch" true
expect 2 "Usage|usage|scripts/conductor-launch mpirun" -- "$src/scripts/conductor-launch"
expect 5 "ran" -- "$src/scripts/conductor-launch" bash -c 'echo ran; exit 5'
# A stop while the job changes state (a requeue): Slurm answers "try again later" and scancel retries 5 s later,
# when a requeued job may run again under the same ids. The launcher bounds scancel to 3 s and says so.
mkdir -p fakebin
printf '#!/bin/bash\ntrap "" TERM\nexec sleep 20\n' >fakebin/scancel
printf '#!/bin/bash\ntrap "exit 0" TERM\nsleep 6 >/dev/null 2>&1 & wait\n' >fakebin/srun
chmod +x fakebin/scancel fakebin/srun
t0=$SECONDS
out=$( (env PATH="$work/fakebin:$PATH" SLURM_JOB_ID=77 "$src/scripts/conductor-launch" srun -n 2 true 2>&1 &
  pid=$!
  sleep 0.5
  kill -TERM "$pid"
  wait "$pid") )
if grep -q "scancel --signal=TERM 77 did not return within 3 s" <<<"$out" && ((SECONDS - t0 < 15)) &&
  ! pgrep -f "$work/fakebin/scancel" >/dev/null; then ok; else bad "a hanging scancel was not bounded: $out"; fi

# --- train-cpu.sbatch / train.sbatch (a run goes through scripts/conductor-launch: signals, tests/faults)
expect 0 "running: $src/scripts/conductor-launch mpirun -np 4 .*conductor run .*quickstart.yaml run.output=$work/out1 checkpoint.path=$work/out1/checkpoints\$" -- \
  env OUTPUT=out1 bash "$src/jobs/train-cpu.sbatch"
# Requeue-safe: a `latest` checkpoint in the run folder (a restarted job) is resumed from; an override of
# checkpoint.path is kept; the sbatch headers ask for the signal lead time, requeueing and appended logs.
mkdir -p out1r/checkpoints && echo step-000002 >out1r/checkpoints/latest
expect 0 "checkpoint.path=$work/out1r/checkpoints checkpoint.resume=$work/out1r/checkpoints\$" -- \
  env OUTPUT=out1r SLURM_RESTART_COUNT=1 bash "$src/jobs/train-cpu.sbatch"
expect 0 "restart 1: resuming from $work/out1r/checkpoints \\(step-000002\\)" -- \
  env OUTPUT=out1r SLURM_RESTART_COUNT=1 bash "$src/jobs/train-cpu.sbatch"
expect 0 "conductor run .* checkpoint.path=/elsewhere run.output=$work/out1c\$" -- \
  env OUTPUT=out1c OVERRIDES="checkpoint.path=/elsewhere" bash "$src/jobs/train-cpu.sbatch"
for script in train.sbatch train-cpu.sbatch; do
  for line in "--signal=B:TERM@120" "--requeue" "--open-mode=append"; do
    grep -q -- "^#SBATCH $line\$" "$src/jobs/$script" && ok || bad "jobs/$script lacks #SBATCH $line"
  done
done
grep -q "^command: $src/scripts/conductor-launch mpirun -np 4 " out1/job.txt && ok || bad "out1/job.txt lacks the launch line"
expect 0 "running: $src/scripts/conductor-launch /opt/mpi/mpiexec -np 4 .*conductor run " -- env MPIEXEC=/opt/mpi/mpiexec OUTPUT=out1 \
  bash "$src/jobs/train-cpu.sbatch"
grep -q "^  pipeline: 4$" out1/deck.resolved.yaml && ok || bad "out1/deck.resolved.yaml lacks pipeline: 4"
for script in train.sbatch train-cpu.sbatch; do
  expect 0 "running: $src/scripts/conductor-launch srun --mpi=pmix --ntasks=4 --kill-on-bad-exit=1 .*conductor run " -- \
    env SLURM_JOB_ID=7 SLURM_NTASKS=4 OUTPUT=out2 bash "$src/jobs/$script"
  grep -q -- "--gpu-bind" <<<"$LAST" && bad "$script passes --gpu-bind" || ok
done
expect 0 "running: srun --ntasks=1 --nodes=1 .*conductor simulate " -- \
  env SLURM_JOB_ID=7 SLURM_NTASKS=4 OUTPUT=out3 COMMAND=simulate bash "$src/jobs/train-cpu.sbatch"
expect 2 "parallel.pipeline=4 but the job has 8 tasks" -- \
  env SLURM_JOB_ID=7 SLURM_NTASKS=8 OUTPUT=out4 bash "$src/jobs/train-cpu.sbatch"
expect 0 "run.output=$work/out5" -- env SLURM_JOB_ID=7 SLURM_NTASKS=8 OUTPUT=out5 \
  OVERRIDES="parallel.pipeline=8 model.n_layers=8 run.output=elsewhere" bash "$src/jobs/train-cpu.sbatch"
grep -q "note: 'run.output=elsewhere' is replaced" <<<"$LAST" && ok || bad "no note about the replaced run.output"
# An @FILE entry is a deck fragment: conductor gets it (absolute) after the deck and before every override,
# wherever it stands in OVERRIDES, and its values reach the resolved deck.
expected="conductor run $src/inputs/quickstart.yaml $(printf '%q' "@$src/inputs/noise/straggler.yaml") run.steps=2 "
expect 0 "" -- env OUTPUT=out6 OVERRIDES="run.steps=2 @inputs/noise/straggler.yaml" bash "$src/jobs/train-cpu.sbatch"
grep -qF -- "$expected" <<<"$LAST" && ok || bad "the straggler preset is not passed as a fragment: want '$expected' in: $LAST"
grep -q "^  straggler_factor: 1.5$" out6/deck.resolved.yaml && grep -q "^  steps: 2$" out6/deck.resolved.yaml && ok ||
  bad "out6/deck.resolved.yaml lacks the straggler preset or run.steps=2"
expect 2 "deck 'missing.yaml' not found" -- env DECK=missing.yaml bash "$src/jobs/train-cpu.sbatch"
expect 2 "conductor binary '/nonexistent/conductor' is missing" -- \
  env CONDUCTOR_BINARY=/nonexistent/conductor bash "$src/jobs/train-cpu.sbatch"
expect 2 "unknown key 'run.stepz'.*did you mean 'run.steps'" -- \
  env OVERRIDES="run.stepz=3" bash "$src/jobs/train-cpu.sbatch"
expect 2 "override 'steps' is neither" -- env OVERRIDES="steps" bash "$src/jobs/train-cpu.sbatch"
expect 2 "COMMAND='train': expected run, simulate or validate" -- \
  env COMMAND=train OUTPUT=out7 bash "$src/jobs/train-cpu.sbatch"
# Not DRY: a run that "succeeds" without writing summary.json is an error (srun can exit 0 when nothing ran).
printf '#!/bin/bash\n[[ $1 == validate ]] && exec %q "$@"\nexit 0\n' "$bin" >fake-conductor
chmod +x fake-conductor
expect 1 "exited 0 but wrote no .*summary.json; nothing ran" -- \
  env DRY_RUN=0 CONDUCTOR_BINARY="$work/fake-conductor" COMMAND=simulate OUTPUT=out8 bash "$src/jobs/train-cpu.sbatch"
# A requeued job's folder keeps the previous attempt's summary.json: that one does not count as this launch's.
# (The folder holds that attempt's resolved.yaml of the same deck, as simulate wrote it: a rerun of it is allowed.)
mkdir -p out9 && echo '{"steps": 7}' >out9/summary.json && touch -d '-1 minute' out9/summary.json
"$bin" validate "$src/inputs/quickstart.yaml" "run.output=$work/out9" >out9/resolved.yaml
expect 1 "exited 0 but wrote no new .*summary.json; nothing ran" -- \
  env DRY_RUN=0 CONDUCTOR_BINARY="$work/fake-conductor" COMMAND=simulate OUTPUT=out9 bash "$src/jobs/train-cpu.sbatch"
[[ $(cat out9/summary.json) == '{"steps": 7}' && ! -e out9/.conductor-launch-stamp ]] && ok ||
  bad "the previous summary.json was changed or the launch stamp was left behind"

# --- sweep.sbatch: ids 0..n-1 map one-to-one onto decks x schedules x executions x noises
export SWEEP_DECKS="inputs/quickstart.yaml $src/tests/slurm/tiny.yaml" SWEEP_SCHEDULES="1f1b zb-h1 gpipe"
export SWEEP_EXECUTIONS="strict readiness:bfw" SWEEP_NOISES="none jitter10 congestion" SWEEP_DIR=$work/sweep
n=$(bash "$src/jobs/sweep.sbatch" --count)
[[ $n == 36 ]] && ok || bad "sweep --count = '$n', expected 2*3*2*3 = 36"
bash "$src/jobs/sweep.sbatch" --list >list.tsv
[[ $(tail -n +2 list.tsv | cut -f2-5 | sort -u | wc -l) == 36 ]] && ok || bad "sweep --list has repeated combinations"
[[ $(tail -n +2 list.tsv | cut -f6 | sort -u | wc -l) == 36 ]] && ok || bad "sweep labels are not unique"
# Launching a task costs a `conductor validate` (~1 s of MPI start-up), so a spread of ids runs, not all 36.
for i in 0 17 35; do
  row=$(awk -F'\t' -v i="$i" '$1 == i' list.tsv)
  label=$(cut -f6 <<<"$row")
  out=$(env SLURM_JOB_ID=$((100 + i)) SLURM_ARRAY_JOB_ID=100 SLURM_ARRAY_TASK_ID=$i SLURM_NTASKS=4 \
    bash "$src/jobs/sweep.sbatch" 2>&1) || {
    bad "sweep task $i failed: $out"
    continue
  }
  dir=$SWEEP_DIR/$(printf '%03d' "$i")-$label
  [[ -f $dir/combination.txt && -f $dir/job.txt ]] || {
    bad "sweep task $i wrote no $dir/combination.txt and job.txt"
    continue
  }
  IFS=$'\t' read -r _ deck schedule execution noise _ <<<"$row"
  grep -qx "schedule: $schedule" "$dir/combination.txt" && grep -qx "execution: $execution" "$dir/combination.txt" &&
    grep -qx "noise: $noise" "$dir/combination.txt" && grep -q "^deck: .*$(basename "$deck")$" "$dir/combination.txt" &&
    ok || bad "task $i: combination.txt disagrees with --list row '$row'"
  grep -q "schedule.kind=$schedule schedule.execution=${execution%%:*}" <<<"$out" && ok ||
    bad "task $i: the launch line lacks the schedule overrides"
  [[ $execution != *:* ]] || grep -q "schedule.hint=${execution#*:}" <<<"$out" && ok || bad "task $i: no hint override"
  if [[ $noise == none ]]; then
    expected="noise.kind=none"
  else
    expected="$(basename "$deck") $(printf '%q' "@$src/inputs/noise/$noise.yaml") run.name="
  fi
  grep -qF -- "$expected" <<<"$out" && ok || bad "task $i: noise '$noise' not applied as '$expected'"
done
[[ $(find "$SWEEP_DIR" -mindepth 1 -maxdepth 1 -type d | wc -l) == 3 ]] && ok || bad "sweep did not make 3 folders"
expect 2 "array task 36 is outside the sweep's 36 combinations" -- \
  env SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=36 bash "$src/jobs/sweep.sbatch"
expect 2 "SLURM_ARRAY_TASK_ID is not set" -- bash "$src/jobs/sweep.sbatch"
expect 2 "noise preset 'nosuch' not found" -- env SWEEP_NOISES=nosuch SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=0 \
  SLURM_NTASKS=4 bash "$src/jobs/sweep.sbatch"
# SWEEP_REPEATS: every combination N times (repeat fastest), repeat r with noise.seed=r and the label suffix -r<r>
[[ $(SWEEP_REPEATS=2 bash "$src/jobs/sweep.sbatch" --count) == 72 ]] && ok || bad "SWEEP_REPEATS=2 did not double the count"
SWEEP_REPEATS=2 bash "$src/jobs/sweep.sbatch" --list >list2.tsv
[[ $(awk -F'\t' '$1 == 3 {print $6, $7}' list2.tsv) == "quickstart-1f1b-strict-jitter10-r1 1" ]] && ok ||
  bad "SWEEP_REPEATS=2: task 3 is not repeat 1 of the second combination: $(sed -n 5p list2.tsv)"
out=$(env SWEEP_REPEATS=2 SLURM_JOB_ID=200 SLURM_ARRAY_JOB_ID=200 SLURM_ARRAY_TASK_ID=3 SLURM_NTASKS=4 \
  bash "$src/jobs/sweep.sbatch" 2>&1) && grep -q "noise.seed=1" <<<"$out" &&
  grep -qx "repeat: 1 of 2" "$SWEEP_DIR/003-quickstart-1f1b-strict-jitter10-r1/combination.txt" && ok ||
  bad "SWEEP_REPEATS=2 task 3 did not run with noise.seed=1: $out"
expect 2 "SWEEP_REPEATS='0' must be a positive integer" -- env SWEEP_REPEATS=0 bash "$src/jobs/sweep.sbatch" --count
unset SWEEP_DECKS SWEEP_SCHEDULES SWEEP_EXECUTIONS SWEEP_NOISES SWEEP_DIR

# --- analyze.sbatch refuses a folder without traces
mkdir -p empty
expect 2 "no trace.h5 in '$work/empty'" -- bash "$src/jobs/analyze.sbatch" empty
expect 2 "RUN_DIR '$work/nothere' is not a folder" -- bash "$src/jobs/analyze.sbatch" nothere

# --- analyze.sbatch over a two-task sweep folder of small made-up traces (analysis/tests/tracegen.py)
mkdir -p sw/000-q-strict sw/001-q-readiness
(cd "$src/analysis/tests" && /usr/bin/python3 -c "
import sys, tracegen
for d in sys.argv[1:]:
    tracegen.example_trace(d + '/trace.h5', steps=2)" "$work/sw/000-q-strict" "$work/sw/001-q-readiness") ||
  bad "tracegen.py could not write the test traces"
expect 0 "done: $work/sw/report.md" -- env BASELINE=q-readiness bash "$src/jobs/analyze.sbatch" sw
for d in sw/000-q-strict sw/001-q-readiness; do
  /usr/bin/python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$d/bubbles.json" && ok ||
    bad "$d/bubbles.json is not JSON"
  [[ $(head -c 4 "$d/timeline.png" | od -An -c | tr -d ' ') == 211PNG ]] && ok || bad "$d/timeline.png is not a PNG"
done
# A bad PYTHON is named before anything is written, and the results of the run above stay as they are.
before=$(md5sum sw/*/bubbles.json)
expect 2 "PYTHON='/nonexistent/python' is not an executable" -- env PYTHON=/nonexistent/python bash "$src/jobs/analyze.sbatch" sw
[[ $(md5sum sw/*/bubbles.json) == "$before" ]] && ok || bad "a failed analyze.sbatch changed bubbles.json"
grep -q '| q-strict |' sw/report.md && grep -q '| q-readiness |' sw/report.md && grep -q 'speedup vs q-readiness' sw/report.md &&
  ok || bad "report.md does not name the runs by their sweep labels or lacks the baseline: $(cat sw/report.md)"

# A run into a folder that holds another run's results is refused by the check, before this job's records
# (job.txt, deck.resolved.yaml) replace the ones there.
mkdir -p out12 && echo '{}' >out12/summary.json && echo 'command: the first job' >out12/job.txt &&
  echo 'the first deck' >out12/deck.resolved.yaml
expect 2 "run.output = '$work/out12' already holds the results of another run \\(summary.json\\)" -- \
  env OUTPUT=out12 bash "$src/jobs/train-cpu.sbatch"
[[ $(cat out12/job.txt) == 'command: the first job' && $(cat out12/deck.resolved.yaml) == 'the first deck' &&
  -z $(find out12 -name '.deck.resolved.yaml.*') ]] && ok || bad "a refused job changed out12's records"

# --- submit-sweep.sh checks every combination before it makes a folder or submits (a fake sbatch records calls)
printf '#!/bin/bash\necho "$*" >>%q/sbatch-calls\necho 99\n' "$work" >fakebin/sbatch
chmod +x fakebin/sbatch
expect 2 "sweep task 1 \\(.*noise bogus\\) is refused" -- \
  env PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_SCHEDULES=zb-h1 SWEEP_EXECUTIONS=strict \
  SWEEP_NOISES="none bogus" bash "$src/jobs/submit-sweep.sh"
grep -q "noise preset 'bogus' not found" <<<"$LAST" && ok || bad "the bad preset is not named: $LAST"
expect 2 "sweep task 1 .*readiness:nosuch.* is refused" -- \
  env PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_SCHEDULES=zb-h1 \
  SWEEP_EXECUTIONS="strict readiness:nosuch" SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh"
grep -q "command line 'schedule.hint=nosuch'" <<<"$LAST" && ok || bad "the bad hint is not named: $LAST"
[[ ! -e sbatch-calls && ! -e sweepX ]] && ok || bad "a refused sweep was submitted or made its folder"

# --- deck fragments: any YAML conductor reads (block lists, anchors), checked and located by conductor itself
printf 'noise:\n  kind:\n    - gaussian   # comment\n  level: &l 0.5\n  seed: 3\nrun:\n  name: "x"\n' >frag.yaml
expect 0 "" -- env OUTPUT=out9 COMMAND=validate OVERRIDES="@frag.yaml" bash "$src/jobs/train-cpu.sbatch"
grep -q "^  kind: \[gaussian\]$" out9/deck.resolved.yaml && grep -q "^  level: 0.5$" out9/deck.resolved.yaml &&
  grep -q "^  name: x$" out9/deck.resolved.yaml && ok || bad "out9/deck.resolved.yaml lacks frag.yaml's values"
printf 'noise:\n  levl: 0.5\n' >bad.yaml
expect 2 "$work/bad.yaml:2:3: unknown key 'noise.levl'" -- env OUTPUT=out10 OVERRIDES="@bad.yaml" \
  bash "$src/jobs/train-cpu.sbatch"
expect 2 "deck fragment 'nosuch.yaml' not found" -- env OUTPUT=out11 OVERRIDES="@nosuch.yaml" \
  bash "$src/jobs/train-cpu.sbatch"
[[ ! -e $src/jobs/overrides.sh ]] && ! grep -q "cj_flatten" "$src/jobs/common.sh" && ok ||
  bad "the awk flattener of fragments is back"

# --- device-check.sh on a machine without a GPU (nvidia-smi failing, as on a node whose driver is gone): exit 1,
# and no log or results file left under bench/results to mistake for a check
mkdir -p nogpu && printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >nogpu/nvidia-smi && chmod +x nogpu/nvidia-smi
before=$(ls -A "$src/bench/results" 2>/dev/null)
expect 1 "no NVIDIA GPU visible .*nothing written" -- env -u OUT PATH="$work/nogpu:$PATH" bash "$src/jobs/device-check.sh"
[[ $(ls -A "$src/bench/results" 2>/dev/null) == "$before" ]] && ok || bad "device-check.sh without a GPU wrote under bench/results"

echo "jobs scripts: $pass passed, $failures failed"
[[ $failures -eq 0 ]]
