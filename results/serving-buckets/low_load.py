"""linnet.serve at low load: REQUESTS requests of NEW tokens at once on a 64-row engine (the server's default rows),
the torch backend on a CPU (qwen2-tiny, f32). Prints the decode steps' mean time and the wall time. Run with
PYTHONPATH set to the checkout under test."""
import sys
import time

from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.models import get_model
from linnet_core.serve.backends import EngineSpec, make_engine
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import ServeEngine
from linnet_core.serve.request import Request, SamplingParams

REQUESTS, NEW, ROWS = int(sys.argv[1]), 128, 64
entry = get_model("qwen2-tiny")
checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
engine = make_engine("torch", EngineSpec(checkpoint, ROWS, 640)).engine
serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=640), 10**9, "torch")
for rnd in range(3):
    requests = [Request(list(range(100 + i, 356 + i)), SamplingParams(max_tokens=NEW, ignore_eos=True)) for i in range(REQUESTS)]
    before = serve.times
    start = time.perf_counter()
    for r in requests:
        serve.submit(r)
    while serve.scheduler.has_work:
        serve.step()
    wall = time.perf_counter() - start
    t = serve.times
    steps, decode_s = t.decode_steps - before.decode_steps, t.decode_s - before.decode_s
    print(f"{REQUESTS} requests x {NEW} tokens on {ROWS} rows, round {rnd + 1}: {wall:.2f} s, {steps} decode steps "
          f"of {decode_s / steps * 1e3:.2f} ms")
