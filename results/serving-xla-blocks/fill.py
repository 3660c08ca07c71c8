"""The default serving workload's shape (256 requests, prompts of 128-512 tokens, 128 new, 64 rows) through linnet.serve
on the xla backend in-process (qwen2-tiny, f32, CPU), every request submitted at once, with the backend's serve options
and the loop's compiles ahead: the batched prefill calls, their counts of blocks of 32, the share of those blocks'
positions that are prompt tokens, and where the loop's time went. Run from a checkout with PYTHONPATH set to it."""
import random
import sys
import time

import numpy as np

from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.models import get_model
from linnet_core.serve.backends import EngineSpec, make_engine
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import ServeEngine
from linnet_core.serve.request import Request, SamplingParams

ROWS = 64
entry = get_model("qwen2-tiny")
checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
built = make_engine("xla", EngineSpec(checkpoint, ROWS, 640))
engine = built.engine
mod = sys.modules[type(engine).__module__]
stats = []  # per batched prefill call: (blocks, tokens in chunks of several, such chunks, one-token chunks)
orig = mod.batch_layout


def layout(chunks, rows, max_positions, blocks=None):
    out = orig(chunks, rows, max_positions, blocks)
    if blocks is None:
        multi = [len(t) for _, t, _ in chunks if len(t) > 1]
        stats.append((len(out[2][0]), sum(multi), len(multi), len(chunks) - len(multi)))
    return out


mod.batch_layout = layout
serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=640, **built.serve_options), 10**9, "xla")
print("compiled", serve.model.compile_ahead(serve.config.prefill_budget))
rng = random.Random(0)
requests = [Request([rng.randrange(1000) for _ in range(rng.randint(128, 512))], SamplingParams(max_tokens=128, ignore_eos=True))
            for _ in range(256)]
start = time.perf_counter()
for r in requests:
    serve.submit(r)
while serve.scheduler.has_work:
    serve.step()
print("wall", time.perf_counter() - start)
blocks, real = np.array([s[0] for s in stats]), np.array([s[1] for s in stats])
print("prefill calls", len(stats), "blocks hist", dict(zip(*np.unique(blocks, return_counts=True))))
print("real multi-token tokens", real.sum(), "block slots", (blocks * 32).sum(), "fill", real.sum() / (blocks * 32).sum())
t = serve.times
print(f"prefill {t.prefill_s:.2f} s, decode {t.decode_s:.2f} s, loop {t.loop_s:.2f} s, steps {t.loop_steps}")
