#!/bin/bash
# The batch scripts in jobs/ without a cluster: DRY_RUN launch lines inside and outside a (faked) Slurm job,
# the task-count check, loud failures on a missing binary, deck or bad override, the sweep's task id ->
# combination mapping (a bijection onto the product of the axes), deck fragments (`@FILE`) passed to conductor,
# the records a job writes (never over another job's; none when dry, refused or stopped before the launch),
# restarts (own checkpoints first, a killed attempt set aside), stop signals before the launch and while an srun
# step starts (faked jobs and steps), submit-sweep.sh's folders and analyze.sbatch's checks.
# Environment (from add_script_test): CONDUCTOR_BINARY, CONDUCTOR_SOURCE_DIR.
set -uo pipefail
src=${CONDUCTOR_SOURCE_DIR:?}
bin=${CONDUCTOR_BINARY:?}
tiny=$src/tests/slurm/tiny.yaml
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
mpi_launch=${MPIEXEC:-mpirun} # for the real checkpoint below
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
# srun: the stop goes to the job's steps (`scancel --signal=TERM JOB`) once their tasks on this node exist and
# handle SIGTERM. A fake step as srun makes one: a `slurmstepd: [JOB.0]` (a copy of bash under that name) whose
# child is the task (fakestep/task: it handles SIGTERM after FAKE_TASK_TRAP_DELAY s, writes its pid to task.pid,
# and says "task stopped" and exits 3 on SIGTERM); the step starts FAKE_STEP_DELAY s after srun.
export FAKE_DIR=$work
fake_job=987654 # not a job id of a real test cluster's (its steps' slurmstepd would count)
mkdir -p fakestep fakehang
cp "$(command -v bash)" fakestep/slurmstepd
cat >fakestep/srun <<'SH'
#!/bin/bash
sleep "${FAKE_STEP_DELAY:-0}"
exec -a "slurmstepd: [$SLURM_JOB_ID.0]" "$FAKE_DIR/fakestep/slurmstepd" -c '"$FAKE_DIR/fakestep/task" & wait $!'
SH
cat >fakestep/task <<'SH'
#!/bin/bash
sleep "${FAKE_TASK_TRAP_DELAY:-0}"
trap 'kill $s 2>/dev/null; echo "task stopped"; exit 3' TERM
echo $$ >"$FAKE_DIR/task.pid"
sleep "${FAKE_TASK_S:-6}" >/dev/null 2>&1 &
s=$!
wait $s
SH
cat >fakestep/scancel <<'SH'
#!/bin/bash
if pid=$(cat "$FAKE_DIR/task.pid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null; then
  echo "scancel $*: signalled the task" >>"$FAKE_DIR/scancel.log"
else
  echo "scancel $*: no task yet" >>"$FAKE_DIR/scancel.log"
fi
SH
printf '#!/bin/bash\ntrap "" TERM\nexec sleep 20\n' >fakehang/scancel
chmod +x fakestep/srun fakestep/task fakestep/scancel fakehang/scancel
# launch_signalled DELAY PATH-PREFIX: conductor-launch srun (the fake step) signalled once after DELAY s; its
# output (and exit status, last line) in $out.
launch_signalled() {
  rm -f task.pid scancel.log
  out=$( (env PATH="$2:$work/fakestep:$PATH" SLURM_JOB_ID=$fake_job "$src/scripts/conductor-launch" srun -n 1 true 2>&1 &
    pid=$!
    sleep "$1"
    kill -TERM "$pid"
    wait "$pid"
    echo "exit $?") )
}
# A stop before the step exists, and while its task starts (no handler yet): delivered once the task handles it,
# so the run stops gracefully (before: scancel at once reached no task, or killed it; the run went on or died).
t0=$SECONDS
FAKE_STEP_DELAY=0.6 FAKE_TASK_TRAP_DELAY=0.6 launch_signalled 0.2 "$work/fakestep"
if [[ $out == *"task stopped"* && $out == *"exit 3" && $(cat scancel.log 2>/dev/null) == *"signalled the task" ]] &&
  ((SECONDS - t0 < 6)); then ok; else bad "an early stop under srun was lost: $out / $(cat scancel.log 2>/dev/null)"; fi
# A stop while the job changes state (a requeue): Slurm answers "try again later" and scancel retries 5 s later,
# when a requeued job may run again under the same ids. The launcher bounds scancel to 3 s and says so.
t0=$SECONDS
launch_signalled 0.5 "$work/fakehang"
if grep -q "scancel --signal=TERM $fake_job did not return within 3 s" <<<"$out" && ((SECONDS - t0 < 15)) &&
  ! pgrep -f "$work/fakehang/scancel" >/dev/null; then ok; else bad "a hanging scancel was not bounded: $out"; fi

# --- train-cpu.sbatch / train.sbatch (a run goes through scripts/conductor-launch: signals, tests/faults)
expect 0 "running: $src/scripts/conductor-launch mpirun -np 4 .*conductor run .*quickstart.yaml run.output=$work/out1 checkpoint.path=$work/out1/checkpoints\$" -- \
  env OUTPUT=out1 bash "$src/jobs/train-cpu.sbatch"
# DRY_RUN writes nothing into OUTPUT, not even the folder.
[[ ! -e out1 ]] && ok || bad "DRY_RUN=1 wrote into out1: $(ls -A out1)"
# A relative OUTPUT, SWEEP_DIR or RUN_DIR is under the submit folder (SLURM_SUBMIT_DIR in a job, else the working
# folder), even when CONDUCTOR_ROOT holds a folder of that name (an earlier run there): outputs are not looked up
# there as decks are (before, runs/exp1 of the source tree was used). A source tree of links, with such folders.
mkdir -p root2/runs/exp1 root2/sweeps/sx root2/runs/an elsewhere subdir
for d in jobs scripts inputs analysis; do ln -s "$src/$d" "root2/$d"; done
expect 0 "run.output=$work/elsewhere/runs/exp1 " -- bash -c 'cd elsewhere && CONDUCTOR_ROOT=$1/root2 OUTPUT=runs/exp1 \
  bash "$2/jobs/train-cpu.sbatch"' _ "$work" "$src"
expect 0 "run.output=$work/elsewhere/runs/exp1 " -- bash -c 'cd subdir && CONDUCTOR_ROOT=$1/root2 OUTPUT=runs/exp1 \
  SLURM_JOB_ID=7 SLURM_NTASKS=4 SLURM_SUBMIT_DIR=$1/elsewhere bash "$2/jobs/train.sbatch"' _ "$work" "$src"
expect 0 "run.output=$work/elsewhere/sweeps/sx/000-" -- bash -c 'cd elsewhere && CONDUCTOR_ROOT=$1/root2 SWEEP_DIR=sweeps/sx \
  SLURM_JOB_ID=7 SLURM_NTASKS=4 SLURM_ARRAY_TASK_ID=0 bash "$2/jobs/sweep.sbatch"' _ "$work" "$src"
expect 2 "RUN_DIR '$work/elsewhere/runs/an' is not a folder" -- bash -c 'cd elsewhere && CONDUCTOR_ROOT=$1/root2 \
  RUN_DIR=runs/an bash "$2/jobs/analyze.sbatch"' _ "$work" "$src"
# Requeue-safe: a `latest` checkpoint in the run folder (a restarted job) is resumed from; an override of
# checkpoint.path is kept; the sbatch headers ask for the signal lead time, requeueing and appended logs.
# A step folder as a run leaves it (validate finds its manifest before the job starts).
# validate checks a resumed checkpoint's manifest and files against the deck before the job starts: the restarts
# below resume a real one, the quickstart deck's step 2.
"$mpi_launch" --oversubscribe -np 4 "$bin" run "$src/inputs/quickstart.yaml" run.steps=2 run.output="$work/qk" \
  checkpoint.path="$work/qk/ck" >qk.log 2>&1 || bad "the quickstart run for a real checkpoint failed: $(cat qk.log)"
real_checkpoint() { # real_checkpoint FOLDER: FOLDER/checkpoints holds that step, as its latest
  mkdir -p "$1/checkpoints" && cp -a "$work/qk/ck/step-000002" "$1/checkpoints/" &&
    echo step-000002 >"$1/checkpoints/latest"
}
real_checkpoint out1r
expect 0 "checkpoint.path=$work/out1r/checkpoints checkpoint.resume=$work/out1r/checkpoints\$" -- \
  env OUTPUT=out1r SLURM_RESTART_COUNT=1 bash "$src/jobs/train-cpu.sbatch"
expect 0 "restart 1: resuming from $work/out1r/checkpoints \\(step-000002\\)" -- \
  env OUTPUT=out1r SLURM_RESTART_COUNT=1 bash "$src/jobs/train-cpu.sbatch"
# The job's own checkpoints take precedence over a checkpoint.resume of OVERRIDES (where its first attempt
# started): a restart resumes from OUTPUT/checkpoints, not from the user's old folder again.
expect 0 "checkpoint.path=$work/out1r/checkpoints checkpoint.resume=$work/out1r/checkpoints\$" -- \
  env OUTPUT=out1r SLURM_RESTART_COUNT=1 OVERRIDES="checkpoint.resume=$work/out1r/checkpoints/step-000002 run.steps=9" \
  bash "$src/jobs/train-cpu.sbatch"
grep -q "running: .*checkpoint.resume=$work/out1r/checkpoints/step-000002" <<<"$LAST" &&
  bad "the restart still resumes from the user's checkpoint.resume: $LAST" || ok
grep -q "note: $work/out1r/checkpoints holds this run's own checkpoints: resuming from them" <<<"$LAST" && ok ||
  bad "no note that the job's own checkpoints replace checkpoint.resume: $LAST"
# run.overwrite=true on a first attempt asks for a new run: the earlier run's checkpoints there are not resumed
# (a zb-h1 run went on as another deck's from its step 265); they move aside with its records.
expect 0 "DRY_RUN=1: would move the earlier run's checkpoints into $work/out1r/attempt-1/" -- \
  env OUTPUT=out1r OVERRIDES="run.overwrite=true" bash "$src/jobs/train-cpu.sbatch"
grep -q "checkpoint.resume=" <<<"$LAST" && bad "run.overwrite=true resumed the earlier run: $LAST" || ok
expect 0 "conductor run .* checkpoint.path=/elsewhere run.output=$work/out1c\$" -- \
  env OUTPUT=out1c OVERRIDES="checkpoint.path=/elsewhere" bash "$src/jobs/train-cpu.sbatch"
for script in train.sbatch train-cpu.sbatch; do
  for line in "--signal=B:TERM@120" "--requeue" "--open-mode=append"; do
    grep -q -- "^#SBATCH $line\$" "$src/jobs/$script" && ok || bad "jobs/$script lacks #SBATCH $line"
  done
done
expect 0 "running: $src/scripts/conductor-launch /opt/mpi/mpiexec -np 4 .*conductor run " -- env MPIEXEC=/opt/mpi/mpiexec OUTPUT=out1 \
  bash "$src/jobs/train-cpu.sbatch"
for script in train.sbatch train-cpu.sbatch; do
  expect 0 "running: $src/scripts/conductor-launch srun --mpi=pmix --ntasks=4 --kill-on-bad-exit=1 .*conductor run " -- \
    env SLURM_JOB_ID=7 SLURM_NTASKS=4 OUTPUT=out2 bash "$src/jobs/$script"
  grep -q -- "--gpu-bind" <<<"$LAST" && bad "$script passes --gpu-bind" || ok
done
expect 0 "running: srun --ntasks=1 --nodes=1 .*conductor simulate " -- \
  env SLURM_JOB_ID=7 SLURM_NTASKS=4 OUTPUT=out3 COMMAND=simulate bash "$src/jobs/train-cpu.sbatch"
expect 2 "parallel.pipeline=4 but the job has 8 tasks" -- \
  env SLURM_JOB_ID=7 SLURM_NTASKS=8 OUTPUT=out4 bash "$src/jobs/train-cpu.sbatch"
# Refused for the deck or the task count: no folder made, no job.log in it (not dry: the records).
expect 2 "unknown key 'run.stepz'" -- env DRY_RUN=0 SLURM_JOB_ID=7 SLURM_NTASKS=4 OUTPUT=out4d OVERRIDES="run.stepz=2" \
  bash "$src/jobs/train-cpu.sbatch"
expect 2 "parallel.pipeline=4 but the job has 8 tasks" -- \
  env DRY_RUN=0 SLURM_JOB_ID=7 SLURM_NTASKS=8 OUTPUT=out4t bash "$src/jobs/train-cpu.sbatch"
[[ ! -e out4d && ! -e out4t ]] && ok || bad "a refused job made its OUTPUT: $(ls -d out4d out4t 2>&1)"
expect 0 "run.output=$work/out5" -- env SLURM_JOB_ID=7 SLURM_NTASKS=8 OUTPUT=out5 \
  OVERRIDES="parallel.pipeline=8 model.n_layers=8 run.output=elsewhere" bash "$src/jobs/train-cpu.sbatch"
grep -q "note: 'run.output=elsewhere' is replaced" <<<"$LAST" && ok || bad "no note about the replaced run.output"
# OVERRIDES (and the SWEEP_* lists) split at every whitespace, newlines included: nothing after the first line is lost.
expect 0 "conductor run .* run.steps=2 schedule.kind=zb-h1 model.n_layers=8 run.output=" -- env OUTPUT=out5n \
  OVERRIDES=$'run.steps=2\nschedule.kind=zb-h1\n\tmodel.n_layers=8\n' bash "$src/jobs/train-cpu.sbatch"
# An @FILE entry is a deck fragment: conductor gets it (absolute) after the deck and before every override,
# wherever it stands in OVERRIDES, and its values reach the resolved deck (COMMAND=validate, not dry: the records).
expected="conductor run $src/inputs/quickstart.yaml $(printf '%q' "@$src/inputs/noise/straggler.yaml") run.steps=2 "
expect 0 "" -- env OUTPUT=out6 OVERRIDES="run.steps=2 @inputs/noise/straggler.yaml" bash "$src/jobs/train-cpu.sbatch"
grep -qF -- "$expected" <<<"$LAST" && ok || bad "the straggler preset is not passed as a fragment: want '$expected' in: $LAST"
expect 0 "" -- env DRY_RUN=0 COMMAND=validate OUTPUT=out6 OVERRIDES="run.steps=2 @inputs/noise/straggler.yaml" \
  bash "$src/jobs/train-cpu.sbatch"
grep -q "^  straggler_factor: 1.5$" out6/deck.resolved.yaml && grep -q "^  steps: 2$" out6/deck.resolved.yaml &&
  grep -q "^  pipeline: 4$" out6/deck.resolved.yaml && ok ||
  bad "out6/deck.resolved.yaml lacks the straggler preset, run.steps=2 or pipeline: 4"
grep -q "^command: $(printf '%q' "$bin") validate " out6/job.txt && ok || bad "out6/job.txt lacks the command: $(cat out6/job.txt)"
expect 2 "deck 'missing.yaml' not found" -- env DECK=missing.yaml bash "$src/jobs/train-cpu.sbatch"
# The deck is checked by its command's rules: simulate's allow several helpers per op and replicas (a simulate job
# or sweep with them was refused by run's rules), run's do not (refused before the queue wait, not by the run).
expect 0 "conductor simulate " -- env COMMAND=simulate OUTPUT=outH \
  OVERRIDES="migration.enabled=true migration.helpers=2 migration.weights=replicas" bash "$src/jobs/train-cpu.sbatch"
expect 2 "migration.helpers = 2: conductor run sends an op's slices to one helper only" -- env OUTPUT=outH \
  OVERRIDES="migration.enabled=true migration.helpers=2" bash "$src/jobs/train-cpu.sbatch"
expect 0 "" -- env COMMAND=simulate SWEEP_DECKS=inputs/quickstart.yaml SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict \
  SWEEP_NOISES=none OVERRIDES="migration.enabled=true migration.helpers=2" bash "$src/jobs/sweep.sbatch" --check
# The one argument is the deck (`sbatch jobs/train-cpu.sbatch tiny.yaml` ran the quickstart deck); it wins over
# DECK, with a note; a second argument or an option is refused (each was ignored), as in analyze.sbatch, sweep.sbatch
# and device-check.sh.
for script in train.sbatch train-cpu.sbatch; do
  expect 0 "conductor run $tiny run.output=" -- env OUTPUT=outA bash "$src/jobs/$script" "$tiny"
  expect 0 "note: the deck is the argument '$tiny', not DECK='inputs/quickstart.yaml'" -- \
    env DECK=inputs/quickstart.yaml OUTPUT=outA bash "$src/jobs/$script" "$tiny"
  expect 2 "error: unexpected arguments .*tiny.yaml extra: expected at most one, the deck" -- \
    env OUTPUT=outA bash "$src/jobs/$script" "$tiny" extra
  expect 2 "error: unknown option '--deck': expected --help or the deck" -- env OUTPUT=outA bash "$src/jobs/$script" --deck
done
expect 2 "error: unexpected arguments a b: expected at most one, the run or sweep folder" -- \
  bash "$src/jobs/analyze.sbatch" a b
expect 2 "error: unexpected argument 'x' after '--list'" -- bash "$src/jobs/sweep.sbatch" --list x
expect 2 "device-check: unexpected argument 'x': the script takes none but --help" -- bash "$src/jobs/device-check.sh" x
expect 2 "conductor binary '/nonexistent/conductor' is missing" -- \
  env CONDUCTOR_BINARY=/nonexistent/conductor bash "$src/jobs/train-cpu.sbatch"
expect 2 "unknown key 'run.stepz'.*did you mean 'run.steps'" -- \
  env OVERRIDES="run.stepz=3" bash "$src/jobs/train-cpu.sbatch"
expect 2 "OVERRIDES: 'steps' is neither" -- env OVERRIDES="steps" bash "$src/jobs/train-cpu.sbatch"
expect 2 "COMMAND='train': expected run, simulate or validate" -- \
  env COMMAND=train OUTPUT=out7 bash "$src/jobs/train-cpu.sbatch"
# Not DRY: a run that "succeeds" without writing summary.json is an error (srun can exit 0 when nothing ran).
printf '#!/bin/bash\n[[ $1 == validate ]] && exec %q "$@"\nexit 0\n' "$bin" >fake-conductor
chmod +x fake-conductor
expect 1 "exited 0 but wrote no .*summary.json; nothing ran" -- \
  env DRY_RUN=0 CONDUCTOR_BINARY="$work/fake-conductor" COMMAND=simulate OUTPUT=out8 bash "$src/jobs/train-cpu.sbatch"
# A value with a space splits into a word that is no override: refused, saying where such a value goes.
expect 2 "OVERRIDES: 'run' is neither key.path=value nor @FILE .*a value holding a space goes in a YAML fragment" -- \
  env OVERRIDES="run.name=my run" OUTPUT=out8s bash "$src/jobs/train-cpu.sbatch"
# A command killed by a signal: the job's error names it (exit 137 alone read as just another failure), and
# does not blame the out-of-memory killer alone: srun exits 137 when it killed the other tasks after one failed.
printf '#!/bin/bash\n[[ $1 == validate ]] && exec %q "$@"\nkill -KILL $$\n' "$bin" >killed-conductor
chmod +x killed-conductor
expect 137 "failed with exit code 137 \(a process was killed by SIGKILL: by srun or mpirun after another task failed \(that task's error and srun's \"task N: Exited with exit code M\" lines above\), or by the out-of-memory killer, a hard time limit or scancel -s KILL \(the job log and dmesg say which\)\)$" -- \
  env DRY_RUN=0 CONDUCTOR_BINARY="$work/killed-conductor" COMMAND=simulate OUTPUT=out8k bash "$src/jobs/train-cpu.sbatch"
# A requeued job's folder keeps the previous attempt's summary.json: that one does not count as this launch's.
# (The folder holds that attempt's resolved.yaml of the same deck, as simulate wrote it: a rerun of it is allowed.)
mkdir -p out9 && echo '{"steps": 7}' >out9/summary.json && touch -d '-1 minute' out9/summary.json
"$bin" validate "$src/inputs/quickstart.yaml" "run.output=$work/out9" >out9/resolved.yaml
expect 1 "exited 0 but wrote no new .*summary.json; nothing ran" -- \
  env DRY_RUN=0 CONDUCTOR_BINARY="$work/fake-conductor" COMMAND=simulate OUTPUT=out9 bash "$src/jobs/train-cpu.sbatch"
[[ $(cat out9/summary.json) == '{"steps": 7}' && ! -e out9/.conductor-launch-stamp ]] && ok ||
  bad "the previous summary.json was changed or the launch stamp was left behind"

# --- Records (job.txt, deck.resolved.yaml) are never replaced by a job that is refused, never launched or dry:
# a finished run (a real one, mpirun -np 4 outside Slurm, 2 steps of the tiny deck), then the same command again:
# refused before launching, with one message, and its records as they were; DRY_RUN into it writes nothing.
expect 0 "done: $work/fin" -- env DRY_RUN=0 DECK="$tiny" OUTPUT=fin OVERRIDES="run.steps=2" bash "$src/jobs/train-cpu.sbatch"
[[ -f fin/checkpoints/latest && $(grep -c '^command: ' fin/job.txt) == 1 ]] && ok ||
  bad "the finished run left no checkpoint or not one job.txt block: $(ls -A fin)"
# job.txt names the tasks launched: the deck's 4 ranks under mpirun (it said "tasks: 1" outside Slurm).
grep -qx "tasks: 4" fin/job.txt && ok || bad "fin/job.txt does not say 4 tasks: $(cat fin/job.txt)"
before=$(cd fin && find . -type f | sort | xargs md5sum)
expect 2 "the run in '$work/fin' is already complete \\($work/fin/checkpoints/latest is step 2, run.steps = 2\\); nothing was started" -- \
  env DRY_RUN=0 DECK="$tiny" OUTPUT=fin OVERRIDES="run.steps=2" bash "$src/jobs/train-cpu.sbatch"
[[ $(grep -c "error:" <<<"$LAST") == 1 ]] && ! grep -q "running:" <<<"$LAST" && ok || bad "not one clear refusal: $LAST"
expect 0 "DRY_RUN=1: not launched; nothing written to $work/fin" -- \
  env DECK="$tiny" OUTPUT=fin OVERRIDES="run.steps=3" bash "$src/jobs/train-cpu.sbatch"
[[ $(cd fin && find . -type f | sort | xargs md5sum) == "$before" ]] && ok ||
  bad "a refused or dry job changed fin's files: $(cd fin && find . -type f | sort | xargs md5sum)"
# Another job's records stay: a second simulate into a folder (accepted: the same deck again) appends its block
# to job.txt and keeps the identical deck.resolved.yaml; a different combination.txt goes to its own file.
expect 0 "done: $work/sim" -- env DRY_RUN=0 DECK="$tiny" COMMAND=simulate OUTPUT=sim bash "$src/jobs/train-cpu.sbatch"
cp sim/deck.resolved.yaml sim-deck.before
expect 0 "done: $work/sim" -- env DRY_RUN=0 DECK="$tiny" COMMAND=simulate OUTPUT=sim bash "$src/jobs/train-cpu.sbatch"
[[ $(grep -c '^command: ' sim/job.txt) == 2 ]] && cmp -s sim/deck.resolved.yaml sim-deck.before && ok ||
  bad "a second simulate job replaced the first one's records: $(cat sim/job.txt)"

# --- Inside a (faked) Slurm job: fakeslurm/scontrol answers `show job` (Command=FAKE_COMMAND,
# TimeLimit=FAKE_TIMELIMIT) and logs `requeue`; fakesrun/srun runs its command (a one-rank run, or simulate).
mkdir -p fakeslurm
cat >fakeslurm/scontrol <<'SH'
#!/bin/bash
case "$*" in
  "-o show job "*) echo "JobId=$4 JobName=x JobState=RUNNING TimeLimit=${FAKE_TIMELIMIT:-01:00:00} Command=${FAKE_COMMAND:-}" ;;
  "show job "*) printf 'JobId=%s JobName=x\n   TimeLimit=%s\n   Command=%s\n   WorkDir=/tmp\n' "$3" \
    "${FAKE_TIMELIMIT:-01:00:00}" "${FAKE_COMMAND:-}" ;;
  "requeue "*) echo "requeue $2" >>"$FAKE_DIR/requeue.log" ;;
  *) exit 1 ;;
