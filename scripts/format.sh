#!/usr/bin/env bash
# Applies .clang-format to every tracked C++/CUDA source, or with --check lists the files that differ from it
# and exits 1. Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || find src include tests bench -name '*.[ch]pp' -o -name '*.cu' -o -name '*.cuh')
if [[ "${1:-}" == "--check" ]]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [[ ${#bad[@]} -gt 0 ]]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format (run scripts/format.sh or make format):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files follow .clang-format"
  exit 0
fi
clang-format -i "${files[@]}"
