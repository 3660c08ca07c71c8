# Computing ops of one linnet.serve prefill step in the forms a GPU runs (GPU_FORMS_ON_CPU), counted on a CPU: the
# default budget in the torch backend's chunks (8 x 256 tokens, 4 continuing a prompt at 256) with 56 rows decoding along.
# python count_prefill_ops.py MODEL, with PYTHONPATH set to the checkout under test
import sys, tempfile
import torch
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import import_generated, write
from linnet_core.models import resolve
from linnet_core.targets import CompileOptions

from count_ops import Ops  # beside this file

entry, checkpoint = resolve(sys.argv[1])
[path] = write(build_decoder(read_config(checkpoint)), checkpoint, tempfile.mkdtemp(), CompileOptions(dtype="bf16", max_positions=640))
m = import_generated(path)
m.GPU_FORMS_ON_CPU = True
e = m.Engine(checkpoint, rows=64, max_positions=640, dtype="bf16")
p = list(range(5, 517))
chunks = [(r, p[:256], 0) for r in range(4)] + [(r, p[256:512], 256) for r in range(4, 8)]
riders = [(r, [7], 300) for r in range(8, 64)]
with torch.inference_mode(), Ops() as ops:
    e.prefill_batch(chunks + riders)
total = sum(ops.count.values())
print(f"{sys.argv[1]}, {m.LAYERS} layers: {total} ops; " + ", ".join(f"{n} {f}" for f, n in ops.count.most_common()))
