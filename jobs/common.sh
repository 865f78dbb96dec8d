# Shared by the batch scripts in jobs/ (sourced, never run on its own). Everything here prints what it does and
# fails loudly: a job that silently did nothing costs a queue wait to discover.
#
# Conventions used by every script:
#   CONDUCTOR_ROOT     the source tree (default: the folder above the submitted script)
#   CONDUCTOR_BINARY   the conductor executable (default: $CONDUCTOR_ROOT/build/conductor; in an installed tree,
#                      where CONDUCTOR_ROOT is PREFIX/share/conductor, PREFIX/bin/conductor)
#   OVERRIDES          space-separated deck overrides `key.path=value`; an entry `@FILE` is a deck fragment (a
#                      YAML file such as inputs/noise/jitter10.yaml) that conductor merges onto the deck; the
#                      fragments go first, in order, the overrides after them (e.g.
#                      OVERRIDES="@inputs/noise/jitter10.yaml run.steps=5"). Values cannot contain spaces: write
#                      lists in flow form without spaces, `[1.0,2.0]`.
#   DRY_RUN=1          print the launch command instead of running it (no Slurm needed)
#   SRUN_MPI           srun's --mpi plugin (default pmix: Debian's Open MPI 4.1 starts under pmix, not pmi2)
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

# cj_resolve PATH: an absolute path; a relative one is looked up in the working folder (the submit folder
# under Slurm), then under CONDUCTOR_ROOT. Prints the candidate even when it does not exist (callers check).
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

# cj_expand_overrides "STRING": sets the array CJ_OVERRIDES from a space-separated OVERRIDES string; an `@FILE`
# entry becomes `@/absolute/FILE` (conductor reads the fragment itself; cj_launch puts fragments first).
cj_expand_overrides() {
  CJ_OVERRIDES=()
  local entry file entries
  read -ra entries <<<"$1" # no glob expansion: `[1,2]` is a value, not a pattern
  for entry in "${entries[@]}"; do
    if [[ $entry == @* ]]; then
      file=$(cj_resolve "${entry#@}")
      [[ -f $file ]] || cj_fail "deck fragment '${entry#@}' not found (looked in $PWD and $CONDUCTOR_ROOT)"
      CJ_OVERRIDES+=("@$file")
    elif [[ $entry == *=* ]]; then
      CJ_OVERRIDES+=("$entry")
    else
      cj_fail "override '$entry' is neither key.path=value nor @FILE"
    fi
  done
}

# cj_deck_value RESOLVED_YAML SECTION KEY: the value of `section.key` in the output of `conductor validate`.
cj_deck_value() {
  awk -v s="$2" -v k="$3" '
    /^[^ ]/ { sec = $0; sub(/:.*/, "", sec) }
    sec == s && $0 ~ "^  " k ":" { v = $0; sub(/^[^:]*:[[:space:]]*/, "", v); print v; exit }
  ' "$1"
}

# cj_resume_overrides OUTPUT [override ...]: sets CJ_RESUME to the overrides that make a `run` requeue-safe:
# checkpoints in OUTPUT/checkpoints (unless an override names checkpoint.path), and, when that folder holds a
# `latest` step (a requeued or restarted job: SLURM_RESTART_COUNT > 0, or a resubmission into the same OUTPUT),
# checkpoint.resume from it. The run then continues OUTPUT/trace.h5 instead of replacing it.
cj_resume_overrides() {
  local output=$1 o
  shift
  local ck
  ck=$(cj_checkpoint_root "$output" "$@")
  CJ_RESUME=()
  [[ $ck == "$output/checkpoints" ]] && CJ_RESUME+=("checkpoint.path=$ck")
  if [[ -f $ck/latest ]]; then
    for o in "$@"; do
      [[ $o == checkpoint.resume=* ]] && return 0
    done
    cj_log "restart ${SLURM_RESTART_COUNT:-0}: resuming from $ck ($(cat "$ck/latest"))"
    CJ_RESUME+=("checkpoint.resume=$ck")
  elif [[ ${SLURM_RESTART_COUNT:-0} -gt 0 ]]; then
    cj_log "restart $SLURM_RESTART_COUNT: no checkpoint in $ck yet; starting from step 0"
  fi
}

