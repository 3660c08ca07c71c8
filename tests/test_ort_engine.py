"""The ONNX Runtime engine on a real CPU session: the Engine contract's rows, positions and chunked prefill, its
logits against transformers through the cache path, and the providers it refuses honestly."""

from __future__ import annotations

import numpy as np
import pytest

from linnet_core.emit_onnx import write_onnx
from linnet_core.arch import build_decoder
from linnet_core.ort_engine import OrtEngine, SessionSettings, why_unavailable
from linnet_core.targets import CompileOptions

PROMPTS = {"a": [17, 5, 901, 44, 310, 2, 77, 650, 128, 9], "b": [400, 3, 3, 812, 45, 6, 999, 120, 0, 31, 64, 700, 18, 5, 5, 271, 33],
           "c": [250, 12, 600]}  # fmt: skip
STEPS = 12


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "fused"])
def model_paths(request, tiny, tiny_checkpoint, tmp_path_factory):
    """rows -> an f32 model.onnx over that many rows of 64 positions, with plain ONNX attention or ONNX Runtime's
    fused GroupQueryAttention: every test here holds for both."""
    out = tmp_path_factory.mktemp("engine")
    decoder = build_decoder(tiny.config)
    options = {rows: CompileOptions("f32", 64, rows, fused_attention=request.param) for rows in (1, 3)}
    return {rows: write_onnx(decoder, tiny_checkpoint, out / str(rows), options[rows])[0] for rows in (1, 3)}


def generate(engine: OrtEngine, row: int, prompt: list[int], steps: int) -> list[int]:
    """A single sequence in `row`: the prefill's token, then `steps` decode steps' tokens of that row."""
    return [engine.prefill(row, prompt), *(int(engine.step()[row]) for _ in range(steps))]


@pytest.fixture(scope="module")
def alone(model_paths):
    """Each prompt's tokens, generated alone in a one-row engine."""
    engine = OrtEngine(model_paths[1])
    return {name: generate(engine, 0, prompt, STEPS) for name, prompt in PROMPTS.items()}


def test_rows_at_different_positions_each_get_their_single_row_tokens(model_paths, alone):
    engine = OrtEngine(model_paths[3])
    assert (engine.rows, engine.max_positions) == (3, 64)
    # row 1 starts first and runs 4 steps ahead; row 0 joins at another position; row 2 idles throughout
    tokens = {1: [engine.prefill(1, PROMPTS["a"])]}
    tokens[1] += [int(engine.step()[1]) for _ in range(4)]
    tokens[0] = [engine.prefill(0, PROMPTS["b"])]
    for _ in range(STEPS - 4):
        step = engine.step()
        assert step.shape == (3,) and step.dtype == np.int64
        tokens[1].append(int(step[1]))
        tokens[0].append(int(step[0]))
    assert tokens[1] == alone["a"][: len(tokens[1])]
    assert tokens[0] == alone["b"][: len(tokens[0])]
    # row 1 is reused by a shorter sequence: the longer one's entries beyond it must never be read
    assert generate(engine, 1, PROMPTS["c"], STEPS) == alone["c"]


def test_a_chunked_prefill_continues_where_the_first_chunk_stopped(model_paths, alone):
    engine = OrtEngine(model_paths[1])
    prompt = PROMPTS["b"]
    engine.prefill(0, prompt[:7])
    first = engine.prefill(0, prompt[7:], start=7)
    assert [first, *(int(engine.step()[0]) for _ in range(STEPS))] == alone["b"]


def test_scores_follow_transformers_through_the_cache_path(model_paths, tiny_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from runners._transformers import cache_keyword, forward

    ids, n_prefill = PROMPTS["b"] + PROMPTS["a"], 11
    logits = OrtEngine(model_paths[3]).score(ids, n_prefill)
    assert logits.shape == (len(ids) - n_prefill + 1, 1024) and logits.dtype == np.float32
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32, attn_implementation="eager")
    cache, t = DynamicCache(config=model.config), torch.tensor([ids])
    keyword = cache_keyword(model)
    with torch.no_grad():
        rows = [forward(model, keyword, t[:, :n_prefill], cache)[0, -1]]
        rows += [forward(model, keyword, t[:, i : i + 1], cache)[0, -1] for i in range(n_prefill, len(ids))]
    assert np.abs(logits - torch.stack(rows).numpy()).max() <= 1e-4


def test_a_prefill_that_does_not_fit_is_refused(model_paths):
    engine = OrtEngine(model_paths[1])
    with pytest.raises(ValueError, match="does not fit 1 rows of 64 positions"):
        engine.prefill(0, list(range(60)), start=10)
    with pytest.raises(ValueError, match="into row 1"):
        engine.prefill(1, [1, 2])
    with pytest.raises(ValueError, match="cannot score 65 tokens: the cache has 64 positions"):
        engine.score(list(range(65)), 8)


def test_providers_are_asked_not_assumed():
    assert why_unavailable("cpu", "f32") is None  # this ONNX Runtime computes f32 on the CPU
    missing = why_unavailable("tensorrt", "f16")
    import onnxruntime as ort

    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        assert missing.startswith("ONNX Runtime here has no TensorrtExecutionProvider (it has ")
    with pytest.raises(AssertionError):
        SessionSettings(provider="directml")


def test_the_cache_is_updated_in_place(model_paths, alone):
    """One cache buffer, each layer's past and present bound to the same slice of it: a step writes its new keys
    and values into it (and nothing else), where a copy would have gone to a second buffer."""
    engine = OrtEngine(model_paths[3])
    # a view of the one buffer, [L, 2, R, KV, P, D], as [R, L, 2, KV, P, D]
    cache = engine.cache.read().transpose(2, 0, 1, 3, 4, 5)
    n = len(PROMPTS["a"])
    tokens = [engine.prefill(1, PROMPTS["a"])]
    assert np.abs(cache[1, :, :, :, :n]).min(axis=-1).all() and not cache[1, :, :, :, n:].any() and not cache[[0, 2]].any()
    before = cache.copy()
    tokens.append(int(engine.step()[1]))
    changed = np.argwhere((cache != before).any(axis=(1, 2, 3, 5)))  # (row, position) pairs the step wrote
    assert [tuple(rc) for rc in changed] == [(0, 0), (1, n), (2, 0)]  # each row at its own position, nothing else
    assert tokens == alone["a"][:2]
