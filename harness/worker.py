"""The child process: `python -m harness.worker SPEC.json RECORD.json` runs one runner and writes one JSON record.

The record says ok (metrics, tokens, notes; logits saved beside it as logits.npy), or skipped with the reason.
A crash exits non-zero with its traceback on stderr, which the parent turns into a failed row."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np

OUR_PACKAGES = ("harness", "runners", "linnet_core")


def progress(text: str) -> None:
    """A line the parent shows in its progress display."""
    print(f"@progress {text}", flush=True)


def load_runner_class(target: str):
    """The runner's class ("module" means its class Runner, "module:Class" names one), or the name of the
    missing package that keeps it from importing."""
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name or "Runner"), None
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if not missing or missing in OUR_PACKAGES:
            raise  # our own bug, not a missing stack
        return None, f"{missing} is not installed"


def run(spec_path: Path, record_path: Path) -> None:
    from harness import protocol
    from harness.memory import own_peak_rss_bytes
    from runners.base import RunSpec

    spec = RunSpec.from_json(spec_path.read_text())
    progress("importing")
    cls, missing = load_runner_class(spec.module)
    reason = missing or cls.unavailable(spec)
    if reason:
        record = {"status": "skipped", "reason": reason}
    else:
        runner = cls(spec)
        if spec.kind == "serving":
            measure = protocol.measure_serving
        else:
            measure = protocol.reference_logits if spec.mode == "score" else protocol.measure
        out = measure(runner, spec, progress)
        runner.close()
        logits = out.pop("logits")
        if logits is not None:
            np.save(record_path.parent / "logits.npy", np.asarray(logits, dtype=np.float32))
        record = {
            "status": "ok",
            **out,
            "metrics": {**out["metrics"], **runner.metrics},
            "notes": runner.notes,
            "has_logits": logits is not None,
        }
    record["child_max_rss_bytes"] = own_peak_rss_bytes()
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(record_path)


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
