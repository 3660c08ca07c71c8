#!/bin/bash
# A serving row (ROW; default serve-linnet-cudagraphs, on a CPU linnet.serve on the generated PyTorch, eager) in turns,
# base (BASE, a worktree) and main (this checkout), ROUNDS rounds of `linnet-bench run --trials 3`, qwen2-tiny, the
# default serving workload
BASE=${BASE:-/work/wt-base} MAIN=${MAIN:-/work/main} OUT=${OUT:-/tmp/sv-buckets} ROUNDS=${ROUNDS:-3}
ROW=${ROW:-serve-linnet-cudagraphs}
mkdir -p "$OUT"
source "$MAIN/.venv/bin/activate"
for i in $(seq "$ROUNDS"); do
  for side in base main; do
    dir=$MAIN; [ $side = base ] && dir=$BASE
    rm -rf "$OUT/$side-$i"
    (cd "$dir" && PYTHONPATH="$dir" linnet-bench run qwen2-tiny -r "$ROW" --trials 3 --out "$OUT/$side-$i" > "$OUT/$side-$i.log" 2>&1)
    python - $side $i "$OUT"/$side-$i/*/*.json <<'PY'
import json, sys
d = json.load(open(sys.argv[3]))
for r in d['rows']:
    s, m = r['samples'], r['metrics']
    print(sys.argv[1], sys.argv[2], f"{r['runner']:24s}", 'tok/s', [round(x[0]) for x in s['serving_tok_s']],
          'decode tok/s', round(m['serving_decode_tok_s']), 'rows/step', round(m['serving_decode_rows'], 1),
          'prefill share', round(m['serving_prefill_share'], 3), 'ttft', round(m['serving_ttft_ms'], 1), 'itl', round(m['serving_itl_ms'], 2))
PY
  done
done
