#!/bin/bash
# bash turns3.sh MODEL ROUNDS, MODULES=DIR holding before/MODEL, after/MODEL, after2/MODEL (gen.py); each side on its own
# inductor cache (round 1 cold, later rounds warm), in turns; SIDES="before after" picks sides
m=$1
rm -rf ${CACHES:-/tmp}/c-$m-*
for round in $(seq 1 $2); do
  for side in ${SIDES:-before after after2}; do
    TORCHINDUCTOR_CACHE_DIR=${CACHES:-/tmp}/c-$m-$side /work/main/.venv/bin/python /work/main/results/inductor-first-call/first_call.py $MODULES/$side/$m "$side (round $round)" 2>&1 | tail -1
  done
done
