#!/usr/bin/env bash
# The one-shot GPU suite for a lent H200 or H100: every row its image can run, on qwen2.5-0.5b-instruct with synthetic
# weights, the published page's workload (512 prompt tokens, 128 new, bf16), 2 fresh-process trials a row, in at most
# 7 minutes of command time (SUITE_SECONDS); the result file is rewritten as each trial ends and copied to $OUT.
#
#   bash scripts/gpu-suite.sh             on the device: prepare here with scripts/gpu-wheels.sh, carry [".whl"]
#   bash scripts/gpu-suite.sh --dry-run   here, on a CPU: the same command line on the tiny model, so that an import
#                                         error or a flag typo shows here and not in the GPU window (tests/test_gpu_suite.py)
#
# Rows whose stack the image lacks (vLLM, TensorRT, llama.cpp) are left out; KerasHub runs on the image's JAX from
# the carried wheels, without TensorFlow. Under the budget the rows run round robin in the order below, the most
# wanted first: each gets its first trial before any gets its second, KerasHub's rows come after every other row's
# trials, no trial starts once the budget is spent, and a child still running then is cut (harness/bench.py Budget).
# The run's budget is what SUITE_SECONDS (GPU_SUITE_SECONDS) leaves after the wheels' install, END_SECONDS for the
# run's end (the memory bandwidth probed again, the summary) and TAIL_SECONDS for the suite's, and counts from the
# run's start (its checkpoint and first probe included); GPU_SUITE_BUDGET sets it instead. So the result file comes
# first: what the GPU issues ask of it is 2 trials of every row. Then, in what the rows left of SUITE_SECONDS, the
# tests that need a GPU (at most a minute, GPU_SUITE_TEST_SECONDS) and the steps' kernels (at most 45 s,
# GPU_SUITE_KERNEL_SECONDS), each left out, saying so, when under MIN_SECONDS are left (a pytest or a listing cut
# short shows nothing); 0 leaves either out. Last, the result file against the GPU issues' targets
# (scripts/gpu_targets.py, a second or two: inside TAIL_SECONDS).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}  # the log is no terminal: rich would wrap at 80
PYTHON=${PYTHON:-python3}
MODEL=qwen2.5-0.5b-instruct DEVICE=cuda DTYPE=bf16 PROFILE=default TRIALS=2 RUNS=3 BUDGET=${GPU_SUITE_BUDGET:-}
STEP_ROWS="1 64"  # the decode step's kernels at linnet-cudagraphs' one row and the serving workload's 64 in flight
TEST_SECONDS=${GPU_SUITE_TEST_SECONDS:-60} KERNEL_SECONDS=${GPU_SUITE_KERNEL_SECONDS:-45}
SUITE_SECONDS=${GPU_SUITE_SECONDS:-420} END_SECONDS=15 TAIL_SECONDS=5 MIN_SECONDS=30
for knob in GPU_SUITE_SECONDS GPU_SUITE_TEST_SECONDS GPU_SUITE_KERNEL_SECONDS; do
  [[ ${!knob:-0} =~ ^[0-9]{1,6}$ ]] || { echo "error: $knob must be a whole number of seconds, not '${!knob:0:40}'" >&2; exit 2; }
done
if [[ ${1:-} == --dry-run ]]; then
  shift
  MODEL=qwen2-tiny DEVICE=cpu DTYPE=f32 PROFILE=quick TRIALS=1 RUNS=2 STEP_ROWS="1 4"
  SUITE_SECONDS=${GPU_SUITE_SECONDS:-1200}
elif compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
BUDGET=${BUDGET:-$((SUITE_SECONDS - END_SECONDS - TAIL_SECONDS - SECONDS))}
# the rows the GPU issues set targets for first (scripts/gpu_targets.py), the serving ones before linnet-inductor,
# whose first trial compiles from cold
ROWS=(transformers transformers-compiled linnet-cudagraphs serve-linnet-cudagraphs serve-linnet-xla linnet-inductor
      linnet-jax linnet-torch linnet-stablehlo serve-transformers-batched)
EXTRA_ROWS=(kerashub serve-kerashub-static)  # a peer's rows, in what the budget leaves once every row above has its trials
args=()
for row in "${ROWS[@]}"; do args+=(--runner "$row"); done
for row in "${EXTRA_ROWS[@]}"; do args+=(--extra-runner "$row"); done
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv | tee "$OUT/nvidia-smi.csv"
fi
"$PYTHON" -m harness.cli run "$MODEL" --profile "$PROFILE" --dtype "$DTYPE" --device "$DEVICE" --trials "$TRIALS" --runs "$RUNS" \
  --budget "$BUDGET" --timeout 240 --out "$OUT/results" "${args[@]}" "$@" 2>&1 | tee "$OUT/suite.log"
status=${PIPESTATUS[0]}
cp "$OUT"/results/*/*.json "$OUT"/ 2>/dev/null
seconds_left() {  # of the suite's, for what follows the run (none when it overran)
  local left=$((SUITE_SECONDS - TAIL_SECONDS - SECONDS))
  echo $((left > 0 ? left : 0))
}
# Then, with the result file safe in $OUT, the tests only a GPU runs (named "on_a_gpu": CUDA graphs and compiled blocks
# against eager, every attention on a fused kernel, the serving loop overlapping real asynchronous steps); in the dry
# run they are collected and skipped, so that a missing import shows here. Neither outcome is the suite's status.
if (( TEST_SECONDS > 0 )); then
  left=$(seconds_left)
  if (( left < MIN_SECONDS )); then
    echo "the GPU tests are not run: ${left} s of the suite's ${SUITE_SECONDS} were left" | tee "$OUT/gpu-tests.log"
  else
    # the serving tests first: the engine tests compile cold, and what the time limit cuts is better theirs
    timeout $((left < TEST_SECONDS ? left : TEST_SECONDS)) "$PYTHON" -m pytest -v -p no:cacheprovider -k on_a_gpu \
      tests/test_serve_backends.py tests/test_emit_torch.py 2>&1 | tee "$OUT/gpu-tests.log" \
      | grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|skipped|error"
  fi
fi
# Then, in what is left, what limits the CUDA-graph rows: the kernels of the decode step they replay and of a serving
# prefill step (scripts/gpu_step_kernels.py), into $OUT/step-kernels.txt.
if (( KERNEL_SECONDS > 0 )); then
  left=$(seconds_left)
  if (( left < MIN_SECONDS )); then
    echo "the steps' kernels are not listed: ${left} s of the suite's ${SUITE_SECONDS} were left" | tee "$OUT/step-kernels.txt"
  else
    # shellcheck disable=SC2086  # STEP_ROWS is a list of numbers
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout $((left < KERNEL_SECONDS ? left : KERNEL_SECONDS)) "$PYTHON" \
      scripts/gpu_step_kernels.py "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --rows $STEP_ROWS > "$OUT/step-kernels.txt" 2>&1
    grep -E "^[0-9]+ row|Error" "$OUT/step-kernels.txt"
  fi
fi
# Last, where the device tool's reply shows it: the result file against the GPU issues' targets (met, missed or no
# figure, each with its figure and interval: scripts/gpu_targets.py), and the command time the suite took.
if latest=$(ls -t "$OUT"/results/*/*.json 2>/dev/null | head -1) && [[ -n $latest ]]; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" scripts/gpu_targets.py "$latest" | tee "$OUT/targets.txt"
fi
ls -l "$OUT"
echo "the suite took ${SECONDS} s of command time (at most ${SUITE_SECONDS})"
exit "$status"