esac
SH
chmod +x fakeslurm/scontrol
mkdir -p fakesrun && printf '#!/bin/bash\nwhile [[ $1 == -* ]]; do shift; done\nexec "$@"\n' >fakesrun/srun &&
  chmod +x fakesrun/srun
fake_job_env=(env PATH="$work/fakeslurm:$PATH" SLURM_JOB_ID=$fake_job SLURM_NTASKS=4)
# A source tree whose path holds a space, found from the job record (Command= is the path and the arguments).
ln -s "$src" "src tree"
expect 0 "running: $work/src\\\\ tree/scripts/conductor-launch srun " -- env -u CONDUCTOR_ROOT \
  "${fake_job_env[@]}" FAKE_COMMAND="$work/src tree/jobs/train-cpu.sbatch an argument" OUTPUT=outS \
  bash "$src/jobs/train-cpu.sbatch"
expect 2 "no jobs/common.sh under '/nonexistent/jobs/..'; set CONDUCTOR_ROOT" -- env -u CONDUCTOR_ROOT \
  "${fake_job_env[@]}" FAKE_COMMAND="/no such/jobs/train-cpu.sbatch" SLURM_SUBMIT_DIR=/nonexistent \
  bash "$src/jobs/train-cpu.sbatch"
# A job requeued before its first checkpoint (killed outright, no graceful stop: here a one-rank run's files
# without summary.json) restarts from step 0 in its own folder: the killed attempt's files move into
# OUTPUT/attempt-1/ (before: conductor refused the folder, and the restart failed).
"$bin" run "$tiny" parallel.pipeline=1 run.steps=2 "run.output=$work/killed" >killed.log 2>&1 && rm killed/summary.json ||
  bad "the one-rank run failed: $(cat killed.log)"
