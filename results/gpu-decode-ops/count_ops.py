# The computing ops of one eager bf16 decode step of a generated module (each is a kernel launch on a GPU, which a
# CUDA graph replays one by one), in the plain forms a CPU runs and in the forms a GPU runs (GPU_FORMS_ON_CPU: fused
# norms, projections added into the residual stream; FUSED_NORM_ON_CPU, the norms alone, before 2026-12-05 19:30).
# Counted on a CPU through the same code: python count_ops.py MODEL (gen.py in ../inductor-first-call writes modules)
import collections, sys, tempfile
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import import_generated, write
from linnet_core.models import resolve
from linnet_core.targets import CompileOptions


class Ops(TorchDispatchMode):
    """Ops that compute: not a view, nor a cast to the dtype a tensor has (both return the input's storage)."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        outputs = {o.untyped_storage().data_ptr() for o in (out if isinstance(out, (list, tuple)) else [out])}
        if not (func.is_view and outputs <= inputs):
            self.count[str(func)] += 1
        return out



def main() -> None:
    entry, checkpoint = resolve(sys.argv[1])
    decoder = build_decoder(read_config(checkpoint))
    [path] = write(decoder, checkpoint, tempfile.mkdtemp(), CompileOptions(dtype="bf16", max_positions=640, batch=1))
    module = import_generated(path)
    for fused in (False, True):
        module.GPU_FORMS_ON_CPU = fused
        engine = module.Engine(checkpoint, rows=1, max_positions=640, dtype="bf16")
        engine.prefill(0, list(range(5, 517)))
        with torch.inference_mode(), Ops() as ops:
            engine.decode_step(640)
        total = sum(ops.count.values())
        print(f"{sys.argv[1]}, {module.LAYERS} layers, {'GPU forms' if fused else 'plain forms'}: {total} ops "
              f"({(total - 12) / module.LAYERS:.1f} a layer); " + ", ".join(f"{n} {f}" for f, n in ops.count.most_common()))


if __name__ == "__main__":
    main()
