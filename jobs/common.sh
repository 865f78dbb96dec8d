# Shared by the batch scripts in jobs/ (sourced, never run on its own). Everything here prints what it does and
# fails loudly: a job that silently did nothing costs a queue wait to discover.
#
# Conventions used by every script:
#   CONDUCTOR_ROOT     the source tree (default: the folder above the submitted script)
#   CONDUCTOR_BINARY   the conductor executable (default: $CONDUCTOR_ROOT/build/conductor; in an installed tree,
#                      where CONDUCTOR_ROOT is PREFIX/share/conductor, PREFIX/bin/conductor)
#   OVERRIDES          deck overrides `key.path=value` separated by whitespace (spaces, tabs or newlines); an
#                      entry `@FILE` is a deck fragment (a YAML file such as inputs/noise/jitter10.yaml) that
#                      conductor merges onto the deck; the fragments go first, in order, the overrides after them
#                      (e.g. OVERRIDES="@inputs/noise/jitter10.yaml run.steps=5"). Values cannot contain spaces:
#                      write lists in flow form without spaces, `[1.0,2.0]`.
#   DRY_RUN=1          print the launch command instead of running it (no Slurm needed); nothing is written
#                      into the output folder (not even the folder itself)
#   SRUN_MPI           srun's --mpi plugin (default pmix: Debian's Open MPI 4.1 starts under pmix, not pmi2)
#   CONDUCTOR_SIGNAL_LEAD_S  the lead of the job's time-limit warning, #SBATCH --signal=B:TERM@LEAD (default 120,
#                      the scripts' own): a job whose time limit is below twice that lead is warned and not
#                      requeued after a stop (every attempt would be stopped as early)
#
# Records in the output folder, written only once the run is launched (a refused, stopped-before-launch or
# DRY_RUN job writes none) and never replacing another job's: job.txt gets one block per launched attempt
# (appended; date, job id, restart, nodes, tasks, deck, command); deck.resolved.yaml (and a sweep task's
# combination.txt) is written when absent or identical, else this job's goes to deck.resolved-JOBID.yaml
# (combination-JOBID.txt), with a note in the log.
# shellcheck shell=bash

cj_log() { echo "conductor-job: $*"; }
cj_fail() {
  echo "conductor-job: error: $*" >&2
  exit 2
}

# Prints its arguments as one shell-quoted command line.
cj_quote() {
  local out="" a
  for a in "$@"; do out+="$(printf '%q' "$a") "; done
  echo "${out% }"
}

# cj_split ARRAY STRING: sets ARRAY to STRING's words, split at any whitespace, newlines included (a plain
# `read -a` stops at the first newline and drops the rest); no glob expansion: `[1,2]` is a value, not a pattern.
cj_split() {
  read -r -d '' -a "$1" <<<"$2" || true # -d '': up to the end of the string (read then returns 1)
}

