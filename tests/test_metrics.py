"""The one table of metrics (harness/metrics.py): the check, the page, the trials and the CLI's closing table read it,
so a metric added there is judged, shown, sampled and printed without another edit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.metrics import METRIC, METRICS

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh interpreter: the table gains a metric before any consumer is imported, as if it were written there.
ADDED = r"""
from harness import metrics
planted = metrics.Metric("planted_per_s", "1/s", True, "Planted rate", "planted", sampled=True, column="planted",
                         table=True, chart=True, unstable=True)
metrics.METRICS = (*metrics.METRICS, planted)
metrics.METRIC["planted_per_s"] = planted

from rich.console import Console
from harness import check, cli, trials
from harness.results import Row
from harness.site import comparisons, table

def row(value):
    figures = {"decode_tok_s": 50.0, "planted_per_s": value, "planted_per_s_min": value, "planted_per_s_max": value}
    return Row(runner="linnet-torch", label="Linnet", group="PyTorch", status="ok", metrics=figures)

report = check.RowReport("linnet-torch", "ok", "ok")
check.compare_metrics(report, row(20.0), row(100.0), None, check.Thresholds())
assert [(f.kind, f.subject, f.label) for f in report.findings] == [("regression", "planted_per_s", "planted")], report
assert "planted_per_s" in report.changes

assert planted in comparisons.CHARTED and planted in comparisons.TABLED
assert any("Planted rate" in c.title([]) for c in table.COLUMNS)
assert "planted_per_s" in trials.SAMPLED and "planted_per_s" in trials.UNSTABLE_METRICS
assert "planted_per_s" not in trials.PER_TRIAL

console = Console(width=200, record=True)
console.print(cli.summary_table([row(12.5)]))
header, line = console.export_text().splitlines()[:2]
assert "planted" in header and "12.5" in line, (header, line)
print("read by all four")
"""


def test_a_metric_added_to_the_table_is_judged_shown_sampled_and_printed():
    done = subprocess.run([sys.executable, "-c", ADDED], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "read by all four" in done.stdout


def test_the_table_keeps_today_s_facts():
    """Units, directions and which figures are per run or per trial, as the protocol measures them."""
    assert [m.key for m in METRICS if not m.sampled] == ["load_s", "first_call_s", "peak_mem_gib", "build_peak_mem_gib"]
    assert METRIC["decode_tok_s"].higher_is_better and not METRIC["ttft_ms"].higher_is_better
    assert METRIC["serving_tok_s"].ratio_to == ("serving_tok_s", "decode_tok_s")
    assert [m.key for m in METRICS if not m.judged] == ["first_call_s", "build_peak_mem_gib"]
    assert [m.key for m in METRICS if m.memory] == ["peak_mem_gib"]
    assert len({m.key for m in METRICS}) == len(METRICS) and len({m.label for m in METRICS}) == len(METRICS)
