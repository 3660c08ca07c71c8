"""The child process: `python -m harness.worker SPEC.json RECORD.json` runs one runner and writes one JSON record.

The record says ok (metrics, tokens, notes; logits saved beside it as logits.npy), or skipped with the reason.
A crash exits non-zero with its traceback on stderr, which the parent turns into a failed row."""

from __future__ import annotations

import contextlib
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


def measures():
    """What the child does, by the spec's kind ("serving") or mode (harness/protocol.py)."""
    from harness import protocol

    return {"serving": protocol.measure_serving, "measure": protocol.measure, "time": protocol.measure,
            "score": protocol.reference_logits, "truth": protocol.truth_logits}  # fmt: skip


def run(spec_path: Path, record_path: Path) -> None:
    from harness.memory import own_peak_rss_bytes
    from runners.base import RunSpec

    spec = RunSpec.from_json(spec_path.read_text())
    record = run_runner(spec, record_path.parent)
    record["child_max_rss_bytes"] = own_peak_rss_bytes()
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(record_path)


def run_runner(spec, work: Path) -> dict:
    """The record of one runner's work: skipped with the reason, failed with its own one-line verdict (RowRefused),
    or ok with its metrics (the probe's logits saved in WORK as logits.npy)."""
    from runners.base import RowRefused

    progress("importing")
    cls, missing = load_runner_class(spec.module)
    if reason := missing or cls.unavailable(spec):
        return {"status": "skipped", "reason": reason}
    runner = cls(spec)
    try:
        out = measures()[spec.kind if spec.kind == "serving" else spec.mode](runner, spec, progress)
    except RowRefused as e:  # not a crash: the runner says why its row must not be published
        close_after_failure(runner)
        return {"status": "failed", "reason": str(e), "notes": runner.notes}
    except BaseException:
        close_after_failure(runner)
        raise
    runner.close()
    logits = out.pop("logits")
    if logits is not None:  # the truth's in float64: an f32 row is ~1e-5 from it
        np.save(work / "logits.npy", np.asarray(logits, np.float64 if spec.mode == "truth" else np.float32))
    return {"status": "ok", **out, "metrics": {**out["metrics"], **runner.metrics}, "notes": runner.notes,
            "has_logits": logits is not None}  # fmt: skip


def close_after_failure(runner) -> None:
    """Closes a runner whose work failed, perhaps half loaded: the first failure is the row's reason, so an error in
    close() (a resource load never made) must not take its place in the stderr tail the row reports."""
    with contextlib.suppress(Exception):
        runner.close()


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