# cj_resolve PATH: an input's absolute path (a deck, a fragment, the binary); a relative one is looked up in the
# working folder (the submit folder under Slurm), then under CONDUCTOR_ROOT. Prints the candidate even when it
# does not exist (callers check). Outputs use cj_resolve_output.
cj_resolve() {
  local p=$1
  if [[ $p == /* ]]; then
    echo "$p"
  elif [[ -e $PWD/$p ]]; then
    echo "$PWD/$p"
  elif [[ -e $CONDUCTOR_ROOT/$p ]]; then
    echo "$CONDUCTOR_ROOT/$p"
  else
    echo "$PWD/$p"
  fi
}

# cj_base: the folder relative outputs go under: the submit folder under Slurm (SLURM_SUBMIT_DIR: a job started
# with --chdir runs elsewhere), else the working folder.
cj_base() {
  if [[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_SUBMIT_DIR:-} ]]; then echo "$SLURM_SUBMIT_DIR"; else echo "$PWD"; fi
}

# cj_resolve_output PATH: an absolute path for an output folder (OUTPUT, SWEEP_DIR, RUN_DIR): a relative one is
# always under cj_base, never looked up in CONDUCTOR_ROOT (cj_resolve, for inputs, would find an earlier run's
# folder of that name in the source tree and write there).
cj_resolve_output() {
  if [[ $1 == /* ]]; then echo "$1"; else echo "$(cj_base)/$1"; fi
}

# Checks the binary; sets CONDUCTOR_BINARY to its absolute path.
cj_require_binary() {
  local default=$CONDUCTOR_ROOT/build/conductor
  [[ ! -e $default && -x $CONDUCTOR_ROOT/../../bin/conductor ]] &&
    default=$(cd "$CONDUCTOR_ROOT/../../bin" && pwd)/conductor
  CONDUCTOR_BINARY=$(cj_resolve "${CONDUCTOR_BINARY:-$default}")
  [[ -x $CONDUCTOR_BINARY ]] ||
    cj_fail "conductor binary '$CONDUCTOR_BINARY' is missing or not executable (build it with 'make build' in" \
      "$CONDUCTOR_ROOT, or set CONDUCTOR_BINARY)"
}

# cj_require_deck PATH: prints the absolute path of an existing deck, or fails.
cj_require_deck() {
  local d
  d=$(cj_resolve "$1")
  [[ -f $d ]] || cj_fail "deck '$1' not found (looked in $PWD and $CONDUCTOR_ROOT; set DECK=path/to/deck.yaml)"
  echo "$d"
}

# cj_expand_overrides "STRING": sets the array CJ_OVERRIDES from a whitespace-separated OVERRIDES string; an
# `@FILE` entry becomes `@/absolute/FILE` (conductor reads the fragment itself; cj_launch puts fragments first).
cj_expand_overrides() {
  CJ_OVERRIDES=()
  local entry file entries=()
  cj_split entries "$1"
  for entry in "${entries[@]}"; do
    if [[ $entry == @* ]]; then
      file=$(cj_resolve "${entry#@}")
      [[ -f $file ]] || cj_fail "deck fragment '${entry#@}' not found (looked in $PWD and $CONDUCTOR_ROOT)"
      CJ_OVERRIDES+=("@$file")
    elif [[ $entry == *=* ]]; then
      CJ_OVERRIDES+=("$entry")
    else
      cj_fail "OVERRIDES: '$entry' is neither key.path=value nor @FILE (entries are split at spaces and newlines:" \
        "a value holding a space goes in a YAML fragment file, passed as @FILE)"
    fi
  done
}

# cj_exit_reason CODE: what an exit status above 128 means (a process of the command killed by a signal: the
# shell's and srun's 128 + N), for the job's error line; nothing for other codes (conductor's own: README).
cj_exit_reason() {
  local code=$1 name
  ((code > 128 && code < 160)) || return 0
  name=$(kill -l $((code - 128)) 2>/dev/null) || name=$((code - 128))
  printf ' (a process was killed by SIG%s' "$name"
  case $name in
    # srun (--kill-on-bad-exit) and mpirun kill the other tasks once one fails, and exit 137 then, not with the
    # failed task's code: its own lines in the log name it, which this status cannot.
    KILL) printf ': by srun or mpirun after another task failed (that task'"'"'s error and srun'"'"'s "task N: Exited'
      printf ' with exit code M" lines above), or by the out-of-memory killer, a hard time limit or scancel -s KILL'
      printf ' (the job log and dmesg say which)' ;;
    TERM) printf ' before it could stop cleanly (exit 3)' ;;
    SEGV | BUS | ABRT) printf ': a crash; its core or the rank'"'"'s last lines above say where' ;;
  esac
  printf ')'
}

# cj_deck_key RESOLVED_YAML SECTION KEY value|without: the one reader of `section.key`'s line in the output of
# `conductor validate` (sections at the line's start, their keys two spaces in): `value` prints the key's value,
# `without` the deck without that line.
cj_deck_key() {
  awk -v s="$2" -v k="$3" -v action="$4" '
    /^[^ ]/ { sec = $0; sub(/:.*/, "", sec) }
    { hit = sec == s && $0 ~ "^  " k ":" }
    action == "value" && hit { v = $0; sub(/^[^:]*:[[:space:]]*/, "", v); print v; exit }
    action == "without" && !hit
  ' "$1"
}

# cj_deck_value RESOLVED_YAML SECTION KEY: the value of `section.key`.
cj_deck_value() { cj_deck_key "$1" "$2" "$3" value; }

# --- Stop signals to the batch shell: the time-limit warning (#SBATCH --signal=B:TERM@LEAD), preemption,
# `scancel -b -s TERM`. The batch scripts remember one from their first line on (a trap of their own until
# jobs/common.sh is sourced, then cj_catch_term's): one before the launch starts nothing (cj_launch: exit 3,
# requeued as after a clean stop); one after it is forwarded to scripts/conductor-launch (cj_run_forwarding_term),
# once that can take it. CJ_GOT_TERM=1 once one came. CJ_LAUNCHING=1 once the last check before the launch has
# passed: a signal from then on is forwarded to the run, which is started all the same.
CJ_GOT_TERM=${CJ_GOT_TERM:-0}
CJ_CHILD=""
CJ_FORWARDED=0
CJ_LAUNCHING=0
cj_catch_term() { trap cj_on_term TERM; }
cj_on_term() {
  CJ_GOT_TERM=1
  if [[ -z $CJ_CHILD ]]; then
    if [[ $CJ_LAUNCHING == 1 ]]; then
      cj_log "SIGTERM while the run is being launched: it is passed on to the run once that can take it"
    else
      cj_log "SIGTERM before the run started: it will not be started"
    fi
    return 0
  fi
  cj_log "SIGTERM: asking the run to checkpoint and stop"
  cj_forward_term
}
# One SIGTERM to the launched command, once it handles SIGTERM (a script in its first milliseconds does not yet:
# the signal would kill it and leave the run going; cj_wait_catches_term).
cj_forward_term() {
  CJ_FORWARDED=1
  cj_wait_catches_term "$CJ_CHILD"
  kill -TERM "$CJ_CHILD" 2>/dev/null || true
}

