# Computing ops of one linnet.serve prefill step in the forms a GPU runs (GPU_FORMS_ON_CPU), counted on a CPU: the
# default budget in the torch backend's chunks (8 x 256 tokens, 4 continuing a prompt at 256) with 56 rows decoding along.
# python count_prefill_ops.py MODEL, with PYTHONPATH set to the checkout under test
import collections, sys, tempfile
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import import_generated, write
from linnet_core.models import resolve
from linnet_core.targets import CompileOptions

class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.count = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        outputs = {o.untyped_storage().data_ptr() for o in (out if isinstance(out, (list, tuple)) else [out])}
        if not (func.is_view and outputs <= inputs):
            self.count[str(func)] += 1
        return out

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
