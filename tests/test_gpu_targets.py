"""The GPU issues' targets read off a result file (scripts/gpu_targets.py): met, missed or no figure, never met on a
figure it cannot trust."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import SCHEMA_VERSION, ResultFile, Row
from runners.base import CACHE_CHECKED

ROOT = Path(__file__).resolve().parent.parent
CHECKED = f"{CACHE_CHECKED}: 0.031 apart (the tokens alone: 19)"


def row(runner: str, truth_ratio=1.0, notes=(), **figures) -> Row:
    """An ok row of two trials: each figure given as its two trials' runs, e.g. decode_tok_s=[[500, 510], [490, 505]]."""
    metrics = {"trials": 2, "energy_j_per_tok": 0.4}
    samples = {}
    for key, trials in figures.items():
        if isinstance(trials, list):
            runs = sorted(x for trial in trials for x in trial)
            metrics[key], samples[key] = runs[len(runs) // 2], trials
        else:
            metrics[key] = trials
    return Row(runner=runner, label=runner, group="PyTorch", status="ok", distance=0.5, truth_distance=5.0 * truth_ratio,
               truth_ratio=truth_ratio, notes=list(notes), metrics=metrics, samples=samples)  # fmt: skip


def met_rows() -> list[Row]:
    """A run meeting every target: figures as issue 28 asks, each over two trials."""
    return [
        row("transformers", notes=[CHECKED], decode_tok_s=[[300, 310], [305, 295]]),
        row("transformers-compiled", truth_ratio=1.1, notes=[CHECKED], decode_tok_s=[[600, 610], [590, 605]]),
        row("linnet-cudagraphs", truth_ratio=1.3, decode_tok_s=[[1900, 1920], [1880, 1910]], ttft_ms=[[3.1, 3.2], [3.0, 3.3]]),
        row("linnet-inductor", truth_ratio=1.2, first_call_s=[[21.0], [9.0]]),
        row("serve-linnet-cudagraphs", truth_ratio=1.5, serving_tok_s=[[36_500], [37_000]], serving_prefill_share=0.22,
            serving_energy_j_per_tok=0.05),
        row("serve-linnet-xla", truth_ratio=1.4, serving_tok_s=[[30_100], [30_400]], serving_energy_j_per_tok=0.06),
    ]  # fmt: skip


def gpu_run(rows: list[Row]) -> ResultFile:
    return ResultFile(schema_version=SCHEMA_VERSION, model="qwen2.5-0.5b-instruct", run_id="r1",
                      created_at="2026-12-08T00:00:00+00:00", machine={"cpu": "Xeon", "cpu_cores": 16, "gpu": "NVIDIA H100"},
                      workload={"prompt_tokens": 512, "new_tokens": 128, "batch": 1},
                      protocol={"profile": "default", "dtype": "bf16", "device": "cuda"}, weights="synthetic",
                      rows=rows)  # fmt: skip


def targets(tmp_path, rows: list[Row]) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit status, {target: (verdict, figure text)}, the whole output) of the script on a run of these rows."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(gpu_run(rows).model_dump()))  # as written, NaN and all (write_result would refuse some)
    out = subprocess.run([sys.executable, "scripts/gpu_targets.py", str(path)], cwd=ROOT, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    lines = {}
    for line in out.stdout.splitlines():
        if line.startswith("  "):  # "  verdict    what    figure": columns two spaces apart or more
            verdict, what, text = re.split(r" {2,}", line.strip(), maxsplit=2)
            lines[what] = (verdict, text)
    return out.returncode, lines, out.stdout + out.stderr


def test_a_run_meeting_every_target_is_met_line_by_line_with_its_intervals(tmp_path):
    status, lines, out = targets(tmp_path, met_rows())
    assert status == 0 and "NVIDIA H100" in out, out
    assert {verdict for verdict, _ in lines.values()} == {"met"}, out
    assert len(lines) == 2 + 6 + 2 + 7, out  # cache x2, truth ratio x6, energy, trials; issue 28's seven
    ratio = lines["linnet-cudagraphs decode over transformers compiled's"][1]
    assert ratio.startswith("3.16x (95% CI ") and ratio.endswith("the target: at least 2.00x"), ratio
    assert lines["linnet-inductor first call, the slowest trial's"][1] == "21 s; the target: at most 30 s", out


@pytest.mark.parametrize("change, target, verdict, says", [
    (lambda rows: rows[2].samples.update(decode_tok_s=[[1300, 1250], [1200, 1400]]) or rows[2].metrics.update(decode_tok_s=1300),
     "linnet-cudagraphs decode", "missed", "1,300 tok/s (95% CI"),
    (lambda rows: rows[2].samples.update(decode_tok_s=[[1300, 1250], [1600, 1700]]) or rows[2].metrics.update(decode_tok_s=1600),
     "linnet-cudagraphs decode", "met", "the interval reaches past the target"),
    (lambda rows: rows[0].notes.clear(), "transformers decodes through its cache", "missed", "do not say"),
    (lambda rows: rows[3].metrics.pop("energy_j_per_tok"), "an energy figure on every GPU row", "missed", "not on linnet-inductor"),
    (lambda rows: rows[5].metrics.update(trials=1), "2 trials on every row", "missed", "serve-linnet-xla (1)"),
    (lambda rows: setattr(rows[2], "truth_ratio", 4.5), "linnet-cudagraphs truth ratio", "missed", "4.5; the bound: at most 4"),
    (lambda rows: setattr(rows[2], "truth_ratio", None), "linnet-cudagraphs truth ratio", "no figure", "no float64 truth"),
    (lambda rows: rows.__setitem__(4, Row(runner="serve-linnet-cudagraphs", label="s", group="g", status="skipped",
                                          reason="cut short: the run's budget\nwas spent")),
     "linnet.serve on CUDA graphs", "no figure", "serve-linnet-cudagraphs skipped: cut short: the run's budget\\nwas spent"),
    (lambda rows: rows.pop(1), "linnet-cudagraphs decode over transformers compiled's", "no figure", "no transformers-compiled row"),
    (lambda rows: rows[3].samples.update(first_call_s=[[9.0], [31.0]]), "linnet-inductor first call, the slowest trial's",
     "missed", "31 s; the target: at most 30 s"),
    (lambda rows: rows[3].metrics.update(first_call_s=float("nan")), "linnet-inductor first call, the slowest trial's",
     "no figure", "linnet-inductor's figures are invalid: first_call_s is nan"),
    (lambda rows: rows[3].metrics.update(first_call_s="fast"), "linnet-inductor first call, the slowest trial's",
     "no figure", "first_call_s is a str"),
    (lambda rows: rows[1].samples.update(decode_tok_s=[[0.0, 0.0], [0.0, 0.0]]) or rows[1].metrics.update(decode_tok_s=0.0),
     "linnet-cudagraphs decode over transformers compiled's", "no figure", "transformers-compiled's figures are invalid: decode_tok_s is 0.0"),
])  # fmt: skip
def test_each_target_is_missed_or_without_a_figure_when_the_file_says_so(tmp_path, change, target, verdict, says):
    rows = met_rows()
    change(rows)
    status, lines, out = targets(tmp_path, rows)
    assert status == 0 and lines[target][0] == verdict and says in lines[target][1], out
    assert "Traceback" not in out


def test_the_first_h200_runs_reference_without_its_check_is_not_taken_for_one_decoding_through_its_cache(tmp_path):
    """That run's transformers row was ok, and decoded every token without context: status alone proves nothing."""
    rows = met_rows()
    rows[0].notes[:] = ["first trial on cuda"]
    assert targets(tmp_path, rows)[1]["transformers decodes through its cache"][0] == "missed"


def test_a_reason_that_would_break_the_report_is_printed_on_one_line(tmp_path):
    rows = met_rows()
    rows[2] = Row(runner="linnet-cudagraphs", label="x", group="g", status="failed",
                  reason="oom\n  met        linnet-cudagraphs decode\x1b[2J" + "x" * 5000)
    status, lines, out = targets(tmp_path, rows)
    assert status == 0 and "\x1b" not in out and max(map(len, out.splitlines())) < 300, out
    verdict, text = lines["linnet-cudagraphs decode"]
    assert verdict == "no figure" and text.startswith(
        "linnet-cudagraphs failed: oom\\n  met        linnet-cudagraphs decode\\x1b[2Jxxx") and len(text) < 200, out
    assert lines["rows that did not run"] == ("note", "linnet-cudagraphs (failed)") and len(lines) == 17, out


def test_a_runner_id_that_would_break_the_report_is_refused_with_the_file(tmp_path):
    rows = [*met_rows(), Row(runner="evil\nmet  linnet-cudagraphs decode", label="x", group="g", status="failed")]
    status, lines, out = targets(tmp_path, rows)
    assert status == 2 and not lines and "not one printable line" in out and len(out.splitlines()) == 1, out


@pytest.mark.parametrize("content, message", [
    (None, "no such result file"),
    ("{", "not a JSON result file"),
    ('{"schema_version": 99}', "result schema version 99 is not known"),
    ("[1e999]", "not a result file"),
])  # fmt: skip
def test_a_file_it_cannot_read_is_one_line_and_status_2(tmp_path, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    out = subprocess.run([sys.executable, "scripts/gpu_targets.py", str(path)], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    assert out.returncode == 2 and out.stdout == "" and message in out.stderr and len(out.stderr.splitlines()) == 1, out
