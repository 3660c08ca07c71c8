"""Helpers the export and engine tests share: a RunSpec for calling a runner in-process."""

from __future__ import annotations

from pathlib import Path

from harness.workload import PROBE_PREFILL, get_profile, probe_ids, prompt_ids
from runners import RUNNERS
from runners.base import RunSpec


def run_spec(entry, runner: str, checkpoint: Path, work: Path, dtype: str = "f32", **options) -> RunSpec:
    """The spec the harness would send `runner` for `entry` under the quick profile."""
    profile, probe = get_profile("quick"), probe_ids(entry.first_special_token, 0)
    return RunSpec(
        runner=runner, module=RUNNERS[runner].module, model=entry.id, checkpoint=str(checkpoint), dtype=dtype,
        device="cpu", prompt=prompt_ids(profile.prompt_tokens, entry.first_special_token, 0),
        new_tokens=profile.new_tokens, warmups=profile.warmups, runs=profile.runs, probe=probe,
        probe_prefill=PROBE_PREFILL, max_positions=profile.max_positions, work_dir=str(work), options=options,
    )  # fmt: skip
