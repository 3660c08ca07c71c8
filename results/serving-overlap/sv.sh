#!/bin/bash
# serving rows in turns: base (f4e681b) and main (working tree)
source /work/main/.venv/bin/activate
for i in 1 2; do
  for side in base main; do
    dir=/work/main; [ $side = base ] && dir=/work/wt-base
    rm -rf /tmp/s7/sv/$side-$i
    (cd $dir && linnet-bench run qwen2-tiny -r serve-linnet-xla -r serve-linnet-cudagraphs --trials 3 --out /tmp/s7/sv/$side-$i > /tmp/s7/sv/$side-$i.log 2>&1)
    python - $side $i /tmp/s7/sv/$side-$i/*/*.json <<'PY'
import json, sys
d = json.load(open(sys.argv[3]))
for r in d['rows']:
    s, m = r['samples'], r['metrics']
    print(sys.argv[1], sys.argv[2], f"{r['runner']:24s}", 'tok/s', [round(x[0]) for x in s['serving_tok_s']], 'host ms', round(m['serving_host_ms'], 3), 'host share', round(m['serving_host_share'], 3), 'decode tok/s', round(m['serving_decode_tok_s']))
PY
  done
done
