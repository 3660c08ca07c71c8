"""Peak resident memory of emitting a model's ONNX graph (write_onnx) and of building its ONNX Runtime session and
running one prefill, each in a fresh process, against the size of the weights it holds in f32.

    .venv/bin/python results/onnx-memory/measure.py llama-3.2-1b-instruct [--quant int8]"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

PHASE = r'''
import json, sys
from pathlib import Path
import psutil
from harness.memory import own_peak_rss_bytes

phase, checkpoint, out, quant = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] or None
if phase == "emit":
    from linnet_core.arch import build_decoder
    from linnet_core.checkpoint import read_config
    from linnet_core.emit_onnx import write_onnx
    from linnet_core.targets import CompileOptions
    from linnet_core.ort_engine import fuses_attention
    decoder = build_decoder(read_config(checkpoint))
    before = psutil.Process().memory_info().rss
    options = CompileOptions("f32", 640, 1, quant=quant, fused_attention=fuses_attention("cpu", "f32"))
    write_onnx(decoder, checkpoint, out, options)
else:
    from linnet_core.ort_engine import OrtEngine
    before = psutil.Process().memory_info().rss
    engine = OrtEngine(out / "model.onnx")
    engine.prefill(0, list(range(1, 65)))
print(json.dumps({"phase": phase, "start_rss_gib": before / 2**30, "peak_rss_gib": own_peak_rss_bytes() / 2**30,
                  "rss_after_gib": psutil.Process().memory_info().rss / 2**30}))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--quant", default="")
    args = parser.parse_args()
    from harness.registry import get_model
    from linnet_core.checkpoint import header_shapes, synthetic_checkpoint

    model = get_model(args.model)
    checkpoint = synthetic_checkpoint(model.id, model.config, model.checkpoint_dtype)
    params = sum(math.prod(shape) for shape in header_shapes(checkpoint).values())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "onnx"
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
        report = {"model": args.model, "quant": args.quant or None, "code": commit, "f32_weights_gib": params * 4 / 2**30}
        for phase in ("emit", "session"):
            run = subprocess.run([sys.executable, "-c", PHASE, phase, str(checkpoint), str(out), args.quant],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            report[phase] = json.loads(run.stdout)
        report["data_file_gib"] = (out / "model.onnx.data").stat().st_size / 2**30
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
