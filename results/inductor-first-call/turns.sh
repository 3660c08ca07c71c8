#!/bin/bash
# In turns, twice: the module generated before (3d57374's template) and after (wrapper built apart), each on an
# empty inductor cache. bash turns.sh MODEL_BEFORE_DIR MODEL_AFTER_DIR
for round in 1 2; do
  for side in before after; do
    dir=$1; [ $side = after ] && dir=$2
    rm -rf /tmp/s8/ic; TORCHINDUCTOR_CACHE_DIR=/tmp/s8/ic /work/main/.venv/bin/python "$(dirname "$0")/first_call.py" "$dir" "$side" 2>&1 | tail -1
  done
done
