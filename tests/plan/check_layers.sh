#!/bin/sh
# The layers below config (sched, sim, model, runtime) take the resolved plan (plan/plan.hpp), never the deck:
# fails, naming each file, when one of their headers or sources includes a config header.
root=${1:-${CONDUCTOR_SOURCE_DIR:?usage: check_layers.sh SOURCE_DIR}}
found=0
for layer in sched sim model runtime; do
  for dir in "$root/src/$layer" "$root/include/conductor/$layer"; do
    [ -d "$dir" ] || continue
    hits=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"]conductor/config/' "$dir")
    if [ -n "$hits" ]; then
      echo "$hits"
      found=1
    fi
  done
done
if [ "$found" -ne 0 ]; then
  echo "check_layers: the files above include config/ below config; pass plan::Plan (config::resolve) instead" >&2
  exit 1
fi
echo "check_layers: sched, sim, model and runtime include no config header"
