"""How far rounding alone moves the accuracy figures, beside int8 weights: on a model's synthetic checkpoint (a
trained twin by default), transformers eager in f32 is the reference, and Linnet's generated PyTorch runs in bf16
(every weight and activation rounded, nothing quantized) and with int8 weights (f32 activations), on the run's text
probe and on random token ids. A bf16 row is right by construction, so what it scores is the floor a target for
int8 can be held to on that model and probe.

    .venv/bin/python scripts/accuracy_floor.py qwen2-tiny --out results/int8-twins/qwen2-tiny-floor.txt
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from harness.accuracy import accuracy, distribution_shape
from harness.registry import get_model
from harness.workload import PROBE_PREFILL, get_profile, probe_for, probe_ids
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.emit_torch import load_engine
from linnet_core.targets import CompileOptions
from runners.base import RunSpec
from runners.transformers_eager import Runner as TransformersEager

VARIANTS = {"bf16": CompileOptions(dtype="bf16", max_positions=512), "int8": CompileOptions(quant="int8", max_positions=512)}


def reference_logits(entry, checkpoint: Path, probe: list[int]) -> np.ndarray:
    """transformers eager, f32, through its cache path: what every bench row is compared with."""
    spec = RunSpec("transformers", "", entry.id, str(checkpoint), "f32", "cpu", [], 1, 0, 0, probe, PROBE_PREFILL,
                   get_profile("quick").max_positions, "")  # fmt: skip
    runner = TransformersEager(spec)
    runner.load()
    return runner.score(probe, PROBE_PREFILL).astype(np.float64)


def near_ties(reference: np.ndarray, gap: float = 0.05) -> int:
    """Positions whose top two logits are less than `gap` apart: any rounding may swap them."""
    top2 = np.sort(reference, axis=-1)[:, -2:]
    return int((top2[:, 1] - top2[:, 0] < gap).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="qwen2-tiny")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    entry = get_model(args.model)
    checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    decoder = build_decoder(entry.config)
    probes = {"text": probe_for(checkpoint, entry.first_special_token, 0), "random": probe_ids(entry.first_special_token, 0)}
    lines = [f"{entry.id}, synthetic checkpoint {checkpoint.name}: Linnet's generated PyTorch against transformers eager f32 "
             "(probe text: the run's text probe; random: seeded random ids)",
             f"{'probe':<7} {'row':<5} {'top-1':>6} {'KL mean':>9} {'KL p99':>9}  reference: entropy, top-1 prob, near ties (< 0.05)"]  # fmt: skip
    with tempfile.TemporaryDirectory() as work:
        engines = {name: load_engine(decoder, checkpoint, Path(work) / name, options) for name, options in VARIANTS.items()}
        for probe_name, probe in probes.items():
            reference = reference_logits(entry, checkpoint, probe)
            shape = distribution_shape(reference)
            about = f"{shape['entropy_mean']:.2f} nats, {shape['top1_prob_mean']:.2f}, {near_ties(reference)} of {shape['positions']}"
            for name, engine in engines.items():
                figures = accuracy(reference, engine.score(probe, PROBE_PREFILL).astype(np.float64))
                lines.append(f"{probe_name:<7} {name:<5} {figures.top1_agree:>6.3f} {figures.kl_mean:>9.2e} {figures.kl_p99:>9.2e}  {about}")
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
