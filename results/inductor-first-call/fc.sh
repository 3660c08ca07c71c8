#!/bin/bash
# first-call comparison, in turns: base (f4e681b) and main (working tree)
source /work/main/.venv/bin/activate
model=$1; shift
for i in 1 2; do
  for side in base main; do
    dir=/work/main; [ $side = base ] && dir=/work/wt-base
    (cd $dir && linnet-bench run $model -r linnet-inductor --trials 2 --out /tmp/s7/fc/$side-$i "$@" > /tmp/s7/fc/$side-$i.log 2>&1)
    python - $side $i /tmp/s7/fc/$side-$i/*/*.json <<'PY'
import json, sys
d = json.load(open(sys.argv[3]))
for r in d['rows']:
    s = r['samples']
    print(sys.argv[1], sys.argv[2], r['runner'], 'first_call', [round(x[0],1) for x in s['first_call_s']], 'load', [round(x[0],1) for x in s['load_s']], 'tok/s', round(r['metrics']['decode_tok_s'],1), 'ttft', round(r['metrics']['ttft_ms'],1))
PY
  done
done
