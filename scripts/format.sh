#!/usr/bin/env bash
# Applies .clang-format to every tracked C++/CUDA source, or with --check lists the files that differ from it
# and exits 1. Usage: scripts/format.sh [--check]
set -euo pipefail
. "$(dirname "$0")/usage.sh"
script_help "$0" "$@"
[[ $# -eq 0 || ( $# -eq 1 && $1 == --check ) ]] || refuse_arguments format "--check" "${@:$([[ ${1:-} == --check ]] && echo 2 || echo 1)}"
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || find src include tests bench -name '*.[ch]pp' -o -name '*.cu' -o -name '*.cuh')
if [[ "${1:-}" == "--check" ]]; then
  # One clang-format for every file (one per file took 30 s): each finding is a line "FILE:LINE:COL: error: ...".
  # A finding that names no listed file (clang-format failing itself) is shown as it came.
  report=$(clang-format --dry-run --Werror "${files[@]}" 2>&1 >/dev/null) && status=0 || status=$?
  bad=()
  if [[ $status -ne 0 ]]; then
    declare -A listed=()
    for f in "${files[@]}"; do listed[$f]=1; done
    mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: (error|warning)' <<<"$report" | cut -d: -f1 | sort -u)
    for f in "${bad[@]}"; do
      [[ -n ${listed[$f]:-} ]] || { echo "format: clang-format failed:" >&2; echo "$report" >&2; exit 2; }
    done
    if [[ ${#bad[@]} -eq 0 ]]; then
      echo "format: clang-format failed (exit $status):" >&2
      echo "$report" >&2
      exit 2
    fi
  fi
  if [[ ${#bad[@]} -gt 0 ]]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format (run scripts/format.sh or make format):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files follow .clang-format"
  exit 0
fi
clang-format -i "${files[@]}"
