#!/usr/bin/env bash
# The one-shot GPU suite for a lent H200: every row that can run there, on qwen2.5-0.5b-instruct with synthetic
# weights and the default profile (512 prompt tokens, 128 new, bf16), then the result file copied to $OUT.
# Prepare here with scripts/gpu-wheels.sh, then run on the device with carry [".whl"]:
#   bash scripts/gpu-suite.sh [--runner ID ...]   (default: every row)
# Rows whose stack the image lacks (vLLM, TensorRT, llama.cpp, KerasHub) are recorded as skipped with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.csv"
# Each row gets at most 150 s: the whole suite fits the 8 minutes the device allows a session's check.
python3 -m harness.cli run qwen2.5-0.5b-instruct --profile default --dtype bf16 --device cuda --timeout 150 \
  --out "$OUT/results" "$@" 2>&1 | tee "$OUT/suite.log"
cp "$OUT"/results/*/*.json "$OUT"/ 2>/dev/null
ls -l "$OUT"