# cj_catches_term PID: whether process PID handles SIGTERM (bit 15 of SigCgt in /proc/PID/status).
cj_catches_term() {
  local line
  while IFS= read -r line; do
    [[ $line == SigCgt:* ]] || continue
    line=${line#SigCgt:}
    line=${line//[[:space:]]/}
    (((16#$line >> 14) & 1)) && return 0
    return 1
  done 2>/dev/null <"/proc/$1/status"
  return 1
}

# cj_execed PID: whether process PID, a child of this shell, runs its own program already: its command line is no
# longer this shell's. Between the fork and the exec it is a copy of this shell, and carries this shell's own TERM
# trap (SigCgt says it handles SIGTERM) until bash resets its signals for the exec: a SIGTERM then is lost, or,
# once they are reset and before the launched script sets its trap, kills it (exit 143). Builtins only.
cj_execed() {
  local -a own=() child=()
  mapfile -d '' -t own 2>/dev/null <"/proc/$$/cmdline"
  mapfile -d '' -t child 2>/dev/null <"/proc/$1/cmdline" || return 1
  ((${#child[@]} > 0)) && [[ ${child[*]} != "${own[*]}" ]]
}

# cj_wait_catches_term PID: waits (up to 10 s, while it lives) until process PID, launched by this shell, has
# started its program (cj_execed) and handles SIGTERM.
cj_wait_catches_term() {
  local tries
  for ((tries = 0; tries < 500; tries++)); do
    cj_execed "$1" && cj_catches_term "$1" && return 0
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.02
  done
}

# cj_run_forwarding_term COMMAND...: runs the command in the background and forwards every SIGTERM of the batch
# shell to it (#SBATCH --signal=B:TERM@LEAD signals only the batch shell; bash would run a trap only after a
# foreground command ends). The command is scripts/conductor-launch, which turns the first SIGTERM into one
# graceful stop of every rank (once the ranks can take it) and swallows repeats. Sets CJ_RC to the command's
# exit status; CJ_GOT_TERM is 1 when the batch shell was signalled.
cj_run_forwarding_term() {
  cj_catch_term
  "$@" &
  CJ_CHILD=$!
  # A SIGTERM between the last check before the launch and now found no command to forward to.
  if [[ $CJ_GOT_TERM == 1 && $CJ_FORWARDED == 0 ]]; then
    cj_log "SIGTERM came during the launch: asking the run to checkpoint and stop"
    cj_forward_term
  fi
  while kill -0 "$CJ_CHILD" 2>/dev/null; do
    wait "$CJ_CHILD" || true # returns early when the trap runs (set -e must not end the script there)
  done
  wait "$CJ_CHILD" && CJ_RC=0 || CJ_RC=$? # the finished command's status (bash keeps it)
}

# cj_check_time_limit: a job whose time limit is below twice the lead of its time-limit warning (the stop
# comes in its first minutes, and again in every requeued attempt) is warned, and not requeued after a stop.
cj_check_time_limit() {
  local lead=${CONDUCTOR_SIGNAL_LEAD_S:-120} line limit rest parts secs
  [[ $lead =~ ^[1-9][0-9]*$ && -n ${SLURM_JOB_ID:-} ]] || return 0 # 0: no time-limit warning
  line=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null) || return 0
  [[ $line =~ (^|[[:space:]])TimeLimit=([0-9:-]+)([[:space:]]|$) ]] || return 0 # UNLIMITED, Partition_Limit
  limit=${BASH_REMATCH[2]}
  rest=$limit
  secs=0
  if [[ $rest == *-* ]]; then
    secs=$((10#${rest%%-*} * 86400))
    rest=${rest#*-}
  fi
  IFS=: read -r -a parts <<<"$rest"
  case ${#parts[@]} in
    3) secs=$((secs + 10#${parts[0]} * 3600 + 10#${parts[1]} * 60 + 10#${parts[2]})) ;;
    2) secs=$((secs + 10#${parts[0]} * 60 + 10#${parts[1]})) ;;
    1) secs=$((secs + 10#${parts[0]} * 60)) ;;
    *) return 0 ;;
  esac
  if ((secs < 2 * lead)); then
    cj_log "warning: the time limit ($limit) is less than twice the ${lead} s lead of the time-limit warning" \
      "(--signal=B:TERM@$lead): the run is stopped $((secs > lead ? secs - lead : 0)) s after the job starts, and" \
      "so would every requeued attempt; not requeueing after a stop. Submit with --time of at least" \
      "$(((2 * lead + 59) / 60)) minutes (with another --signal lead, set CONDUCTOR_SIGNAL_LEAD_S to it)"
    CJ_NO_REQUEUE=1
  fi
}

# cj_checkpoint_root OUTPUT [override ...]: the checkpoint folder of a train job: OUTPUT/checkpoints unless an
# override names checkpoint.path.
cj_checkpoint_root() {
  local ck=$1/checkpoints o
  shift
  for o in "$@"; do
    [[ $o == checkpoint.path=* ]] && ck=${o#checkpoint.path=}
  done
  echo "$ck"
}

# cj_latest_step CHECKPOINTS: the step number of CHECKPOINTS/latest (fails when there is none).
cj_latest_step() {
  local latest
  latest=$(cat "$1/latest" 2>/dev/null) || return 1
  latest=${latest#step-}
  [[ $latest =~ ^[0-9]+$ ]] || return 1
  echo $((10#$latest))
}

# cj_resume_overrides OUTPUT [override ...]: sets CJ_RUN_OVERRIDES to the overrides that make a `run`
# requeue-safe: checkpoints in OUTPUT/checkpoints (unless an override names checkpoint.path), and, when that
# folder holds a `latest` step (a requeued or restarted job: SLURM_RESTART_COUNT > 0, or a resubmission into the
# same OUTPUT), checkpoint.resume from it, in place of any checkpoint.resume of the overrides (which the first
# attempt started from). The run then continues OUTPUT/trace.h5 instead of replacing it. Sets CJ_CK to the
# checkpoint folder and CJ_RESUME_OWN to it when resuming from it (else empty). A restart without a checkpoint
# yet starts over in OUTPUT, the killed attempt's files moved aside first (cj_set_aside). A first attempt whose
# deck says run.overwrite=true (CJ_OVERWRITE) is a new run: a `latest` there is an earlier run's, and it moves
# aside with that run's files (nothing deleted) instead of being resumed.
cj_resume_overrides() {
  local output=$1 o user_resume=""
  shift
  CJ_CK=$(cj_checkpoint_root "$output" "$@")
  CJ_RESUME_OWN=""
  CJ_RUN_OVERRIDES=()
  for o in "$@"; do
    if [[ $o == checkpoint.resume=* ]]; then user_resume=${o#checkpoint.resume=}; else CJ_RUN_OVERRIDES+=("$o"); fi
  done
  [[ $CJ_CK == "$output/checkpoints" ]] && CJ_RUN_OVERRIDES+=("checkpoint.path=$CJ_CK")
  if [[ -f $CJ_CK/latest && ${SLURM_RESTART_COUNT:-0} -eq 0 && ${CJ_OVERWRITE:-false} == true ]]; then
    # run.overwrite=true asks for a new run, not the continuation of the one whose checkpoints are there: they
    # and its records move aside (nothing deleted), so that a `latest` found by a requeue is this run's own.
    cj_set_aside "$output" "$CJ_CK" "the earlier run's"
  elif [[ -f $CJ_CK/latest ]]; then
    [[ -n $user_resume ]] && cj_log "note: $CJ_CK holds this run's own checkpoints: resuming from them, not" \
      "from checkpoint.resume=$user_resume (where its first attempt started)"
    cj_log "restart ${SLURM_RESTART_COUNT:-0}: resuming from $CJ_CK ($(cat "$CJ_CK/latest"))"
    CJ_RUN_OVERRIDES+=("checkpoint.resume=$CJ_CK")
    CJ_RESUME_OWN=$CJ_CK
    return 0
  fi
  [[ -n $user_resume ]] && CJ_RUN_OVERRIDES+=("checkpoint.resume=$user_resume")
  if [[ ${SLURM_RESTART_COUNT:-0} -gt 0 ]]; then
    cj_log "restart $SLURM_RESTART_COUNT: no checkpoint in $CJ_CK yet; starting" \
      "${user_resume:+from checkpoint.resume=$user_resume}${user_resume:-from step 0}"
    cj_set_aside "$output" "$CJ_CK"
  fi
}

# cj_set_aside OUTPUT CHECKPOINTS [WHOSE]: moves what a killed attempt without a checkpoint (or WHOSE: an earlier
# run's) left in OUTPUT (the run's files: trace, summary, metrics, resolved deck, ...; the default checkpoint
# folder when it holds anything)
# into OUTPUT/attempt-N/ (N: the restart count, or the next free number), so the restart can start over in its
# own folder. Nothing is deleted. DRY_RUN=1 only says what it would move.
cj_set_aside() {
  local output=$1 ck=$2 whose=${3:-"the killed attempt's"} f items=() n dest
  for f in trace.h5 summary.json metrics.jsonl resolved.yaml policy.pt curve.csv summary.csv summary.txt \
    "$output"/vstage_*.h5; do
    f=${f##*/}
    [[ -e $output/$f ]] && items+=("$f")
  done
  if [[ $ck == "$output/checkpoints" && -d $ck ]] && [[ -n $(ls -A "$ck") ]]; then items+=(checkpoints); fi
  [[ ${#items[@]} -gt 0 ]] || return 0
  n=${SLURM_RESTART_COUNT:-1}
  while [[ -e $output/attempt-$n ]]; do n=$((n + 1)); done
  dest=$output/attempt-$n
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    cj_log "DRY_RUN=1: would move $whose ${items[*]} into $dest/"
    return 0
  fi
  mkdir "$dest" || cj_fail "cannot create '$dest' for $whose files"
  for f in "${items[@]}"; do
    mv -n "$output/$f" "$dest/" || cj_fail "cannot move '$output/$f' into '$dest/'"
  done
  cj_log "moved $whose ${items[*]} into $dest/ (nothing deleted); the run starts over in $output"
}

# cj_requeue_unfinished OUTPUT STEPS CHECKPOINTS [FRESH]: after a clean stop (exit 3) asked for by the batch
# shell's SIGTERM (the time-limit warning of --signal=B:TERM@LEAD, preemption), requeues the job when its latest
# checkpoint is short of STEPS; the restarted job resumes from it (cj_resume_overrides). With FRESH=1 (a stop
# before the launch) a job without a checkpoint is requeued, too: it starts over. REQUEUE=0 turns it off, as does
# a time limit too short for the warning's lead (cj_check_time_limit), and a job no longer RUNNING (cancelled).
cj_requeue_unfinished() {
  local output=$1 steps=$2 ck=$3 fresh=${4:-0} reached what
  [[ -n ${SLURM_JOB_ID:-} && ${REQUEUE:-1} != 0 ]] || return 0
  if reached=$(cj_latest_step "$ck"); then
    what="stopped at step $reached of $steps"
  elif [[ $fresh == 1 ]]; then
    reached=0
    what="stopped before the first step"
  else
    cj_log "stopped before the first checkpoint; not requeueing (nothing to resume from)"
    return 0
  fi
  if [[ $reached -ge $steps ]]; then
    cj_log "$what: finished, not requeueing"
    return 0
  fi
  if [[ ${CJ_NO_REQUEUE:-0} == 1 ]]; then
    cj_log "$what: not requeueing (the time limit is too short; above); resubmit" \
      "with the same OUTPUT and a longer --time to continue"
    return 0
  fi
  # A cancelled job (a plain scancel signals every process of the job, the batch shell too) stays cancelled.
  local state
  state=$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p') || state=""
  if [[ -n $state && $state != RUNNING ]]; then
    cj_log "$what: not requeueing (the job is $state, not RUNNING: cancelled, or requeued by Slurm)"
    return 0
  fi
  if [[ -f $ck/latest ]]; then
    cj_log "$what: requeueing job $SLURM_JOB_ID to continue from $ck/$(cat "$ck/latest")"
  else
    cj_log "$what: requeueing job $SLURM_JOB_ID to start over"
  fi
  scontrol requeue "$SLURM_JOB_ID" || {
    cj_log "warning: scontrol requeue $SLURM_JOB_ID failed; resubmit with the same OUTPUT to continue"
    return 0
  }
}

# cj_record DEST SOURCE [IGNORE]: installs SOURCE's content as the record DEST (deck.resolved.yaml, combination.txt)
# unless DEST holds something else (another job's, or an earlier attempt's of this one): then as DEST-TAG.EXT,
# TAG the job id (local-PID outside Slurm), with a note. An identical DEST is left as it is, and so is one that
# differs only in the key IGNORE (section.key): an attempt resuming its own run adds checkpoint.resume.
cj_record() {
  local dest=$1 src=$2 ignore=${3:-} alt
  if [[ ! -e $dest ]] && (set -C && cat "$src" >"$dest") 2>/dev/null; then
    return 0 # created here (noclobber: exclusively, so a job started at the same time cannot replace it)
  fi
  [[ -e $dest ]] || cj_fail "cannot write '$dest'"
  cmp -s "$src" "$dest" && return 0
  if [[ -n $ignore ]] && cmp -s <(cj_deck_without "$src" "$ignore") <(cj_deck_without "$dest" "$ignore"); then
    return 0
  fi
  alt="${dest%.*}-${SLURM_JOB_ID:-local-$$}.${dest##*.}"
  cp "$src" "$alt" || cj_fail "cannot write '$alt'"
  cj_log "note: $dest (an earlier job's or attempt's) differs from this one's; kept, this one's is $alt"
}

# cj_deck_without RESOLVED_YAML SECTION.KEY: the resolved deck without that key's line.
cj_deck_without() { cj_deck_key "$1" "${2%%.*}" "${2#*.}" without; }

# More records for cj_launch, as pairs NAME FILE (sweep.sbatch: combination.txt), and temporary files to remove
# at the end (cj_exit).
CJ_RECORDS=()
CJ_TEMP_FILES=()

# The end of a job: temporary files and the launch stamp go; the log's tee (cj_launch) gets the last lines
# before the batch shell ends (Slurm ends the job's remaining processes with it).
cj_exit() {
  rm -f "${CJ_RESOLVED:-}" "${CJ_STAMP:-}" "${CJ_TEMP_FILES[@]}"
  if [[ -n ${CJ_TEE_PID:-} ]]; then
    exec >/dev/null 2>&1 # tee ends at the end of its input: when the last writer (this shell) lets go
    local tenths
    for ((tenths = 0; tenths < 50; tenths++)); do
      kill -0 "$CJ_TEE_PID" 2>/dev/null || break
      sleep 0.1
    done
  fi
}

# cj_stopped_before_launch COMMAND OUTPUT: the batch shell got SIGTERM before the run was launched: nothing runs
# and nothing is recorded; exit 3 as for a clean stop, and a run is requeued as after one (one without a
# checkpoint yet, too: it starts over).
cj_stopped_before_launch() {
  cj_log "stopped by SIGTERM before the launch: '$1' was not started (exit 3)"
  [[ $1 == run ]] && cj_requeue_unfinished "$2" "$(cj_deck_value "$CJ_RESOLVED" run steps)" "$CJ_CK" 1
  exit 3
}

# cj_check_command COMMAND: run, simulate or validate, else refused (cj_launch; sweep.sbatch --check, so a sweep
# with another COMMAND is refused before it is submitted, not by every task once it runs).
cj_check_command() {
  case $1 in
    run | simulate | validate) ;;
    *) cj_fail "COMMAND='$1': expected run, simulate or validate" ;;
  esac
}

# cj_check_requeue: REQUEUE is 1 (the default: requeue after a clean stop with steps left) or 0 (do not); any
# other value (no, false) was read as 1.
cj_check_requeue() {
  [[ ${REQUEUE:-1} =~ ^[01]$ ]] ||
    cj_fail "REQUEUE='$REQUEUE': expected 1 (requeue after a clean stop with steps left, the default) or 0 (do not)"
}

# cj_launch COMMAND DECK OUTPUT [override or @fragment ...]
# Validates the deck with the fragments (the `@FILE` entries, passed first, in order) and the overrides, refuses a
# `run` whose OUTPUT already holds its finished run, records what runs (see the header), then launches
#   run:              srun --mpi=pmix over all tasks of the job (one rank per pipeline stage; outside Slurm
#                     `mpirun -np P`); the program picks its GPU from SLURM_LOCALID itself.
#   simulate|validate: one task.
# and checks that the run wrote a new OUTPUT/summary.json (srun can exit 0 when nothing ran). CJ_RECORDS may
# name more records (installed with cj_record).
cj_launch() {
  local command=$1 deck=$2 output=$3
  shift 3
  local overrides=() fragments=() o dry=${DRY_RUN:-0} pipeline ntasks cmd=()
  for o in "$@"; do
    if [[ $o == @* ]]; then fragments+=("$o"); else overrides+=("$o"); fi
  done
  cj_check_command "$command"
  cj_check_requeue
  for o in "${overrides[@]}"; do
    [[ $o == run.output=* ]] && cj_log "note: '$o' is replaced by run.output=$output"
  done
  overrides+=("run.output=$output")
  trap cj_exit EXIT
  cj_launch_check_deck
  [[ $dry == 1 ]] || cj_launch_open_output
  if [[ $command == run ]]; then
    cj_check_time_limit
    cj_resume_overrides "$output" "${overrides[@]}"
    overrides=("${CJ_RUN_OVERRIDES[@]}")
  fi
  cj_launch_check_again
  cj_launch_command

  # A command in the foreground (all but a run under Slurm) gets the default SIGTERM back: the batch shell
  # would run a trap only after it ended.
  [[ $command == run && -n ${SLURM_JOB_ID:-} ]] || trap - TERM
  [[ $CJ_GOT_TERM == 1 && $dry != 1 ]] && cj_stopped_before_launch "$command" "$output"
  [[ $dry == 1 ]] || CJ_LAUNCHING=1 # from here on, a SIGTERM is passed on to the run (cj_on_term)
  cj_log "running: $(cj_quote "${cmd[@]}")"
  if [[ $dry == 1 ]]; then
    cj_log "DRY_RUN=1: not launched; nothing written to $output"
    return 0
  fi
  cj_launch_record

  # A requeued job's folder holds the previous attempt's summary.json: only one written by this launch counts.
  # The stamp lives in the output folder, so both mtimes come from the same file system's clock.
  CJ_STAMP="$output/.conductor-launch-stamp"
  : >"$CJ_STAMP" || cj_fail "cannot write to the output folder '$output'"
  local rc=0
  if [[ -n ${SLURM_JOB_ID:-} && $command == run ]]; then
    cj_run_forwarding_term "${cmd[@]}"
    rc=$CJ_RC
  else
    "${cmd[@]}" || rc=$?
  fi
  cj_launch_finish "$rc"
}

# The parts of cj_launch, in its order. They read and set cj_launch's locals (command, deck, output, fragments,
# overrides, dry, pipeline, ntasks, cmd: bash's dynamic scope), so each step is named without passing arrays.

# The deck on its own, and a run's task count against its pipeline, before OUTPUT is created or its job.log
# written: a job refused for them leaves no folder behind (the message is in the job's own output).
cj_launch_check_deck() {
  CJ_RESOLVED=$(mktemp "${TMPDIR:-/tmp}/conductor-deck.XXXXXX") || cj_fail "cannot create a temporary file"
  # By the command's own rules (simulate's differ from run's: several helpers, replicas), not yet its folder's.
  local rules=run
  [[ $command == simulate ]] && rules=simulate
  "$CONDUCTOR_BINARY" validate "$deck" "${fragments[@]}" "${overrides[@]}" --as "$rules" >"$CJ_RESOLVED" ||
    cj_fail "the deck '$deck' with the fragments and overrides above has problems (listed above)"
  CJ_OVERWRITE=$(cj_deck_value "$CJ_RESOLVED" run overwrite)
  pipeline=$(cj_deck_value "$CJ_RESOLVED" parallel pipeline)
  [[ $pipeline =~ ^[0-9]+$ ]] || cj_fail "cannot read parallel.pipeline from the resolved deck"
  ntasks=${SLURM_NTASKS:-${SLURM_NPROCS:-}}
  if [[ $command == run && -n ${SLURM_JOB_ID:-} ]]; then
    [[ -n $ntasks ]] || cj_fail "SLURM_NTASKS is not set: submit with --ntasks or --ntasks-per-node"
    [[ $ntasks -eq $pipeline ]] ||
      cj_fail "the deck has parallel.pipeline=$pipeline but the job has $ntasks tasks; submit with" \
        "--ntasks=$pipeline (or N nodes x G tasks per node = $pipeline), or override parallel.pipeline=$ntasks"
  fi
}

# OUTPUT, and under Slurm the job's log in it, appended to by every attempt of a requeued job. tee ignores
# SIGTERM: a plain scancel signals every process of the job, and the run's last lines (its stop) and the batch
# shell's would be lost (and the shell die of SIGPIPE).
cj_launch_open_output() {
  mkdir -p "$output" || cj_fail "cannot create the output folder '$output'"
  [[ -n ${SLURM_JOB_ID:-} ]] || return 0
  exec > >(
    trap '' TERM INT HUP
    exec tee -a "$output/job.log"
  ) 2>&1
  CJ_TEE_PID=$!
}

# Deck problems are reported once, here, instead of once per rank after a queue wait; so is a run folder the
# command would refuse (another run's results), before anything is recorded in it. The deck is checked again with
# the resume overrides; a validate job's deck was checked in full at the start. Then a run resuming its own
# folder: conductor refuses to resume a finished run only once every rank started; said here, once.
cj_launch_check_again() {
  if [[ $command != validate ]]; then
    local check=("$CONDUCTOR_BINARY" validate "$deck" "${fragments[@]}" "${overrides[@]}" --output-for "$command")
    cj_log "checking: $(cj_quote "${check[@]}")"
    "${check[@]}" >"$CJ_RESOLVED" ||
      cj_fail "the deck '$deck' with the fragments and overrides above has problems, or its output folder is" \
        "refused (listed above)"
  fi
  [[ $command == run && -n $CJ_RESUME_OWN ]] || return 0
  local steps reached
  steps=$(cj_deck_value "$CJ_RESOLVED" run steps)
  reached=$(cj_latest_step "$CJ_RESUME_OWN") || reached=0
  [[ $steps =~ ^[0-9]+$ && $reached -ge $steps ]] || return 0
  if [[ ${SLURM_RESTART_COUNT:-0} -gt 0 ]]; then
    cj_log "the run in $output is complete (checkpoint step $reached, run.steps = $steps): an earlier attempt" \
      "of this job finished it; nothing to do"
    exit 0
  fi
  cj_fail "the run in '$output' is already complete ($CJ_RESUME_OWN/latest is step $reached, run.steps =" \
    "$steps); nothing was started, and its records stay as they are. Raise run.steps to continue it, or choose" \
    "another OUTPUT"
}

# The command line that runs it (cmd).
cj_launch_command() {
  local launch=()
  if [[ $command == run ]]; then
    if [[ -n ${SLURM_JOB_ID:-} ]]; then
      # --kill-on-bad-exit: one failing rank ends the step instead of leaving the others blocked in MPI.
      # No --gpu-bind: every task sees all GPUs of its node and conductor picks SLURM_LOCALID's.
      launch=(srun --mpi="${SRUN_MPI:-pmix}" --ntasks="$ntasks" --kill-on-bad-exit=1)
    else
      cj_split launch "${MPIEXEC:-mpirun}" # words of MPIEXEC ("mpirun --oversubscribe"), not globbed
      launch+=(-np "$pipeline")
    fi
  elif [[ -n ${SLURM_JOB_ID:-} ]]; then
    launch=(srun --ntasks=1 --nodes=1)
  fi
  cmd=("${launch[@]}" "$CONDUCTOR_BINARY" "$command" "$deck" "${fragments[@]}" "${overrides[@]}")
  # A run goes through scripts/conductor-launch: a SIGTERM (twice, too) then reaches every rank once as a
  # graceful stop, where mpirun and srun would kill the ranks.
  [[ $command == run ]] && cmd=("$CONDUCTOR_ROOT/scripts/conductor-launch" "${cmd[@]}")
  return 0
}

# What runs, recorded in OUTPUT: a block of job.txt per launch, the resolved deck and CJ_RECORDS.
cj_launch_record() {
  # The processes launched: a run's tasks (srun: the job's; mpirun: the pipeline's), one for simulate and validate.
  local tasks=1
  [[ $command == run ]] && tasks=${ntasks:-$pipeline}
  [[ $command == run && -z ${SLURM_JOB_ID:-} ]] && tasks=$pipeline
  {
    [[ -s $output/job.txt ]] && echo
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "job: ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ (array task $SLURM_ARRAY_TASK_ID)}"
    [[ ${SLURM_RESTART_COUNT:-0} -gt 0 ]] && echo "restart: $SLURM_RESTART_COUNT"
    echo "nodes: ${SLURM_JOB_NODELIST:-$(hostname -s)}"
    echo "tasks: $tasks"
    echo "deck: $deck"
    echo "command: $(cj_quote "${cmd[@]}")"
  } >>"$output/job.txt" || cj_fail "cannot write '$output/job.txt'"
  cj_record "$output/deck.resolved.yaml" "$CJ_RESOLVED" ${CJ_RESUME_OWN:+checkpoint.resume}
  local i
  for ((i = 0; i + 1 < ${#CJ_RECORDS[@]}; i += 2)); do
    cj_record "$output/${CJ_RECORDS[i]}" "${CJ_RECORDS[i + 1]}"
  done
}

# cj_launch_finish RC: the job's end after the command exited with RC.
cj_launch_finish() {
  local rc=$1 fresh=0
  [[ -s $output/summary.json && ! $output/summary.json -ot $CJ_STAMP ]] && fresh=1
  rm -f "$CJ_STAMP"
  if [[ $command == run && $rc -eq 3 ]]; then
    # A clean stop (SIGTERM/SIGINT): trace, summary and checkpoint are written; the run did not finish.
    cj_log "'run' stopped cleanly before its last step (exit 3); results so far in $output"
    if [[ $CJ_GOT_TERM == 1 ]]; then
      cj_requeue_unfinished "$output" "$(cj_deck_value "$CJ_RESOLVED" run steps)" "$CJ_CK"
    fi
    exit 3
  fi
  if [[ $rc -ne 0 ]]; then
    echo "conductor-job: error: '$command' failed with exit code $rc$(cj_exit_reason "$rc")" >&2
    exit "$rc"
  fi
  if [[ $command != validate && $fresh != 1 ]]; then
    echo "conductor-job: error: '$command' exited 0 but wrote no new $output/summary.json; nothing ran" \
      "(a launcher that failed before starting the ranks, e.g. srun's MPI plugin)" >&2
    exit 1
  fi
  cj_log "done: $output"
}

# cj_one_argument WHAT "$@": the one argument a batch script takes besides --help (train: the deck, analyze: the
# folder); sets CJ_ARG to it, or to "" when there is none. A second argument, an empty one or another option is
# refused (sbatch passes the words after the script to it: they were silently ignored).
cj_one_argument() {
  local what=$1
  shift
  CJ_ARG=""
  (($# <= 1)) || cj_fail "unexpected arguments $(cj_quote "$@"): expected at most one, $what (every other setting" \
    "comes from the environment: --help)"
  (($# == 1)) || return 0
  [[ -n $1 ]] || cj_fail "the argument is empty: expected $what"
  [[ $1 != -* ]] || cj_fail "unknown option '$1': expected --help or $what"
  # shellcheck disable=SC2034 # read by the scripts that source this file
  CJ_ARG=$1
}

# cj_help FILE: prints the usage comment at the top of a script (its first comment block) and exits.
cj_help() {
  awk 'NR > 1 && /^#/ && !/^#SBATCH/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$1"
  exit 0
}