# cj_run_forwarding_term COMMAND...: runs the command in the background and forwards every SIGTERM of the batch
# shell to it (#SBATCH --signal=B:TERM@LEAD signals only the batch shell; bash would run a trap only after a
# foreground command ends). The command is scripts/conductor-launch, which turns the first SIGTERM into one
# graceful stop of every rank and swallows repeats. Sets CJ_RC to the command's exit status and CJ_GOT_TERM=1
# when the batch shell was signalled.
cj_run_forwarding_term() {
  CJ_GOT_TERM=0
  "$@" &
  local pid=$!
  trap 'CJ_GOT_TERM=1; cj_log "SIGTERM: asking the run to checkpoint and stop"; kill -TERM '"$pid"' 2>/dev/null' TERM
  while kill -0 "$pid" 2>/dev/null; do
    wait "$pid" || true # returns early when the trap runs (set -e must not end the script there)
  done
  wait "$pid" && CJ_RC=0 || CJ_RC=$? # the finished command's status (bash keeps it)
  trap - TERM
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

# cj_requeue_unfinished OUTPUT STEPS CHECKPOINTS: after a clean stop (exit 3) asked for by the batch shell's
# SIGTERM (the time-limit warning of --signal=B:TERM@LEAD, preemption), requeues the job when its latest
# checkpoint is short of STEPS; the restarted job resumes from it (cj_resume_overrides). REQUEUE=0 turns it
# off.
cj_requeue_unfinished() {
  local output=$1 steps=$2 ck=$3 latest done
  [[ -n ${SLURM_JOB_ID:-} && ${REQUEUE:-1} != 0 ]] || return 0
  latest=$(cat "$ck/latest" 2>/dev/null) || {
    cj_log "stopped before the first checkpoint; not requeueing (nothing to resume from)"
    return 0
  }
  done=${latest#step-}
  done=$((10#$done))
  if [[ $done -ge $steps ]]; then
    cj_log "stopped at step $done of $steps: finished, not requeueing"
    return 0
  fi
  cj_log "stopped at step $done of $steps: requeueing job $SLURM_JOB_ID to continue from $ck/$latest"
  scontrol requeue "$SLURM_JOB_ID" || {
    cj_log "warning: scontrol requeue $SLURM_JOB_ID failed; resubmit with the same OUTPUT to continue"
    return 0
  }
}

# cj_launch COMMAND DECK OUTPUT [override or @fragment ...]
# Validates the deck with the fragments (the `@FILE` entries, passed first, in order) and the overrides, records
# what runs in OUTPUT/job.txt, then launches
#   run:              srun --mpi=pmix over all tasks of the job (one rank per pipeline stage; outside Slurm
#                     `mpirun -np P`); the program picks its GPU from SLURM_LOCALID itself.
#   simulate|validate: one task.
# and checks that the run wrote a new OUTPUT/summary.json (srun can exit 0 when nothing ran).
cj_launch() {
  local command=$1 deck=$2 output=$3
  shift 3
  local overrides=() fragments=() o
  for o in "$@"; do
    if [[ $o == @* ]]; then fragments+=("$o"); else overrides+=("$o"); fi
  done
  case $command in
    run | simulate | validate) ;;
    *) cj_fail "COMMAND='$command': expected run, simulate or validate" ;;
  esac
  for o in "${overrides[@]}"; do
    [[ $o == run.output=* ]] && cj_log "note: '$o' is replaced by run.output=$output"
  done
  overrides+=("run.output=$output")
  mkdir -p "$output" || cj_fail "cannot create the output folder '$output'"
  if [[ -n ${SLURM_JOB_ID:-} && ${DRY_RUN:-0} != 1 ]]; then
    # The job's log also lands in the run folder, appended to by every attempt of a requeued job.
    exec > >(tee -a "$output/job.log") 2>&1
  fi
  if [[ $command == run ]]; then
    cj_resume_overrides "$output" "${overrides[@]}"
    overrides+=("${CJ_RESUME[@]}")
  fi

  # Deck problems are reported once, here, instead of once per rank after a queue wait; so is a run folder the
  # command would refuse (another run's results), before this job's records replace the ones there.
  local check=("$CONDUCTOR_BINARY" validate "$deck" "${fragments[@]}" "${overrides[@]}")
  [[ $command == validate ]] || check+=(--output-for "$command")
  cj_log "checking: $(cj_quote "${check[@]}")"
  local resolved="$output/.deck.resolved.yaml.$$"
  if ! "${check[@]}" >"$resolved"; then
    rm -f "$resolved"
    cj_fail "the deck '$deck' with the fragments and overrides above has problems, or its output folder is" \
      "refused (listed above)"
  fi
  mv -f "$resolved" "$output/deck.resolved.yaml" || cj_fail "cannot write '$output/deck.resolved.yaml'"
  local pipeline
  pipeline=$(cj_deck_value "$output/deck.resolved.yaml" parallel pipeline)
  [[ $pipeline =~ ^[0-9]+$ ]] || cj_fail "cannot read parallel.pipeline from the resolved deck"

  local launch=()
  if [[ $command == run ]]; then
    if [[ -n ${SLURM_JOB_ID:-} ]]; then
      local ntasks=${SLURM_NTASKS:-${SLURM_NPROCS:-}}
      [[ -n $ntasks ]] || cj_fail "SLURM_NTASKS is not set: submit with --ntasks or --ntasks-per-node"
      [[ $ntasks -eq $pipeline ]] ||
        cj_fail "the deck has parallel.pipeline=$pipeline but the job has $ntasks tasks; submit with" \
          "--ntasks=$pipeline (or N nodes x G tasks per node = $pipeline), or override parallel.pipeline=$ntasks"
      # --kill-on-bad-exit: one failing rank ends the step instead of leaving the others blocked in MPI.
      # No --gpu-bind: every task sees all GPUs of its node and conductor picks SLURM_LOCALID's.
      launch=(srun --mpi="${SRUN_MPI:-pmix}" --ntasks="$ntasks" --kill-on-bad-exit=1)
    else
      launch=(${MPIEXEC:-mpirun} -np "$pipeline")
    fi
  elif [[ -n ${SLURM_JOB_ID:-} ]]; then
    launch=(srun --ntasks=1 --nodes=1)
  fi
  local cmd=("${launch[@]}" "$CONDUCTOR_BINARY" "$command" "$deck" "${fragments[@]}" "${overrides[@]}")
  # A run goes through scripts/conductor-launch: a SIGTERM (twice, too) then reaches every rank once as a
  # graceful stop, where mpirun and srun would kill the ranks.
  [[ $command == run ]] && cmd=("$CONDUCTOR_ROOT/scripts/conductor-launch" "${cmd[@]}")

  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "job: ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ (array task $SLURM_ARRAY_TASK_ID)}"
    echo "nodes: ${SLURM_JOB_NODELIST:-$(hostname -s)}"
    echo "tasks: ${SLURM_NTASKS:-1}"
    echo "deck: $deck"
    echo "command: $(cj_quote "${cmd[@]}")"
  } >"$output/job.txt"
  cj_log "running: $(cj_quote "${cmd[@]}")"
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    cj_log "DRY_RUN=1: not launched"
    return 0
  fi
  # A requeued job's folder holds the previous attempt's summary.json: only one written by this launch counts.
  # The stamp lives in the output folder, so both mtimes come from the same file system's clock.
  local stamp="$output/.conductor-launch-stamp"
  : >"$stamp" || cj_fail "cannot write to the output folder '$output'"
  local rc=0
  if [[ -n ${SLURM_JOB_ID:-} && $command == run ]]; then
    cj_run_forwarding_term "${cmd[@]}"
    rc=$CJ_RC
  else
    "${cmd[@]}" || rc=$?
  fi
  local fresh=0
  [[ -s $output/summary.json && ! $output/summary.json -ot $stamp ]] && fresh=1
  rm -f "$stamp"
  if [[ $command == run && $rc -eq 3 ]]; then
    # A clean stop (SIGTERM/SIGINT): trace, summary and checkpoint are written; the run did not finish.
    cj_log "'run' stopped cleanly before its last step (exit 3); results so far in $output"
    if [[ ${CJ_GOT_TERM:-0} == 1 ]]; then
      local steps
      steps=$(cj_deck_value "$output/deck.resolved.yaml" run steps)
      cj_requeue_unfinished "$output" "$steps" "$(cj_checkpoint_root "$output" "${overrides[@]}")"
    fi
    exit 3
  fi
  if [[ $rc -ne 0 ]]; then
    echo "conductor-job: error: '$command' failed with exit code $rc" >&2
    exit "$rc"
  fi
  if [[ $command != validate && $fresh != 1 ]]; then
    echo "conductor-job: error: '$command' exited 0 but wrote no new $output/summary.json; nothing ran" \
      "(a launcher that failed before starting the ranks, e.g. srun's MPI plugin)" >&2
    exit 1
  fi
  cj_log "done: $output"
}

# cj_help FILE: prints the usage comment at the top of a script (its first comment block) and exits.
cj_help() {
  awk 'NR > 1 && /^#/ && !/^#SBATCH/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$1"
  exit 0
}
