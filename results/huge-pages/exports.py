"""What numpy's 2 MiB pages cost the exports the ONNX and llama.cpp rows write at load, on this machine.

numpy asks Linux for huge pages (MADV_HUGEPAGE) under every array of 4 MiB or more unless NUMPY_MADVISE_HUGEPAGE=0;
the ONNX emit and the GGUF export build their tensors with numpy. Each export of the qwen2.5-0.5b-instruct shape
(synthetic f32 weights) in a fresh process, as the rows run it, with numpy's default or with the variable at 0,
alternating, each after 6 s idle (so that memory freed a moment before is not what is reused; measure.py).
Measured at 82aee69: since then both conversions keep numpy on 4 KiB pages themselves (checkpoint.numpy_on_small_pages),
whatever the variable says, so at a later commit both halves measure that.

    .venv/bin/python results/huge-pages/exports.py > results/huge-pages/<date>-exports.txt
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "qwen2.5-0.5b-instruct"
EXPORTS = {
    "ONNX f32 (linnet-ort-f32)": ["compile", MODEL, "--target", "onnx", "--max-positions", "640", "--fused-attention"],
    "ONNX int8 (linnet-ort-int8)": ["compile", MODEL, "--target", "onnx", "--max-positions", "640", "--fused-attention",
                                    "--quant", "int8"],
    "GGUF f32 (llamacpp-linnet-gguf)": ["export", "gguf", MODEL],
}


def export(args: list[str], out: Path, huge_pages: bool) -> float:
    env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "1" if huge_pages else "0"}
    target = ["--out", str(out)] if args[0] == "compile" else [str(out / "model.gguf")]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "linnet_core.cli", *args, *target], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    for label, args in EXPORTS.items():
        print(label, flush=True)
        for huge_pages in (True, False) * 3:
            with tempfile.TemporaryDirectory() as out:
                time.sleep(6)
                seconds = export(args, Path(out), huge_pages)
            print(f"   numpy {'on 2 MiB pages' if huge_pages else 'on 4 KiB pages'}: {seconds:5.1f} s", flush=True)


if __name__ == "__main__":
    main()
