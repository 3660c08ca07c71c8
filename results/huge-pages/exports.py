"""What numpy's 2 MiB pages cost the exports the ONNX and llama.cpp rows write at load, on this machine.

numpy asks Linux for huge pages (MADV_HUGEPAGE) under every array of 4 MiB or more; the ONNX emit and the GGUF
export build their tensors with numpy, and since 32ad663 turn that off for their length (numpy_on_small_pages).
Each export of the qwen2.5-0.5b-instruct shape (synthetic f32 weights) in a fresh process, as the rows run it, as
shipped (4 KiB pages) or with numpy_on_small_pages made a no-op (numpy's default), alternating, each after 6 s idle
(so that memory freed a moment before is not what is reused; measure.py). At 82aee69, before that function, the two
sides were numpy's default and NUMPY_MADVISE_HUGEPAGE=0, which is what the 20261207T0155 file measured.

    .venv/bin/python results/huge-pages/exports.py > results/huge-pages/<date>-exports.txt
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "qwen2.5-0.5b-instruct"
EXPORTS = {
    "ONNX int8 (linnet-ort-int8)": ["compile", MODEL, "--target", "onnx", "--max-positions", "640", "--fused-attention",
                                    "--quant", "int8"],
    "GGUF f32 (llamacpp-linnet-gguf)": ["export", "gguf", MODEL],
    "GGUF q8_0 (llamacpp-linnet-gguf-q8_0)": ["export", "gguf", MODEL, "--dtype", "q8_0"],
}
# the linnet CLI with the conversions' switch to small pages undone: numpy's default, huge pages
NUMPY_DEFAULT = ("import contextlib, sys; from linnet_core import checkpoint; "
                 "checkpoint.numpy_on_small_pages = contextlib.nullcontext; "
                 "from linnet_core.cli import main; sys.argv[0] = 'linnet'; main()")


def export(args: list[str], out: Path, huge_pages: bool) -> float:
    target = ["--out", str(out)] if args[0] == "compile" else [str(out / "model.gguf")]
    command = ["-c", NUMPY_DEFAULT] if huge_pages else ["-m", "linnet_core.cli"]
    start = time.perf_counter()
    subprocess.run([sys.executable, *command, *args, *target], check=True, capture_output=True)
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
