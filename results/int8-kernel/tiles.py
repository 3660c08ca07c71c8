"""matmul_int8's tile size: a 128-row prefill's products over the 0.5B shape's int8 matrices (one layer's four
products, 24 times), with the kernel built at each TILE_BYTES given, in turns within one process, against an f32
weight's product. (128 rows: the `cpu` profile's prompt.)

    .venv/bin/python results/int8-kernel/tiles.py TILE_BYTES...   (one line per timing; nothing else may run)"""

import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

from harness.registry import get_model
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.emit_torch import import_generated, write
from linnet_core.targets import CompileOptions

SHAPES = [(1152, 896), (896, 896), (9728, 896), (896, 4864)]  # qkv, o, gate/up, down: [N, K]
ROWS = 128


def main(tiles: list[int]) -> None:
    tiny = get_model("qwen2-tiny")  # any int8 module carries the kernels' source
    checkpoint = synthetic_checkpoint(tiny.id, tiny.config, tiny.checkpoint_dtype)
    [path] = write(build_decoder(tiny.config), checkpoint, Path(tempfile.mkdtemp()), CompileOptions(quant="int8"))
    module = import_generated(path)
    shipped = "constexpr int64_t TILE_BYTES = 4 << 20;"
    assert shipped in module.MATVEC_SOURCE, "the kernel's tile size moved: update this script"
    for tile in tiles:  # each size in a library of its own name
        source = module.MATVEC_SOURCE.replace(shipped, f"constexpr int64_t TILE_BYTES = {tile};")
        load_inline(f"tiles_{tile}", cpp_sources=[source.replace("linnet_cpu", f"tiles_{tile}")],
                    extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], is_python_module=False)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    matrices = [module.quantize_int8(torch.randn(n, k, generator=gen)) for n, k in SHAPES * 24]
    floats = [q.float() * s[:, None] for q, s in matrices]
    x = {k: torch.randn(ROWS, k, generator=gen) for _, k in SHAPES}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {ROWS} rows, 4 rounds", flush=True)
    with torch.inference_mode():
        for _ in range(4):
            started = time.perf_counter()
            for w in floats:
                F.linear(x[w.shape[1]], w)
            print(f"f32 weight            {1e3 * (time.perf_counter() - started):7.1f} ms", flush=True)
            for tile in tiles:
                product = getattr(torch.ops, f"tiles_{tile}").matmul_int8
                started = time.perf_counter()
                for q, s in matrices:
                    product(x[q.shape[1]], q, s, None)
                print(f"int8, tiles {tile:8d} B {1e3 * (time.perf_counter() - started):7.1f} ms", flush=True)


if __name__ == "__main__":
    main([int(t) for t in sys.argv[1:]])
