"""Energy per token (harness/energy.py): the GPU's energy counter read once around all the timed runs, divided by
their tokens; no figure, and a note saying why, where the counter is missing or did not move."""

from __future__ import annotations

import tempfile

import pytest

from harness import protocol
from harness.energy import EnergyCounter, joules_between, per_token
from harness.memory import nvml_handles
from tests.fake_runners import Counting
from tests.exports_helpers import run_spec


class Board:
    """A GPU's energy counter that the runner below advances: 0.5 J for each run it makes."""

    spent = 1000.0

    def __init__(self, device):
        self.missing = None

    def joules(self):
        return Board.spent


class HalfJoulePerRun(Counting):
    def prefill(self, prompt):
        Board.spent += 0.5
        return super().prefill(prompt)


def test_energy_per_token_is_the_timed_runs_energy_over_their_tokens(tiny, monkeypatch):
    """The warm-up's energy is not counted: only the timed runs', in one window."""
    monkeypatch.setattr(protocol, "EnergyCounter", Board)
    spec = run_spec(tiny, "linnet-torch", "unused", tempfile.mkdtemp())
    assert spec.warmups > 0 and spec.runs > 1
    runner = HalfJoulePerRun(spec)
    out = protocol.measure(runner, spec, lambda text: None)
    assert out["samples"]["energy_j_per_tok"] == [0.5 / spec.new_tokens]
    assert out["metrics"]["energy_j_per_tok"] == 0.5 / spec.new_tokens
    assert not any("energy" in note for note in runner.notes)


def test_a_counter_that_does_not_move_gives_no_figure_and_says_so(tiny, monkeypatch):
    monkeypatch.setattr(protocol, "EnergyCounter", Board)
    spec = run_spec(tiny, "linnet-torch", "unused", tempfile.mkdtemp())
    runner = Counting(spec)
    out = protocol.measure(runner, spec, lambda text: None)
    assert "energy_j_per_tok" not in out["metrics"] and "energy_j_per_tok" not in out["samples"]
    assert "no energy figure: the energy counter did not move over the timed runs" in runner.notes


def test_without_a_gpu_counter_no_energy_is_reported(tiny):
    spec = run_spec(tiny, "linnet-torch", "unused", tempfile.mkdtemp())
    assert EnergyCounter("cpu").joules() is None and EnergyCounter("cpu").missing is None
    runner = Counting(spec)
    out = protocol.measure(runner, spec, lambda text: None)
    assert "energy_j_per_tok" not in out["metrics"] and "energy_j_per_tok" not in out["samples"]
    assert not any("energy" in note for note in runner.notes)  # a CPU row has no energy to miss


@pytest.mark.skipif(bool(nvml_handles()), reason="NVML sees a GPU here")
def test_a_gpu_row_without_a_counter_says_why():
    counter = EnergyCounter("cuda")
    notes = []
    assert per_token(counter, counter.joules(), 100, notes) == []
    assert notes == ["no energy figure: NVML sees no GPU"]


def test_an_interval_needs_both_ends_and_a_counter_that_moved_forward():
    assert joules_between(10.0, 12.5) == 2.5
    assert joules_between(None, 12.5) is None and joules_between(10.0, None) is None
    assert joules_between(12.5, 10.0) is None  # the driver reloaded: the counter restarted
    assert joules_between(10.0, 10.0) is None  # no step of the counter inside the window: no measurement
