"""The accuracy figures: KL divergence and top-1 agreement on distributions with known answers, hostile logits, and
the reference's own distributions on qwen2-tiny's synthetic weights (neither flat nor one-hot)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.accuracy import accuracy, distribution_shape, kl_per_position, shape_problem
from harness.workload import PROBE_PREFILL, PROBE_TEXT, PROBE_TOKENS, get_profile, probe_for, probe_ids
from linnet_core.errors import UserError
from runners.base import RunSpec


def test_identical_logits_are_zero_kl_and_full_agreement():
    logits = np.random.default_rng(0).normal(size=(257, 1024)).astype(np.float32)
    figures = accuracy(logits, logits.copy())
    assert figures.kl_mean == figures.kl_p99 == 0.0 and figures.top1_agree == 1.0
    # softmax ignores a constant added to every logit of a position: still the same distribution
    shifted = accuracy(logits, logits.astype(np.float64) + np.arange(257)[:, None])
    assert shifted.kl_mean < 1e-12 and shifted.top1_agree == 1.0


def test_a_known_shift_gives_the_known_kl():
    # p = (1/2, 1/2); q = softmax(ln 3, 0) = (3/4, 1/4): KL(p || q) = 1/2 ln(2/3) + 1/2 ln(2) = 1/2 ln(4/3)
    reference = np.zeros((1, 2))
    row = np.array([[math.log(3.0), 0.0]])
    assert kl_per_position(reference, row)[0] == pytest.approx(0.5 * math.log(4 / 3), rel=1e-12)
    # KL is not symmetric: KL(q || p) = 3/4 ln(3/2) + 1/4 ln(1/2)
    assert kl_per_position(row, reference)[0] == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-12)


def test_mean_p99_and_top1_over_positions():
    # 100 positions: 99 identical, one with the top-1 token moved from 0 to 1 and a known divergence
    reference = np.zeros((100, 3))
    reference[:, 0] = 2.0
    row = reference.copy()
    row[7] = [0.0, 2.0, 0.0]
    kl7 = kl_per_position(reference[7:8], row[7:8])[0]
    figures = accuracy(reference, row)
    assert figures.kl_mean == pytest.approx(kl7 / 100)
    assert figures.kl_p99 == pytest.approx(np.percentile([0.0] * 99 + [kl7], 99))  # 0.01 of the way to kl7
    assert figures.top1_agree == pytest.approx(0.99)


def test_float64_softmax_keeps_large_logits_finite():
    reference = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)  # exp(1e4) overflows without the max subtracted
    assert accuracy(reference, reference).kl_mean == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_have_no_kl_and_never_agree(bad):
    reference = np.random.default_rng(1).normal(size=(4, 16))
    row = reference.copy()
    row[2, 5] = bad
    figures = accuracy(reference, row)
    assert figures.kl_mean is None and figures.kl_p99 is None
    assert figures.top1_agree == 0.75


def test_distribution_shape_tells_flat_and_one_hot():
    flat = distribution_shape(np.zeros((3, 1000)))
    assert flat["entropy_mean"] == pytest.approx(math.log(1000)) and flat["top1_prob_mean"] == pytest.approx(1e-3)
    assert shape_problem(flat) == "nearly flat"
    one_hot = np.zeros((3, 1000))
    one_hot[:, 4] = 50.0
    assert shape_problem(distribution_shape(one_hot)) == "nearly one-hot"


def test_the_reference_distributions_on_synthetic_weights_are_neither_flat_nor_one_hot(tiny, tiny_checkpoint):
    """transformers eager (the reference) on qwen2-tiny's probe: what the accuracy figures are measured against."""
    from runners.transformers_eager import Runner

    probe = probe_for(tiny_checkpoint, tiny.first_special_token, 0)  # the run's probe: text, through its tokenizer
    spec = RunSpec("transformers", "", tiny.id, str(tiny_checkpoint), "f32", "cpu", [], 1, 0, 0, probe,
                   PROBE_PREFILL, get_profile("quick").max_positions, "")  # fmt: skip
    runner = Runner(spec)
    runner.load()
    logits = runner.score(probe, PROBE_PREFILL)
    assert logits.shape == (len(probe) - PROBE_PREFILL + 1, tiny.config.vocab_size) and logits.shape[0] >= 256
    shape = distribution_shape(logits)
    assert shape_problem(shape) is None, shape
    # measured 3.41 nats of ln(1024) = 6.93, and 0.28: well inside these bounds
    assert 0.2 * shape["uniform_entropy"] < shape["entropy_mean"] < 0.8 * shape["uniform_entropy"], shape
    assert 0.05 < shape["top1_prob_mean"] < 0.8, shape
    # the top-1 token changes along the probe: agreement is not had by always naming one token
    assert len(set(np.argmax(logits, axis=-1).tolist())) > 50


