"""Duets (harness/duet.py) on real rows: two checkouts of this code, each side a real child running the generated
PyTorch engine on the tiny model, timed in turns; `check --gate` on the two files they write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench import BenchSettings
from harness.check import GATE_THRESHOLDS, check
from harness.duet import Side, Turns, run_duet
from harness.registry import get_model
from harness.results import load_result
from harness.workload import get_profile
from runners import get_runner

ROOT = Path(__file__).resolve().parent.parent

SLOWER = """

import time as _time

_Measured = Runner


class Runner(_Measured):  # planted by the test: decode twice as slow
    def decode(self, n):
        start = _time.perf_counter()
        out = super().decode(n)
        _time.sleep(_time.perf_counter() - start)
        return out
"""

CRASH = """

_Measured = Runner


class Runner(_Measured):  # planted by the test: the engine breaks after loading
    def decode(self, n):
        raise RuntimeError("planted crash in decode")
"""


def checkout(path: Path, plant: str = "") -> Path:
    """A copy of this checkout's packages, with `plant` appended to the generated PyTorch row's runner."""
    for package in ("harness", "runners", "linnet_core"):
        shutil.copytree(ROOT / package, path / package, ignore=shutil.ignore_patterns("__pycache__"))
    with (path / "runners" / "linnet_torch.py").open("a") as f:
        f.write(plant)
    return path


def duet(tmp_path: Path, baseline: Path, candidate: Path, seconds: float = 1.5):
    settings = BenchSettings(get_model("qwen2-tiny"), (get_runner("linnet-torch"),), get_profile("gate"), "f32", "cpu",
                             None, tmp_path / "out", timeout_s=300)  # fmt: skip
    return run_duet(settings, (Side("baseline", baseline), Side("candidate", candidate)), 2, Turns(seconds, least=10),
                    tmp_path / "scratch", tmp_path / "out")  # fmt: skip


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return checkout(tmp_path_factory.mktemp("plain"))


def test_a_duet_of_the_same_code_passes_and_a_twice_slower_decode_fails(tmp_path, plain):
    paths, failures = duet(tmp_path / "same", plain, ROOT)
    assert failures == []
    base, cand = load_result(paths["baseline"]), load_result(paths["candidate"])
    assert base.run_id == cand.run_id and cand.protocol["duet"]["side"] == "candidate"
    runs = cand.rows[0].samples["decode_tok_s"]
    assert len(runs) == 2 and [len(r) for r in runs] == [len(r) for r in base.rows[0].samples["decode_tok_s"]]
    assert all(len(r) >= 10 for r in runs) and cand.rows[0].metrics["peak_mem_gib"] > 0
    report = check(paths["candidate"], paths["baseline"], GATE_THRESHOLDS, paired=True)
    assert report.passed, report.findings("regression")
    low, high = report.comparisons[0].rows[0].intervals["decode_tok_s"]
    assert low <= 1.0 <= high or abs(low - 1) < 0.1  # the same code: about 1

    slow = checkout(tmp_path / "slow", SLOWER)
    paths, failures = duet(tmp_path / "slow-duet", plain, slow)
    report = check(paths["candidate"], paths["baseline"], GATE_THRESHOLDS, paired=True)
    assert [(f.runner, f.subject) for f in report.findings("regression")] == [("linnet-torch", "decode_tok_s")]
    assert "run-paired 95% interval" in report.findings("regression")[0].message
    low, high = report.comparisons[0].rows[0].intervals["decode_tok_s"]
    assert 0.2 < low <= high < 0.75  # about half the speed (a sleep overshoots)


def test_a_side_that_crashes_fails_its_row_with_the_reason_and_its_partner_is_not_timed(tmp_path, plain):
    broken = checkout(tmp_path / "broken", CRASH)
    paths, failures = duet(tmp_path / "d", plain, broken)
    assert [f.side for f in failures] == ["candidate"]
    cand, base = load_result(paths["candidate"]).rows[0], load_result(paths["baseline"]).rows[0]
    assert cand.status == "failed" and "planted crash in decode" in cand.reason
    assert base.status == "skipped" and base.reason.startswith("not timed: the candidate side failed")


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", "duet", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)  # fmt: skip


def test_the_cli_exits_1_when_the_candidate_side_fails(tmp_path, plain):
    broken = checkout(tmp_path / "broken", CRASH)
    out = cli("qwen2-tiny", "--baseline-checkout", plain, "--candidate-checkout", broken, "-r", "linnet-torch",
              "--profile", "gate", "--pairs", "1", "--seconds", "0.5", "--out", tmp_path / "out")  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "planted crash in decode" in out.stdout and "Traceback" not in out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "error: the candidate side failed on a row: see above"


@pytest.mark.parametrize(
    "args, message",
    [(["--baseline-checkout", "/nonexistent", "-r", "linnet-torch"], "not a checkout of this repository"),
     (["--baseline-checkout", ".", "-r", "serve-linnet-ort"], "duet times single-request rows"),
     (["--baseline-checkout", ".", "-r", "linnet-torch", "--timeout", "nan"], "give a number of seconds above 0"),
     (["--baseline-checkout", ".", "-r", "linnet-torch", "--seconds", "-1"], "--seconds"),
     (["--baseline-checkout", ".", "-r", "linnet-torch", "--seconds", "nan"], "--seconds"),
     (["--baseline-checkout", ".", "-r", "linnet-torch", "--pairs", "0"], "--pairs"),
     (["--baseline-checkout", ".", "-r", "no-such-row"], "no-such-row")],
)  # fmt: skip
def test_bad_arguments_are_one_line_errors(tmp_path, args, message):
    out = cli("qwen2-tiny", *args, "--out", tmp_path / "out")
    assert out.returncode in (1, 2) and message in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr


# ---- peer duets: `run --peer-duets`, a Linnet row and the stack it replaces timed in turns --------------------------


def peer_run(tmp_path, monkeypatch, theirs_cls: str):
    from harness.bench import run_bench
    from runners import RUNNERS, RunnerInfo

    ours = RunnerInfo("fake-ours", "tests.fake_runners:PerToken", "ours", "PyTorch", peer="fake-theirs")
    theirs = RunnerInfo("fake-theirs", f"tests.fake_runners:{theirs_cls}", "theirs", "PyTorch")
    monkeypatch.setitem(RUNNERS, ours.id, ours)
    monkeypatch.setitem(RUNNERS, theirs.id, theirs)
    settings = BenchSettings(get_model("qwen2-tiny"), (ours, theirs), get_profile("quick"), "f32", "cpu", None, tmp_path,
                             timeout_s=120, peer_duet_s=1.0)  # fmt: skip
    return load_result(run_bench(settings))


def test_a_peer_duet_times_the_row_in_turns_with_its_peer_and_the_page_compares_by_its_run_pairs(tmp_path, monkeypatch):
    from harness.site.comparisons import DECODE, against_peer

    result = peer_run(tmp_path, monkeypatch, "PerTokenHalfSpeed")
    ours, theirs = result.rows
    assert result.protocol["peer_duet_s"] == 1.0 and theirs.peer_duet is None
    duet = ours.peer_duet
    assert duet.peer == "fake-theirs" and duet.pairs == 2 and len(duet.ours["decode_tok_s"]) == 2
    assert [len(t) for t in duet.ours["decode_tok_s"]] == [len(t) for t in duet.theirs["decode_tok_s"]]
    comparison = against_peer(ours, result.rows)
    assert comparison.in_turns and comparison.metric == DECODE
    low, high = comparison.interval
    assert 1.5 < low <= comparison.ratio <= high < 2.5  # twice the speed, busy-waited
    assert comparison.interval_text.endswith(", timed in turns")


def test_a_peer_duet_that_fails_is_a_note_and_the_row_keeps_its_trials(tmp_path, monkeypatch):
    from harness.site.comparisons import against_peer

    result = peer_run(tmp_path, monkeypatch, "CrashWhenOnlyTimed")
    ours = result.rows[0]
    assert ours.status == "ok" and ours.peer_duet is None
    assert any(n.startswith("not timed in turns with fake-theirs: the theirs side") and "planted crash" in n for n in ours.notes)
    assert against_peer(ours, result.rows).in_turns is False


def test_a_row_given_another_peer_is_compared_and_timed_in_turns_with_that_one(tmp_path, monkeypatch):
    """`run --peer fake-linnet=fake-named`: the row's peer in the result file, its duet and its comparison are the
    named stack's, not the registry's."""
    from harness.bench import run_bench
    from harness.site.comparisons import against_peer
    from runners import RUNNERS, RunnerInfo, with_peers

    ours = RunnerInfo("fake-linnet", "tests.fake_runners:PerToken", "ours", "PyTorch", peer="fake-registry-peer")
    named = RunnerInfo("fake-named", "tests.fake_runners:PerTokenHalfSpeed", "named", "PyTorch")
    registry = RunnerInfo("fake-registry-peer", "tests.fake_runners:PerToken", "registry's", "PyTorch")
    for info in (ours, named, registry):
        monkeypatch.setitem(RUNNERS, info.id, info)
    rows = with_peers((ours, named, registry), ["fake-linnet=fake-named"])
    settings = BenchSettings(get_model("qwen2-tiny"), rows, get_profile("quick"), "f32", "cpu", None, tmp_path,
                             timeout_s=120, peer_duet_s=1.0)  # fmt: skip
    result = load_result(run_bench(settings))
    row = result.rows[0]
    assert row.peer == "fake-named" and row.peer_duet.peer == "fake-named"
    comparison = against_peer(row, result.rows)
    assert comparison.theirs.runner == "fake-named" and comparison.in_turns and comparison.ratio > 1.5


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "fast", [[1.0]]])
def test_a_peer_duet_holding_a_bad_figure_is_an_invalid_row(bad):
    from harness.results import Row
    from harness.validate import invalid_figures

    duet = {"peer": "transformers", "seconds": 1.0, "pairs": 1, "ours": {"decode_tok_s": [[10.0, bad]]},
            "theirs": {"decode_tok_s": [[5.0, 6.0]]}}  # fmt: skip
    data = {"runner": "linnet-torch", "label": "x", "group": "PyTorch", "status": "ok", "metrics": {}, "peer_duet": duet}
    assert any("peer_duet" in p for p in invalid_figures(data))
    if isinstance(bad, float):
        assert any("peer_duet" in p for p in invalid_figures(Row(**data)))


def test_a_row_that_loads_quickly_gets_more_process_pairs_within_its_seconds(tmp_path, plain):
    from harness.duet import MAX_PAIRS

    settings = BenchSettings(get_model("qwen2-tiny"), (get_runner("linnet-torch"),), get_profile("gate"), "f32", "cpu",
                             None, tmp_path / "out", timeout_s=300)  # fmt: skip
    paths, failures = run_duet(settings, (Side("baseline", plain), Side("candidate", ROOT)), 1, Turns(0.5, least=10),
                               tmp_path / "scratch", tmp_path / "out", row_seconds=15)  # fmt: skip
    pairs = len(load_result(paths["candidate"]).rows[0].samples["decode_tok_s"])
    assert failures == [] and 2 <= pairs <= MAX_PAIRS
    assert load_result(paths["candidate"]).protocol["duet"]["row_seconds"] == 15
