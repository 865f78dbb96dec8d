#!/bin/bash
# Submits jobs/sweep.sbatch as a job array sized to the sweep (decks x schedules x executions x noises x repeats), then
# jobs/analyze.sbatch over the sweep folder with --dependency=afterok on the whole array, so the report is
# written once every task succeeded. Run it from the folder the outputs should go under (usually the repo root).
#
#   jobs/submit-sweep.sh [extra sbatch options for the array, e.g. --ntasks=8 -p gpu]
#   (with COMMAND=run, the default, every combination's parallel.pipeline must equal the array's task count:
#   --ntasks/-n of the options, else sweep.sbatch's #SBATCH --ntasks=4; checked, with the decks and their values
#   named, before anything is submitted. With COMMAND=simulate each array task asks for one task, --ntasks=1,
#   unless the options say otherwise)
#   SWEEP_SCHEDULES="1f1b zb-h1 zb-2p" SWEEP_NOISES="none straggler" COMMAND=simulate jobs/submit-sweep.sh
#   BASELINE=quickstart-1f1b-strict-none jobs/submit-sweep.sh      (compare.py speedups against that task)
#
# Environment: every SWEEP_* / OVERRIDES / COMMAND / CONDUCTOR_* variable of sweep.sbatch (exported to the
# jobs), SWEEP_DIR (default: a new folder sweeps/sweep-<UTC time>-<random>; a relative one is under the working
# folder; a folder that already holds a sweep, its manifest.tsv, is refused), BASELINE for the analysis (a task's
# label, or a configuration's: a label less its repeat suffix -rK; checked before anything is submitted),
# ANALYZE_OPTIONS (extra sbatch options for the analysis job, whitespace-separated), DRY_RUN=1 (check everything
# and print what would be submitted: no folder, no job). Prints the two job ids;
# SWEEP_DIR/manifest.tsv lists task id -> combination, SWEEP_DIR/sweep.jobid and analyze.jobid the jobs. The
# analysis job gets the folder as its argument (any character in it is safe).
set -euo pipefail
CONDUCTOR_ROOT=${CONDUCTOR_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export CONDUCTOR_ROOT
source "$CONDUCTOR_ROOT/jobs/common.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"
  exit 0
}
[[ ${DRY_RUN:-0} == 1 ]] || command -v sbatch >/dev/null || cj_fail "sbatch not found: run this on a Slurm login node"

# check_options OPTION...: every argument is an sbatch option or the value of the one before it (`-p gpu`): sbatch
# takes the first other word as the batch script to submit, instead of sweep.sbatch. An option without `=` is
# taken to want the next word, unless it is one of sbatch's flags that take none.
check_options() {
  local a wants_value=0 flags
  flags="--contiguous --exclusive --get-user-env --hold --ignore-pbs --nice --no-kill --no-requeue --overcommit"
  flags=" $flags --oversubscribe --parsable --propagate --quiet --reboot --requeue --spread-job --test-only"
  flags=" $flags --use-min-nodes --verbose --wait -H -O -Q -W -k -s -v "
  for a in "$@"; do
    if [[ $wants_value == 1 ]]; then
      wants_value=0
      continue
    fi
    case $a in
      --*=* | -[!-]?*) ;; # the value attached: --ntasks=8, -n8, -pgpu
      -*) [[ $flags == *" $a "* ]] || wants_value=1 ;;
      *)
        cj_fail "unexpected argument '$a': the arguments are sbatch options for the array (e.g. --ntasks=8 -p gpu)," \
          "and sbatch would take '$a' as the script to submit instead of sweep.sbatch; the sweep's settings come" \
          "from the environment (--help); nothing was submitted"
        ;;
    esac
  done
}
check_options "$@"