before=$(cd killed && md5sum trace.h5 metrics.jsonl resolved.yaml)
expect 0 "done: $work/killed" -- "${fake_job_env[@]}" PATH="$work/fakesrun:$work/fakeslurm:$PATH" DRY_RUN=0 \
  SLURM_RESTART_COUNT=1 SLURM_NTASKS=1 DECK="$tiny" OUTPUT=killed OVERRIDES="parallel.pipeline=1 run.steps=2" \
  bash "$src/jobs/train-cpu.sbatch"
grep -q "restart 1: no checkpoint in $work/killed/checkpoints yet; starting from step 0" <<<"$LAST" &&
  grep -q "moved the killed attempt's trace.h5 metrics.jsonl resolved.yaml into $work/killed/attempt-1/" <<<"$LAST" &&
  [[ $(cd killed/attempt-1 && md5sum trace.h5 metrics.jsonl resolved.yaml) == "$before" && -s killed/summary.json &&
    -f killed/checkpoints/latest ]] && ok || bad "the restart did not set the killed attempt aside: $LAST"
# A time limit below twice the warning's lead: said at the start, and no requeue after a stop.
expect 0 "warning: the time limit \\(00:03:00\\) is less than twice the 120 s lead" -- \
  "${fake_job_env[@]}" FAKE_TIMELIMIT=00:03:00 OUTPUT=outT bash "$src/jobs/train-cpu.sbatch"
