"""Energy per token (harness/energy.py): the GPU's energy counter read around each timed run, divided by its tokens."""

from __future__ import annotations

import itertools
import tempfile

from harness import protocol
from harness.energy import EnergyCounter, joules_between
from tests.fake_runners import Counting
from tests.exports_helpers import run_spec


class SteadyBoard:
    """A board whose counter reads 1.5 J more at every read: each timed run spends 1.5 J."""

    def __init__(self, device):
        self.reads = itertools.count()

    def joules(self):
        return 1000.0 + 1.5 * next(self.reads)


def test_energy_per_token_is_the_runs_energy_over_their_tokens(tiny, monkeypatch):
    monkeypatch.setattr(protocol, "EnergyCounter", SteadyBoard)
    spec = run_spec(tiny, "linnet-torch", "unused", tempfile.mkdtemp())
    out = protocol.measure(Counting(spec), spec, lambda text: None)
    per_token = 1.5 / spec.new_tokens
    assert out["samples"]["energy_j_per_tok"] == [per_token] * spec.runs
    assert out["metrics"]["energy_j_per_tok"] == per_token


def test_without_a_gpu_counter_no_energy_is_reported(tiny):
    spec = run_spec(tiny, "linnet-torch", "unused", tempfile.mkdtemp())
    assert EnergyCounter("cpu").joules() is None
    out = protocol.measure(Counting(spec), spec, lambda text: None)
    assert "energy_j_per_tok" not in out["metrics"] and "energy_j_per_tok" not in out["samples"]


def test_an_interval_needs_both_ends_and_a_counter_that_did_not_go_back():
    assert joules_between(10.0, 12.5) == 2.5
    assert joules_between(None, 12.5) is None and joules_between(10.0, None) is None
    assert joules_between(12.5, 10.0) is None  # the driver reloaded: the counter restarted
