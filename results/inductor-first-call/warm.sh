#!/bin/bash
# Warm speed in turns (each side keeps its own inductor cache, filled by its first round): 4 rounds.
for round in 1 2 3 4; do
  for side in before after; do
    dir=$1; [ $side = after ] && dir=$2
    TORCHINDUCTOR_CACHE_DIR=/tmp/s8/ic-$side /work/main/.venv/bin/python "$(dirname "$0")/first_call.py" "$dir" "$side" 2>&1 | tail -1
  done
done