expect 0 "running: " -- "${fake_job_env[@]}" FAKE_TIMELIMIT=1-00:00:00 OUTPUT=outT bash "$src/jobs/train-cpu.sbatch"
grep -q "warning: the time limit" <<<"$LAST" && bad "a one-day time limit was warned about: $LAST" || ok
# A stop signal before the launch (here while the deck is checked; before, the batch shell died of it): nothing
# is started or recorded, exit 3, and the job requeues as after a clean stop: a restarted one with a checkpoint
# short of its steps to continue, a fresh one to start over.
printf '#!/bin/bash\n[[ $1 == validate ]] && sleep 1.5\nexec %q "$@"\n' "$bin" >slow-validate
chmod +x slow-validate
# stop_before_launch OUTPUT RESTARTS: the train job signalled while it checks the deck; its output in early.log.
# early.log goes first: the job opens it only once forked, and the wait below must not find the previous run's
# "checking: " there (under load it did, and the signal came before the new job had started).
stop_before_launch() {
  rm -f requeue.log early.log
  ("${fake_job_env[@]}" DRY_RUN=0 SLURM_RESTART_COUNT="$2" CONDUCTOR_BINARY="$work/slow-validate" OUTPUT="$1" \
    bash "$src/jobs/train-cpu.sbatch" >early.log 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do grep -qs "checking: " early.log && break; sleep 0.05; done
    kill -TERM "$pid"
    wait "$pid"
    echo "exit $?" >>early.log)
}
real_checkpoint outE
stop_before_launch outE 1
if grep -q "stopped by SIGTERM before the launch: 'run' was not started (exit 3)" early.log &&
  grep -qx "exit 3" early.log && grep -q "stopped at step 2 of .*: requeueing job $fake_job to continue" early.log &&
  [[ $(cat requeue.log 2>/dev/null) == "requeue $fake_job" && ! -e outE/job.txt && ! -e outE/deck.resolved.yaml ]]; then
  ok
else
  bad "a stop before the launch was not exit 3 with a requeue and no records: $(cat early.log)"