def test_the_probe_is_the_probe_text_through_the_checkpoints_tokenizer(tiny, tiny_checkpoint):
    from tokenizers import Tokenizer

    probe = probe_for(tiny_checkpoint, tiny.first_special_token, 0)
    assert len(probe) == PROBE_TOKENS and max(probe) < tiny.first_special_token
    decoded = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json")).decode(probe)
    assert len(decoded) > 200 and PROBE_TEXT.read_text().startswith(decoded)
    # the passage is apart from the twins' training text: none of its sentences is in it
    from linnet_core.tokenizer import CORPUS

    sentences = [s.strip() for s in PROBE_TEXT.read_text().split(".") if len(s.strip()) > 40]
    assert sentences and not any(s in CORPUS.read_text() for s in sentences)


def test_a_checkpoint_without_a_tokenizer_gets_random_ids(tiny, tiny_checkpoint, tmp_path):
    (tmp_path / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    assert probe_for(tmp_path, tiny.first_special_token, 3) == probe_ids(tiny.first_special_token, 3)


@pytest.mark.parametrize(("tokenizer", "says"), [
    ("{not json", "cannot tokenize the probe text"),
    # no pre-tokenizer: the whole text is one word, one unknown token
    ('{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}',
     "makes 1 tokens of the probe text, fewer than the probe's 288"),
])  # fmt: skip
def test_a_tokenizer_that_cannot_make_the_probe_is_a_one_line_error(tiny, tmp_path, tokenizer, says):
    (tmp_path / "tokenizer.json").write_text(tokenizer)
    with pytest.raises(UserError, match=says) as e:
        probe_for(tmp_path, tiny.first_special_token, 0)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


def test_a_tokenizer_whose_ids_pass_the_ordinary_ones_is_refused(tiny, tiny_checkpoint, tmp_path):
    (tmp_path / "tokenizer.json").write_text((tiny_checkpoint / "tokenizer.json").read_text())
    with pytest.raises(UserError, match="past the model's ordinary ids"):
        probe_for(tmp_path, 5, 0)


@pytest.fixture(scope="module")
def accuracy_floor():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "accuracy_floor.py"
    spec = importlib.util.spec_from_file_location("accuracy_floor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_near_ties_count_positions_whose_top_two_are_close(accuracy_floor):
    near_ties = accuracy_floor.near_ties
    reference = np.array([[5.0, 4.99, 0.0], [5.0, 1.0, 0.0], [0.0, 2.0, 1.97]])
    assert near_ties(reference) == 2 and near_ties(reference, gap=0.02) == 1


def test_the_accuracy_floor_script_scores_bf16_and_int8_on_both_probes(accuracy_floor, tiny_checkpoint, tmp_path, monkeypatch):
    """On the trained twin: rounding and 8-bit weights keep the model (top-1 above 0.9, small KL) on either probe."""
    out = tmp_path / "floor.txt"
    monkeypatch.setattr("sys.argv", ["accuracy_floor.py", "qwen2-tiny", "--out", str(out)])
    accuracy_floor.main()
    rows = [line.split() for line in out.read_text().splitlines()[2:]]
    assert [tuple(r[:2]) for r in rows] == [("text", "bf16"), ("text", "int8"), ("random", "bf16"), ("random", "int8")]
    for r in rows:
        assert float(r[2]) > 0.9 and 0 < float(r[3]) < 1e-2, r  # top-1 agreement, mean KL
