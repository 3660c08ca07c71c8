"""The generated-PyTorch rows (linnet-torch, linnet-inductor, linnet-cudagraphs) through the real harness: child
processes, the quick profile, the transformers reference; f32 logits within 1e-4 through the cache path and
every greedy token the reference's. On a CPU, where linnet-cudagraphs is skipped with its reason (its graphs are
replayed against eager by tests/test_emit_torch.py's tests on a GPU)."""

from __future__ import annotations

import pytest

from harness.workload import get_profile
from runners import RUNNERS

ROWS = ["linnet-torch", "linnet-inductor", "linnet-cudagraphs"]
QUICK = get_profile("quick")


@pytest.fixture(scope="module")
def rows(suite_run):
    """The rows of a real `linnet-bench run` of them: the GPU suite's dry run (tests/conftest.py), on the tiny model,
    the quick profile, f32 on this CPU."""
    return {r.runner: r for r in suite_run.rows}


@pytest.mark.parametrize("runner", ROWS)
def test_each_row_names_the_stack_it_replaces(runner, rows):
    info = RUNNERS[runner]
    assert info.group == "PyTorch" and info.peer == "transformers-compiled"
    assert rows[runner].label == info.label and rows[runner].peer == "transformers-compiled"


@pytest.mark.parametrize("runner", ROWS)
def test_rows_that_run_here_match_the_reference(runner, rows):
    row = rows[runner]
    if runner == "linnet-cudagraphs":
        assert row.status == "skipped" and row.reason == "CUDA graphs need a GPU"
        return
    assert row.status == "ok", row.reason
    assert row.distance is not None and row.distance <= 1e-4
    assert row.tokens_agree == QUICK.new_tokens
    assert f"KV cache compiled for {QUICK.max_positions} positions" in row.notes
    assert any("tokens to the host once per decode" in note for note in row.notes)  # generate(): no per-token sync
    assert row.metrics["decode_tok_s"] > 0 and row.metrics["load_s"] > 0
    assert 0 < row.metrics["weights_s"] < row.metrics["load_s"]  # reading and placing the weights: a part of the load
    assert any(note.startswith("load time includes the weights' copy into 2 MiB pages") for note in row.notes)