# array_ntasks OPTION...: sets ntasks to the task count of every array task, as sbatch takes it: the last
# --ntasks/-n of sweep.sbatch's #SBATCH lines and then of these options (an --ntasks of the script stays the total
# under --nodes or --ntasks-per-node), and ntasks_from to where it comes from; ntasks is empty when unknown.
array_ntasks() {
  local default i a opts=("$@")
  ntasks="" ntasks_from=""
  default=$(sed -n 's/^#SBATCH --ntasks=\([^ ]*\).*/\1/p' "$CONDUCTOR_ROOT/jobs/sweep.sbatch" | tail -n 1)
  [[ -n $default ]] && ntasks=$default ntasks_from="#SBATCH --ntasks=$default of jobs/sweep.sbatch"
  for ((i = 0; i < ${#opts[@]}; i++)); do
    a=${opts[i]}
    case $a in
      --ntasks=*) ntasks=${a#*=} ;;
      --ntasks | -n)
        i=$((i + 1))
        ntasks=${opts[i]:-}
        a+=" $ntasks"
        ;;
      -n?*) ntasks=${a#-n} ;;
      *) continue ;;
    esac
    ntasks_from="the option $a"
  done
  [[ $ntasks =~ ^[1-9][0-9]*$ ]] || ntasks=""
}

n=$(bash "$CONDUCTOR_ROOT/jobs/sweep.sbatch" --count)
[[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || cj_fail "cannot size the sweep (sweep.sbatch --count said '$n')"
# Every combination's deck, preset and keys, and a run's pipeline against the array's task count, before a folder
# is made or a job waits in the queue.
array_ntasks "$@"
[[ ${COMMAND:-run} == run ]] || ntasks=""
CJ_ARRAY_NTASKS=$ntasks CJ_ARRAY_NTASKS_FROM=$ntasks_from bash "$CONDUCTOR_ROOT/jobs/sweep.sbatch" --check ||
  cj_fail "nothing was submitted (refused above)"
# BASELINE names a task's label, or a configuration's (a label less its repeat suffix -rK), as analyze.sbatch
# names the runs: a mistyped one is refused now, not by the analysis once the sweep has run.
manifest=$(bash "$CONDUCTOR_ROOT/jobs/sweep.sbatch" --list) || cj_fail "sweep.sbatch --list failed; nothing was submitted"
if [[ -n ${BASELINE:-} ]]; then
  labels=$(tail -n +2 <<<"$manifest" | cut -f6)
  configurations=$(sed -E 's/-r[0-9]+$//' <<<"$labels" | awk '!seen[$0]++')
  grep -qxF -- "$BASELINE" <<<"$labels"$'\n'"$configurations" ||
    cj_fail "BASELINE='$BASELINE' is not a label of the sweep's tasks nor a configuration: expected one of" \
      "$(head -n 10 <<<"$configurations" | paste -sd, - | sed 's/,/, /g')$([[ $(wc -l <<<"$configurations") -gt 10 ]] &&
        echo ", ... (sweep.sbatch --list shows every label)"); nothing was submitted"
fi
# DRY_RUN=1, as the other scripts take it: every check above, then the manifest and the two submissions it would
# make, and nothing written or submitted (it passed DRY_RUN on to real jobs whose tasks each did nothing).
if [[ ${DRY_RUN:-0} == 1 ]]; then
  cj_log "DRY_RUN=1: the sweep of $n tasks checked; nothing was written or submitted. It would submit:"
  dry_size=()
  [[ ${COMMAND:-run} != run ]] && dry_size=(--ntasks=1)
  echo "  $(cj_quote sbatch --parsable --array="0-$((n - 1))" "${dry_size[@]}" "$@" "$CONDUCTOR_ROOT/jobs/sweep.sbatch")"
  echo "  $(cj_quote sbatch --parsable --dependency=afterok:ARRAY_JOB_ID --kill-on-invalid-dep=yes \
    "$CONDUCTOR_ROOT/jobs/analyze.sbatch") SWEEP_DIR"
  column -t -s $'\t' <<<"$manifest" 2>/dev/null || echo "$manifest"
  exit 0
fi
# What this submission makes (the folders, the manifest, logs/) goes again on any way out before the array is
# queued: a failed submission leaves no empty sweep folder, nor a manifest that would refuse the retry.
made_dirs=() # folders created here, outermost first
made_manifest=0
submitted=0
undo() {
  [[ $submitted == 0 ]] || return 0
  [[ $made_manifest == 1 ]] && rm -f "$SWEEP_DIR/manifest.tsv"
  local i
  for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do rmdir "${made_dirs[i]}" 2>/dev/null || true; done
}
trap undo EXIT
# make_dir DIR: mkdir -p DIR, remembering the folders it creates.
make_dir() {
  local d=$1 missing=()
  while [[ ! -e $d && $d != / ]]; do
    missing=("$d" "${missing[@]}")
    d=$(dirname "$d")
  done
  mkdir -p "$1" || return 1
  made_dirs+=("${missing[@]}")
}
if [[ -n ${SWEEP_DIR:-} ]]; then
  [[ $SWEEP_DIR == /* ]] || SWEEP_DIR=$PWD/$SWEEP_DIR # under the folder the jobs are submitted from
  make_dir "$SWEEP_DIR" || cj_fail "cannot create SWEEP_DIR '$SWEEP_DIR'"
else
  # A new folder each time: two sweeps submitted in the same second do not share one.
  make_dir "$PWD/sweeps" || cj_fail "cannot create '$PWD/sweeps'"
  SWEEP_DIR=$(mktemp -d "$PWD/sweeps/sweep-$(date -u +%Y%m%d-%H%M%S)-XXXX") || cj_fail "cannot create a sweep folder"
  made_dirs+=("$SWEEP_DIR")
fi
export SWEEP_DIR
# The manifest is created exclusively (noclobber): a folder that holds another sweep, or one being submitted
# into it now, is refused before anything is submitted or replaced.
if [[ -e $SWEEP_DIR/manifest.tsv ]] || ! (set -C && : >"$SWEEP_DIR/manifest.tsv") 2>/dev/null; then
  cj_fail "SWEEP_DIR '$SWEEP_DIR' already holds a sweep (manifest.tsv$([[ -f $SWEEP_DIR/sweep.jobid ]] &&
    echo ", array job $(cat "$SWEEP_DIR/sweep.jobid")")); nothing was submitted. Choose another SWEEP_DIR, or" \
    "leave it unset for a new folder"
fi
made_manifest=1
make_dir "$SWEEP_DIR/logs" || cj_fail "cannot create '$SWEEP_DIR/logs'; nothing was submitted"
echo "$manifest" >"$SWEEP_DIR/manifest.tsv" || cj_fail "cannot write '$SWEEP_DIR/manifest.tsv'; nothing was submitted"
cj_log "sweep of $n tasks into $SWEEP_DIR (manifest.tsv):"
column -t -s $'\t' "$SWEEP_DIR/manifest.tsv" 2>/dev/null || cat "$SWEEP_DIR/manifest.tsv"

# A simulated task is one process: ask for one task per array element unless the options say otherwise.
size=()
[[ ${COMMAND:-run} != run ]] && size=(--ntasks=1)
sweep_cmd=(sbatch --parsable --array="0-$((n - 1))" --output="$SWEEP_DIR/logs/task-%a-%A.out" "${size[@]}" "$@"
  "$CONDUCTOR_ROOT/jobs/sweep.sbatch")
cj_log "submitting: $(cj_quote "${sweep_cmd[@]}")"
rc=0
sweep_id=$("${sweep_cmd[@]}") || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "conductor-job: error: sbatch refused the array (exit $rc; its message above): nothing was submitted, and" \
    "what this submission made in $SWEEP_DIR is removed; run it again once the cause is fixed" >&2
  exit 1
fi
submitted=1 # from here on, something may be queued: the folder stays
sweep_id=${sweep_id%%;*}
if [[ ! $sweep_id =~ ^[0-9]+$ ]]; then
  echo "conductor-job: error: sbatch exited 0 but printed no job id ('$sweep_id'): the array may be queued (squeue" \
    "--me); the analysis was not submitted; $SWEEP_DIR is kept" >&2
  exit 1
fi
echo "$sweep_id" >"$SWEEP_DIR/sweep.jobid"

analyze_options=()
cj_split analyze_options "${ANALYZE_OPTIONS:-}"
# The folder as the script's argument: in --export=...,RUN_DIR=FOLDER a comma in FOLDER would end the value.
analyze_cmd=(sbatch --parsable --dependency="afterok:$sweep_id" --kill-on-invalid-dep=yes
  --output="$SWEEP_DIR/logs/analyze-%j.out" "${analyze_options[@]}" "$CONDUCTOR_ROOT/jobs/analyze.sbatch"
  "$SWEEP_DIR")
cj_log "submitting: $(cj_quote "${analyze_cmd[@]}")"
analyze_id=$("${analyze_cmd[@]}") || rc=$?
analyze_id=${analyze_id%%;*}
if [[ $rc -ne 0 || ! $analyze_id =~ ^[0-9]+$ ]]; then
  echo "conductor-job: error: the array job $sweep_id is queued ($SWEEP_DIR/sweep.jobid), but the analysis job was" \
    "not submitted (sbatch $([[ $rc -ne 0 ]] && echo "exit $rc" || echo "printed no job id: '$analyze_id'"); above)." \
    "Submit it by hand: $(cj_quote "${analyze_cmd[@]}")" >&2
  echo "sweep=$sweep_id analyze=none dir=$SWEEP_DIR"
  exit 1
fi
echo "$analyze_id" >"$SWEEP_DIR/analyze.jobid"
cj_log "sweep job $sweep_id, analysis job $analyze_id (after the whole array succeeded)"
echo "sweep=$sweep_id analyze=$analyze_id dir=$SWEEP_DIR"
