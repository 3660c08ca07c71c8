"""What the generated PyTorch engine's 2 MiB pages (in_huge_pages) cost at load and give at decode on this machine.

1. First touch: a fresh 1 GiB anonymous mapping written one byte a 4 KiB page, advised for huge pages or not,
   each after 6 s idle (so that the memory freed by the one before is no longer the one reused).
2. The engine: the qwen2.5-0.5b-instruct shape's synthetic checkpoint (f32, eager) loaded in a fresh process, with
   its weights copied into huge pages (as shipped) or into the same mapping without the advice (4 KiB pages);
   the Engine's construction timed, then 32 prompt tokens and 128 decoded, alternating, 3 processes each.

    .venv/bin/python results/huge-pages/measure.py > results/huge-pages/<date>.txt
"""

from __future__ import annotations

import mmap
import subprocess
import sys
import time

import numpy as np

GIB = 1 << 30

ENGINE = r'''
import mmap, sys, tempfile, time
from pathlib import Path
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import write
from linnet_core.targets import CompileOptions
from runners._linnet_torch import import_generated

checkpoint, pages = Path(sys.argv[1]), sys.argv[2]
[path] = write(build_decoder(read_config(checkpoint)), checkpoint, Path(tempfile.mkdtemp()),
               CompileOptions(dtype="f32", max_positions=640, batch=1))
module = import_generated(path)
if pages == "4k":  # the same mapping, never advised
    class Unadvised(mmap.mmap):
        def madvise(self, *args):
            pass
    module.mmap = type("mmap", (), {"mmap": Unadvised, "MADV_HUGEPAGE": mmap.MADV_HUGEPAGE,
                                    "MAP_PRIVATE": mmap.MAP_PRIVATE, "MAP_ANONYMOUS": mmap.MAP_ANONYMOUS})
start = time.perf_counter()
engine = module.Engine(checkpoint, rows=1, max_positions=640, device="cpu", dtype="f32", mode="eager")
load = time.perf_counter() - start
engine.prefill(0, list(range(1, 33)))
engine.generate(8)  # warm
engine.reset()
engine.prefill(0, list(range(1, 33)))
start = time.perf_counter()
engine.generate(128)
print(f"Engine() {load:5.2f} s (weights {engine.weights_s:5.2f} s), decode {128 / (time.perf_counter() - start):5.2f} tok/s")
'''


def first_touch(advise: bool, gib: int = 1) -> float:
    """Seconds to write one byte in every 4 KiB of a fresh `gib` GiB private mapping, advised for 2 MiB pages or not."""
    area = mmap.mmap(-1, gib * GIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advise:
        area.madvise(mmap.MADV_HUGEPAGE)
    view = np.frombuffer(area, dtype=np.uint8)
    start = time.perf_counter()
    view[::4096] = 1
    seconds = time.perf_counter() - start
    del view
    area.close()
    return seconds


def main() -> None:
    from linnet_core.checkpoint import synthetic_checkpoint  # noqa: PLC0415
    from linnet_core.models import get_model  # noqa: PLC0415

    print("1. first touch of a fresh 1 GiB mapping")
    for advise in (True, False) * 3:
        time.sleep(6)
        seconds = first_touch(advise)
        print(f"   {'2 MiB pages' if advise else '4 KiB pages'}: {seconds:5.2f} s, {GIB / seconds / 1e9:5.2f} GB/s", flush=True)
    entry = get_model("qwen2.5-0.5b-instruct")
    checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    print(f"2. the generated PyTorch engine, qwen2.5-0.5b-instruct f32 ({checkpoint})")
    for pages in ("2m", "4k") * 3:
        time.sleep(6)
        done = subprocess.run([sys.executable, "-c", ENGINE, str(checkpoint), pages], capture_output=True, text=True)
        print(f"   {'2 MiB pages' if pages == '2m' else '4 KiB pages'}: {(done.stdout + done.stderr).strip()[-300:]}", flush=True)


if __name__ == "__main__":
    main()
