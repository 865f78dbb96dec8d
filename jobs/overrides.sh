#!/bin/bash
# Prints the deck overrides (`key.path=value`, one a line) of YAML fragments such as the noise presets, for
# use on a command line:
#   build/conductor validate inputs/quickstart.yaml $(jobs/overrides.sh inputs/noise/straggler.yaml)
#   mpirun -np 4 build/conductor run inputs/quickstart.yaml $(jobs/overrides.sh inputs/noise/jitter10.yaml)
# The batch scripts do the same for OVERRIDES entries written `@FILE`. Lists come out as `[a,b]` (one word).
set -euo pipefail
CONDUCTOR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$CONDUCTOR_ROOT/jobs/common.sh"
[[ $# -gt 0 && $1 != -h && $1 != --help ]] || {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"
  [[ $# -gt 0 ]] && exit 0 || exit 2
}
for f in "$@"; do cj_flatten "$f"; done