fi
stop_before_launch outF 0
if grep -qx "exit 3" early.log && grep -q "stopped before the first step: requeueing job $fake_job to start over" early.log &&
  [[ $(cat requeue.log 2>/dev/null) == "requeue $fake_job" && $(ls -A outF) == job.log ]]; then
  ok
else
  bad "a fresh job stopped before the launch was not requeued, or wrote more than its log: $(cat early.log; ls -A outF)"
fi

# A stop signal at the moment of the launch (after the last check before it, before the launched command has set
# its trap): forwarded once the command runs and handles SIGTERM, so the run still stops gracefully (exit 3). A
# child forked by the batch shell carries the shell's own TERM trap until it execs (SigCgt says "handled"), and a
# SIGTERM sent then was lost, or killed the launcher once bash had reset its signals (exit 143: the Slurm test's
# time-limit stop under load). Each round forwards a SIGTERM that came before the child existed.
printf '#!/bin/bash\nsleep 0.02\ntrap "exit 3" TERM\nsleep 0.2 &\nwait $!\nexit 0\n' >late-trap
chmod +x late-trap
rcs=$(bash -c 'source "$1/jobs/common.sh"
  for ((i = 0; i < 20; i++)); do
    CJ_CHILD="" CJ_FORWARDED=0 CJ_GOT_TERM=1 CJ_LAUNCHING=1
    cj_run_forwarding_term "$2" >/dev/null
    echo -n "$CJ_RC "
  done' _ "$src" "$work/late-trap")
[[ $rcs == "$(printf '3 %.0s' {1..20})" ]] && ok ||
  bad "a SIGTERM forwarded as the launch command starts did not stop it gracefully (exit 3 each): $rcs"
# The batch shell says what a SIGTERM before the launched command exists does: before the last check, the run is
# not started; after it, the run is started and the signal passed on (it used to say "will not be started").
msg=$(bash -c 'source "$1/jobs/common.sh"; cj_on_term; CJ_LAUNCHING=1; cj_on_term' _ "$src")
[[ $msg == *"SIGTERM before the run started: it will not be started"*"SIGTERM while the run is being launched: it is passed on"* ]] &&
  ok || bad "the batch shell's SIGTERM messages before and during the launch are wrong: $msg"

# --- sweep.sbatch: ids 0..n-1 map one-to-one onto decks x schedules x executions x noises
export SWEEP_DECKS="inputs/quickstart.yaml $src/tests/slurm/tiny.yaml" SWEEP_SCHEDULES="1f1b zb-h1 gpipe"
export SWEEP_EXECUTIONS="strict readiness:bfw" SWEEP_NOISES="none jitter10 congestion" SWEEP_DIR=$work/sweep
n=$(bash "$src/jobs/sweep.sbatch" --count)
[[ $n == 36 ]] && ok || bad "sweep --count = '$n', expected 2*3*2*3 = 36"
# The lists split at newlines, too.
[[ $(SWEEP_SCHEDULES=$'1f1b\nzb-h1\ngpipe' SWEEP_NOISES=$'none\n  jitter10\ncongestion\n' bash "$src/jobs/sweep.sbatch" --count) == 36 ]] &&
  ok || bad "SWEEP_* lists with newlines lost entries"
bash "$src/jobs/sweep.sbatch" --list >list.tsv
[[ $(tail -n +2 list.tsv | cut -f2-5 | sort -u | wc -l) == 36 ]] && ok || bad "sweep --list has repeated combinations"
[[ $(tail -n +2 list.tsv | cut -f6 | sort -u | wc -l) == 36 ]] && ok || bad "sweep labels are not unique"
# Launching a task costs a `conductor validate` (~1 s of MPI start-up), so a spread of ids runs, not all 36.
# DRY_RUN: the combination is printed, nothing is written (no task folder).
for i in 0 17 35; do
  row=$(awk -F'\t' -v i="$i" '$1 == i' list.tsv)
  label=$(cut -f6 <<<"$row")
  out=$(env SLURM_JOB_ID=$((100 + i)) SLURM_ARRAY_JOB_ID=100 SLURM_ARRAY_TASK_ID=$i SLURM_NTASKS=4 \
    bash "$src/jobs/sweep.sbatch" 2>&1) || {
    bad "sweep task $i failed: $out"
    continue
  }
  IFS=$'\t' read -r _ deck schedule execution noise _ <<<"$row"
  grep -qx "conductor-job: schedule: $schedule" <<<"$out" && grep -qx "conductor-job: execution: $execution" <<<"$out" &&
    grep -qx "conductor-job: noise: $noise" <<<"$out" && grep -q "^conductor-job: deck: .*$(basename "$deck")$" <<<"$out" &&
    grep -q "run.output=$SWEEP_DIR/$(printf '%03d' "$i")-$label " <<<"$out" &&
    ok || bad "task $i: the combination disagrees with --list row '$row': $out"
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
[[ ! -e $SWEEP_DIR ]] && ok || bad "a DRY_RUN sweep task wrote into $SWEEP_DIR: $(ls -A "$SWEEP_DIR")"
expect 2 "array task 36 is outside the sweep's 36 combinations" -- \
  env SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=36 bash "$src/jobs/sweep.sbatch"
expect 2 "SLURM_ARRAY_TASK_ID is not set" -- bash "$src/jobs/sweep.sbatch"
# A task id with a leading zero is a decimal number (bash read 08 as bad octal: "value too great for base").
expect 0 "run.output=$SWEEP_DIR/008-" -- env SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=08 SLURM_NTASKS=4 bash "$src/jobs/sweep.sbatch"
grep -q "value too great" <<<"$LAST" && bad "task id 08 leaked a bash error: $LAST" || ok
expect 2 "SLURM_ARRAY_TASK_ID='x1' is not a task number \(0-35\)" -- env SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=x1 \
  bash "$src/jobs/sweep.sbatch"
expect 2 "noise preset 'nosuch' not found" -- env SWEEP_NOISES=nosuch SLURM_JOB_ID=1 SLURM_ARRAY_TASK_ID=0 \
  SLURM_NTASKS=4 bash "$src/jobs/sweep.sbatch"
# SWEEP_REPEATS: every combination N times (repeat fastest), repeat r with noise.seed=r and the label suffix -r<r>
[[ $(SWEEP_REPEATS=2 bash "$src/jobs/sweep.sbatch" --count) == 72 ]] && ok || bad "SWEEP_REPEATS=2 did not double the count"
SWEEP_REPEATS=2 bash "$src/jobs/sweep.sbatch" --list >list2.tsv
[[ $(awk -F'\t' '$1 == 3 {print $6, $7}' list2.tsv) == "quickstart-1f1b-strict-jitter10-r1 1" ]] && ok ||
  bad "SWEEP_REPEATS=2: task 3 is not repeat 1 of the second combination: $(sed -n 5p list2.tsv)"
out=$(env SWEEP_REPEATS=2 SLURM_JOB_ID=200 SLURM_ARRAY_JOB_ID=200 SLURM_ARRAY_TASK_ID=3 SLURM_NTASKS=4 \
  bash "$src/jobs/sweep.sbatch" 2>&1) && grep -q "noise.seed=1" <<<"$out" &&
  grep -qx "conductor-job: repeat: 1 of 2" <<<"$out" && ok ||
  bad "SWEEP_REPEATS=2 task 3 did not run with noise.seed=1: $out"
expect 2 "SWEEP_REPEATS='0' must be a positive integer" -- env SWEEP_REPEATS=0 bash "$src/jobs/sweep.sbatch" --count
# Not dry (simulate of the tiny deck, srun faked by one that runs its command): the task writes combination.txt
# and job.txt; the same task of another array job later (a resubmitted sweep) appends to job.txt and keeps the
# first one's combination.txt, its own next to it.
for job in 300 400; do
  expect 0 "done: $work/sweep/000-tiny-1f1b-strict-none" -- env DRY_RUN=0 PATH="$work/fakesrun:$PATH" DRY_RUN=0 COMMAND=simulate \
    SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict SWEEP_NOISES=none SLURM_JOB_ID=$job \
    SLURM_ARRAY_JOB_ID=$job SLURM_ARRAY_TASK_ID=0 SLURM_NTASKS=1 bash "$src/jobs/sweep.sbatch"
done
d=$work/sweep/000-tiny-1f1b-strict-none
grep -qx "array_task: 0 of 1 (array job 300)" "$d/combination.txt" &&
  grep -qx "array_task: 0 of 1 (array job 400)" "$d/combination-400.txt" &&
  [[ $(grep -c "^job: " "$d/job.txt") == 2 && -s $d/job.log && -s $d/summary.json ]] && ok ||
  bad "a second job of the same sweep task replaced the first one's records: $(ls -A "$d"; cat "$d/job.txt")"
rm -rf "$work/sweep"
unset SWEEP_DECKS SWEEP_SCHEDULES SWEEP_EXECUTIONS SWEEP_NOISES SWEEP_DIR

# --- analyze.sbatch refuses a folder without traces
mkdir -p empty
expect 2 "no trace.h5 in '$work/empty'" -- bash "$src/jobs/analyze.sbatch" empty
expect 2 "RUN_DIR '$work/nothere' is not a folder" -- bash "$src/jobs/analyze.sbatch" nothere

# --- analyze.sbatch over a two-task sweep folder of small made-up traces (analysis/tests/tracegen.py)
# sweep_task DIR...: a sweep task's folder NNN-LABEL with the combination.txt the task writes (its label line).
sweep_task() {
  local d
  for d in "$@"; do mkdir -p "$d" && echo "label: $(basename "$d" | sed 's/^[0-9]*-//')" >"$d/combination.txt"; done
}
sweep_task sw/000-q-strict sw/001-q-readiness
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
# A BASELINE that names no run is refused before any per-run output is written; a failing tool's exit status is
# named (before: always "exit 0").
sweep_task sw2/000-q-strict && cp sw/000-q-strict/trace.h5 sw2/000-q-strict/
expect 2 "BASELINE='q-nosuch' is not one of the runs in $work/sw2 \(q-strict\); nothing was written" -- \
  env BASELINE=q-nosuch bash "$src/jobs/analyze.sbatch" sw2
[[ $(ls -A sw2/000-q-strict | tr '\n' ' ') == "combination.txt trace.h5 " ]] && ok || bad "a refused BASELINE left outputs: $(ls -A sw2/000-q-strict)"
printf '#!/bin/bash\n[[ $1 == *timeline.py ]] && exit 7\nexec /usr/bin/python3 "$@"\n' >python-bad-timeline
chmod +x python-bad-timeline
expect 2 "'timeline.py' failed on $work/sw2 \\(exit 7\\)" -- env PYTHON="$work/python-bad-timeline" \
  bash "$src/jobs/analyze.sbatch" sw2
# Repeats whose decks differ only in their per-task folders (checkpoint.path, checkpoint.resume, run.output, as a
# run-mode sweep sets them) are one configuration.
sweep_task rep/000-q-r0 rep/001-q-r1
(cd "$src/analysis/tests" && /usr/bin/python3 -c "
import sys, tracegen
for i, d in enumerate(sys.argv[1:]):
    deck = 'run:\n  output: %s\ncheckpoint:\n  path: %s/checkpoints\n  resume: \"%s\"\nnoise:\n  seed: %d\n' % (
        d, d, d + '/checkpoints' if i else '', i)
    tracegen.example_trace(d + '/trace.h5', steps=2, deck=deck)" "$work/rep/000-q-r0" "$work/rep/001-q-r1") ||
  bad "tracegen.py could not write the repeat traces"
expect 0 "done: $work/rep/report.md" -- bash "$src/jobs/analyze.sbatch" rep
grep -q "2 runs in 1 configurations" rep/report.md && grep -q "^| q | 2 |" rep/report.md && ok ||
  bad "the two repeats are not one configuration: $(cat rep/report.md)"
# Only a sweep task's own prefix goes (its folder NNN-LABEL, LABEL in combination.txt): dated folders keep their
# names (2024-x and 2025-x were both "x", and compare.py refused the pair); two tasks of one label (a sweep
# submitted without its check) are named by their folders instead of failing at the end.
mkdir -p dated/2024-12-05-baseline dated/2025-12-05-baseline
sweep_task dated/003-q-1f1b dated/007-q-1f1b
for d in dated/*/; do cp sw/000-q-strict/trace.h5 "$d"; done
expect 0 "note: 2 runs are labelled 'q-1f1b': named by their folders instead" -- \
  env BASELINE=2024-12-05-baseline bash "$src/jobs/analyze.sbatch" dated
for name in 2024-12-05-baseline 2025-12-05-baseline 003-q-1f1b 007-q-1f1b; do
  grep -q "^| $name |" dated/report.md && ok || bad "dated/report.md lacks the run '$name': $(cat dated/report.md)"
done

# A killed attempt that a restart set aside (OUTPUT/attempt-N/) is not a run: skipped, nothing written into it
# (before: it was a second run, the baseline, and got bubbles.json and timeline.png).
mkdir -p withattempt/attempt-1 && cp sw/000-q-strict/trace.h5 withattempt/ && cp sw/000-q-strict/trace.h5 withattempt/attempt-1/
expect 0 "skipping $work/withattempt/attempt-1: a killed attempt set aside" -- bash "$src/jobs/analyze.sbatch" withattempt
[[ $(ls -A withattempt/attempt-1) == trace.h5 ]] && grep -q "1 runs in 1 configurations" withattempt/report.md && ok ||
  bad "analyze.sbatch took attempt-1/ as a run: $(ls -A withattempt/attempt-1; cat withattempt/report.md)"
# In a folder of runs (not a run folder itself) a run named attempt-1 is a run.
mkdir -p ofruns/runA ofruns/attempt-1 && cp sw/000-q-strict/trace.h5 ofruns/runA/ && cp sw/000-q-strict/trace.h5 ofruns/attempt-1/
expect 0 "" -- bash "$src/jobs/analyze.sbatch" ofruns
grep -q "^| attempt-1 |" ofruns/report.md && ok || bad "analyze.sbatch skipped a run named attempt-1: $(cat ofruns/report.md)"

# A run into a folder that holds another run's results is refused by the check, before this job's records
# (job.txt, deck.resolved.yaml) replace the ones there.
mkdir -p out12 && echo '{}' >out12/summary.json && echo 'command: the first job' >out12/job.txt &&
  echo 'the first deck' >out12/deck.resolved.yaml
expect 2 "run.output = '$work/out12' already holds the results of another run \\(summary.json\\)" -- \
  env OUTPUT=out12 bash "$src/jobs/train-cpu.sbatch"
[[ $(cat out12/job.txt) == 'command: the first job' && $(cat out12/deck.resolved.yaml) == 'the first deck' &&
  -z $(find out12 -name '.deck.resolved.yaml.*') ]] && ok || bad "a refused job changed out12's records"

# --- submit-sweep.sh checks every combination before it makes a folder or submits (a fake sbatch records calls)
mkdir -p fakebin
printf '#!/bin/bash\necho "$*" >>%q/sbatch-calls\necho 99\n' "$work" >fakebin/sbatch
chmod +x fakebin/sbatch
expect 2 "sweep task 1 \\(.*noise bogus\\) is refused" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_SCHEDULES=zb-h1 SWEEP_EXECUTIONS=strict \
  SWEEP_NOISES="none bogus" bash "$src/jobs/submit-sweep.sh"
grep -q "noise preset 'bogus' not found" <<<"$LAST" && ok || bad "the bad preset is not named: $LAST"
expect 2 "sweep task 1 .*readiness:nosuch.* is refused" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_SCHEDULES=zb-h1 \
  SWEEP_EXECUTIONS="strict readiness:nosuch" SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh"
grep -q "command line 'schedule.hint=nosuch'" <<<"$LAST" && ok || bad "the bad hint is not named: $LAST"
# A run's pipeline is the array's task count, one for all tasks: decks of different parallel.pipeline, or decks
# whose pipeline is not the count the sbatch options give, are refused before anything is submitted (before, the
# tasks failed in the queue: "the deck has parallel.pipeline=2 but the job has 4 tasks").
sed 's/^  pipeline: 4$/  pipeline: 2/; s/^  n_layers: 4$/  n_layers: 2/' "$tiny" >tiny2.yaml
expect 2 "the sweep's decks have different parallel.pipeline values \($tiny: parallel.pipeline=4, $work/tiny2.yaml: parallel.pipeline=2\)" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="$tiny $work/tiny2.yaml" SWEEP_SCHEDULES=1f1b \
  SWEEP_EXECUTIONS=strict SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh"
expect 2 "the array's tasks get 8 tasks each \(the option -n 8\) but the decks have $tiny: parallel.pipeline=4; pass --ntasks=4" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b \
  SWEEP_EXECUTIONS=strict SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh" -p cpu -n 8
expect 2 "the array's tasks get 4 tasks each \(#SBATCH --ntasks=4 of jobs/sweep.sbatch\) but the decks have $work/tiny2.yaml: parallel.pipeline=2; pass --ntasks=2" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="$work/tiny2.yaml" SWEEP_SCHEDULES=1f1b \
  SWEEP_EXECUTIONS=strict SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh"
# Two tasks of one label (the analysis names runs by label: compare.py failed at the end of the sweep) are refused
# at the check: a deck file name in two folders, a noise preset by name and by path, a value listed twice.
mkdir -p qa qb && cp "$tiny" qa/q.yaml && cp "$tiny" qb/q.yaml
expect 2 "sweep tasks 0 and 1 have the same label 'q-1f1b-strict-none' \(task 0: deck qa/q.yaml, .*task 1: deck qb/q.yaml," -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="qa/q.yaml qb/q.yaml" SWEEP_SCHEDULES=1f1b \
  SWEEP_EXECUTIONS=strict SWEEP_NOISES=none bash "$src/jobs/submit-sweep.sh"
expect 2 "sweep tasks 0 and 1 have the same label 'tiny-1f1b-strict-jitter10'" -- env SWEEP_DECKS="$tiny" \
  SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict SWEEP_NOISES="jitter10 inputs/noise/jitter10.yaml" \
  bash "$src/jobs/sweep.sbatch" --check
expect 2 "sweep tasks 0 and 1 have the same label 'tiny-1f1b-strict-none'" -- env SWEEP_DECKS="$tiny" \
  SWEEP_SCHEDULES="1f1b 1f1b" SWEEP_EXECUTIONS=strict SWEEP_NOISES=none bash "$src/jobs/sweep.sbatch" --check
# A BASELINE that is no task's label nor a configuration's is refused at submission (the analysis found it only
# once the sweep had run); a configuration of repeats (a label less -rK) is one.
expect 2 "BASELINE='tiny-1f1b-strict-nne' is not a label of the sweep's tasks nor a configuration: expected one of tiny-1f1b-strict-none; nothing was submitted" -- \
  env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict \
  SWEEP_NOISES=none SWEEP_REPEATS=2 BASELINE=tiny-1f1b-strict-nne bash "$src/jobs/submit-sweep.sh"
# A COMMAND the tasks refuse, a REQUEUE that is neither 0 nor 1, a missing deck (one message: before, conductor
# ran without its deck and printed its usage too) and a word sbatch would take as the script to submit: all
# refused before anything is submitted (before, COMMAND=bogus was submitted and every task failed in the queue).
sweep_env=(env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DIR="$work/sweepX" SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b
  SWEEP_EXECUTIONS=strict SWEEP_NOISES=none)
expect 2 "COMMAND='bogus': expected run, simulate or validate" -- "${sweep_env[@]}" COMMAND=bogus \
  bash "$src/jobs/submit-sweep.sh"
expect 2 "REQUEUE='no': expected 1 .* or 0" -- "${sweep_env[@]}" REQUEUE=no bash "$src/jobs/submit-sweep.sh"
# sbatch's flags without a value, and options with one as the next word, pass the check (then REQUEUE stops it).
expect 2 "REQUEUE='no'" -- "${sweep_env[@]}" REQUEUE=no bash "$src/jobs/submit-sweep.sh" --nice -p cpu --exclusive \
  --gres gpu:1 -J name --hold
expect 2 "deck '$work/no-such-deck.yaml' not found" -- "${sweep_env[@]}" SWEEP_DECKS="$work/no-such-deck.yaml" \
  COMMAND=simulate bash "$src/jobs/submit-sweep.sh"
grep -qiE "usage|argument 2 is empty" <<<"$LAST" && bad "a missing deck ran conductor without it: $LAST" || ok
expect 2 "unexpected argument 'foo': the arguments are sbatch options" -- "${sweep_env[@]}" COMMAND=simulate \
  bash "$src/jobs/submit-sweep.sh" -p cpu --hold foo
expect 2 "REQUEUE='abc': expected 1" -- env REQUEUE=abc OUTPUT=out-requeue bash "$src/jobs/train-cpu.sbatch" "$tiny"
# DRY_RUN=1 checks and prints what it would submit, and submits and writes nothing (it submitted real jobs, each
# task doing nothing).
expect 0 "DRY_RUN=1: the sweep of 1 tasks checked; nothing was written or submitted" -- "${sweep_env[@]}" \
  COMMAND=simulate DRY_RUN=1 bash "$src/jobs/submit-sweep.sh"
grep -q "sbatch --parsable --array=0-0 --ntasks=1 .*jobs/sweep.sbatch" <<<"$LAST" && ok ||
  bad "the dry run does not show the array's submission: $LAST"
[[ ! -e sbatch-calls && ! -e sweepX && ! -e out-requeue ]] && ok || bad "a refused sweep was submitted or made its folder"
# The analysis job gets the sweep folder as its argument (a comma in --export=ALL,RUN_DIR=... split it); a folder
# that already holds a sweep is refused, its records as they were.
one_sweep=(env DRY_RUN=0 PATH="$work/fakebin:$PATH" SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict SWEEP_NOISES=none)
expect 0 "sweep=99 analyze=99 dir=$work/sw,x" -- "${one_sweep[@]}" SWEEP_DIR="$work/sw,x" BASELINE=tiny-1f1b-strict-none \
  bash "$src/jobs/submit-sweep.sh"
analyze_call=$(sed -n 2p sbatch-calls)
[[ $analyze_call == *"--dependency=afterok:99 "*" $src/jobs/analyze.sbatch $work/sw,x" && $analyze_call != *--export* ]] &&
  ok || bad "the analysis job does not get the folder as its argument: $analyze_call"
before=$(md5sum "$work/sw,x"/*.*)
expect 2 "SWEEP_DIR '$work/sw,x' already holds a sweep \\(manifest.tsv, array job 99\\); nothing was submitted" -- \
  "${one_sweep[@]}" SWEEP_DIR="$work/sw,x" bash "$src/jobs/submit-sweep.sh"
[[ $(wc -l <sbatch-calls) == 2 && $(md5sum "$work/sw,x"/*.*) == "$before" ]] && ok ||
  bad "a second sweep into the same folder was submitted or changed its records"
# Without SWEEP_DIR every submission gets a new folder, in the same second too (a `date` stuck at one second).
mkdir -p fakedate subm && printf '#!/bin/bash\necho 20260101-000000\n' >fakedate/date && chmod +x fakedate/date
(cd subm && for i in 1 2; do
  "${one_sweep[@]}" PATH="$work/fakedate:$work/fakebin:$PATH" bash "$src/jobs/submit-sweep.sh" >/dev/null 2>&1 || exit 1
done) || bad "submit-sweep.sh without SWEEP_DIR failed"
[[ $(find subm/sweeps -mindepth 1 -maxdepth 1 -type d -name 'sweep-*' | wc -l) == 2 ]] && ok ||
  bad "two submissions without SWEEP_DIR shared a folder: $(ls subm/sweeps)"

# A submission that fails says what was and was not submitted. The array refused by sbatch: nothing queued, and
# nothing this submission made is left (before: manifest.tsv stayed, so the retry was refused as "already holds a
# sweep", or an empty sweeps/sweep-... folder); a folder that was there stays with what it held. The analysis
# refused: the queued array's id is printed and in sweep.jobid (before: neither), with the command to submit it.
mkdir -p fakefail && cat >fakefail/sbatch <<'SH'
#!/bin/bash
if [[ $* == *--array=* && $FAKE_FAIL == array || $* == *--dependency=* && $FAKE_FAIL == analyze ]]; then
  echo "sbatch: error: invalid partition specified: nosuch" >&2
  exit 1
fi
echo 77
SH
chmod +x fakefail/sbatch
fail_sweep=(env DRY_RUN=0 PATH="$work/fakefail:$PATH" SWEEP_DECKS="$tiny" SWEEP_SCHEDULES=1f1b SWEEP_EXECUTIONS=strict SWEEP_NOISES=none)
expect 1 "sbatch refused the array \(exit 1; its message above\): nothing was submitted" -- \
  "${fail_sweep[@]}" FAKE_FAIL=array SWEEP_DIR="$work/swf/new" bash "$src/jobs/submit-sweep.sh"
[[ ! -e swf ]] && ok || bad "a refused array left folders behind: $(find swf)"
mkdir -p swe && echo mine >swe/notes.txt
expect 1 "nothing was submitted" -- "${fail_sweep[@]}" FAKE_FAIL=array SWEEP_DIR="$work/swe" bash "$src/jobs/submit-sweep.sh"
[[ $(ls -A swe) == notes.txt ]] && ok || bad "a refused array changed an existing SWEEP_DIR: $(ls -A swe)"
mkdir -p subf
expect 1 "nothing was submitted" -- bash -c 'cd subf && "$@"' _ "${fail_sweep[@]}" FAKE_FAIL=array bash "$src/jobs/submit-sweep.sh"
[[ -z $(ls -A subf) ]] && ok || bad "a refused array left a sweep folder: $(find subf)"
expect 0 "sweep=77 analyze=77 dir=$work/swf/new" -- "${fail_sweep[@]}" FAKE_FAIL= SWEEP_DIR="$work/swf/new" \
  bash "$src/jobs/submit-sweep.sh"
expect 1 "the array job 77 is queued \($work/swa/sweep.jobid\), but the analysis job was not submitted \(sbatch exit 1; above\). Submit it by hand: sbatch --parsable --dependency=afterok:77 " -- \
  "${fail_sweep[@]}" FAKE_FAIL=analyze SWEEP_DIR="$work/swa" bash "$src/jobs/submit-sweep.sh"
grep -qx "sweep=77 analyze=none dir=$work/swa" <<<"$LAST" && [[ $(cat swa/sweep.jobid) == 77 && ! -e swa/analyze.jobid &&
  -s swa/manifest.tsv ]] && ok || bad "a refused analysis lost the array's id: $(ls -A swa)"

# --- deck fragments: any YAML conductor reads (block lists, anchors), checked and located by conductor itself
printf 'noise:\n  kind:\n    - gaussian   # comment\n  level: &l 0.5\n  seed: 3\nrun:\n  name: "x"\n' >frag.yaml
expect 0 "" -- env DRY_RUN=0 OUTPUT=out9v COMMAND=validate OVERRIDES="@frag.yaml" bash "$src/jobs/train-cpu.sbatch"
grep -q "^  kind: \[gaussian\]$" out9v/deck.resolved.yaml && grep -q "^  level: 0.5$" out9v/deck.resolved.yaml &&
  grep -q "^  name: x$" out9v/deck.resolved.yaml && ok || bad "out9v/deck.resolved.yaml lacks frag.yaml's values"
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
# --help answers (as every script does) without looking for a GPU: on a GPU node it would start the whole check
expect 0 "One-shot check of the CUDA backend" -- env PATH="$work/nogpu:$PATH" bash "$src/jobs/device-check.sh" --help

# --- Makefile (make -n: nothing is built): CMAKE_ARGS reaches a build folder that is already configured (before,
# cmake ran only when its CMakeCache.txt was missing, and `make test CMAKE_ARGS=-DCONDUCTOR_WERROR=ON` did nothing
# of it); a new folder gets the Release build type with it, an existing one keeps its own.
if command -v make >/dev/null; then
  # Not the enclosing make's variables: under `make test CMAKE_ARGS=...` (CI) MAKEFLAGS hands them to every make.
  clean_make=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u CMAKE_ARGS make)
  mkdir -p mkbuild && : >mkbuild/CMakeCache.txt
  expect 0 "^cmake -S \. -B $work/mkbuild +-DCONDUCTOR_WERROR=ON\$" -- \
    "${clean_make[@]}" -s -n -C "$src" build-tests BUILD="$work/mkbuild" CMAKE_ARGS=-DCONDUCTOR_WERROR=ON
  expect 0 "^cmake -S \. -B $work/mkbuild2 -DCMAKE_BUILD_TYPE=Release -DCONDUCTOR_WERROR=ON\$" -- \
    "${clean_make[@]}" -s -n -C "$src" build-tests BUILD="$work/mkbuild2" CMAKE_ARGS=-DCONDUCTOR_WERROR=ON
  expect 0 "" -- "${clean_make[@]}" -s -n -C "$src" build-tests BUILD="$work/mkbuild"
  grep -q "^cmake -S" <<<"$LAST" && bad "make without CMAKE_ARGS reconfigured a configured folder: $LAST" || ok
fi

# sweeps/ (submit-sweep.sh's default folder, as runs/ is the train jobs') is ignored by git in the source tree.
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" check-ignore -q sweeps/sweep-x/manifest.tsv && ok || bad "sweeps/ is not in .gitignore"
fi

echo "jobs scripts: $pass passed, $failures failed"
[[ $failures -eq 0 ]]
