"""Linnet's generated JAX: the emitted source, its engine against transformers eager through the cache path,
rows at different positions, the cache updated in place, the `jax` compile target, and the linnet-jax row."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys

import numpy as np
import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile, probe_ids
from linnet_core.emit_jax import FUNCTIONS, MODULE_FILE, emit_module, import_module, write_module
from linnet_core.arch import build_decoder
from runners import RUNNERS
from runners.base import RunSpec


def reference_logits(checkpoint, ids, n_prefill):
    """transformers eager (the reference row's own code) through the cache path, f32."""
    from runners.transformers_eager import Runner

    spec = RunSpec("transformers", "", "qwen2-tiny", str(checkpoint), "f32", "cpu", [], 1, 0, 0, list(ids), n_prefill, 64, "")
    runner = Runner(spec)
    runner.load()
    return runner.score(ids, n_prefill)


@pytest.fixture(scope="module")
def module(tiny, tmp_path_factory):
    return import_module(write_module(build_decoder(tiny.config), tmp_path_factory.mktemp("generated")))


def test_the_source_renders_each_op_kind_once_and_every_op_in_order(tiny):
    decoder = build_decoder(tiny.config)
    source = emit_module(decoder)
    tree = ast.parse(source)
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    used = {op.kind for op in (*decoder.prologue, *decoder.block, *decoder.epilogue)} - {"add"}
    assert sorted(FUNCTIONS[k] for k in used) == sorted(set(defined) & set(FUNCTIONS.values()))
    assert all(defined.count(name) == 1 for name in defined), defined
    # The block assigns every op's outputs, in the description's order (q, k, v in one statement: one matmul).
    block = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "block")
    assigned = [ast.unparse(t).strip("()") for s in block.body if isinstance(s, ast.Assign) for t in s.targets]
    expected = [", ".join(op.out + (("cache",) if op.kind == "attention" else ())) for op in decoder.block]
    assert ", ".join(assigned) == ", ".join(expected)
    assert 'linear(h, p["qkv_proj.weight"], p["qkv_proj.bias"])' in source
    assert "[B, T, 192]" in source and "eps=1e-06" in source and "inv_freq=INV_FREQ" in source


def test_the_engine_matches_transformers_through_the_cache_path(module, tiny_checkpoint, tiny):
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    engine = module.load_engine(tiny_checkpoint, rows=1, max_positions=64)
    logits = engine.score(probe, 24)
    reference = reference_logits(tiny_checkpoint, probe, 24)
    assert logits.shape == reference.shape == (len(probe) - 24 + 1, tiny.config.vocab_size)
    assert 0 < np.abs(logits - reference).max() <= 1e-4


def decode(engine, row_of, new_tokens, prefills):
    """Runs prefills (step index, row, tokens, start) between decode steps; returns each row's first new tokens."""
    out = {row: [] for row in row_of}
    step = 0
    while any(len(tokens) < new_tokens for tokens in out.values()):
        for at, row, tokens, start in prefills:
            if at == step:
                first = engine.prefill(row, tokens, start)
                if start + len(tokens) == len(row_of[row]):  # the last chunk gives the first new token
                    out[row].append(first)
        ids = engine.step()
        for row, tokens in out.items():
            if tokens and len(tokens) < new_tokens:
                tokens.append(int(ids[row]))
        step += 1
    return out


def test_rows_at_different_positions_decode_as_single_rows(module, tiny_checkpoint):
    rng = np.random.default_rng(3)
    prompts = {0: rng.integers(0, 1000, 5).tolist(), 1: rng.integers(0, 1000, 23).tolist(), 2: rng.integers(0, 1000, 40).tolist()}
    weights = module.load_weights(tiny_checkpoint)
    single = {}
    for row, prompt in prompts.items():
        engine = module.Engine(weights, rows=1, max_positions=64)
        single[row] = decode(engine, {0: prompt}, 6, [(0, 0, prompt, 0)])[0]
    engine = module.Engine(weights, rows=3, max_positions=64)
    # Row 0 starts first, row 1 two steps later, row 2 in two chunks (a chunked prefill) after that.
    prefills = [(0, 0, prompts[0], 0), (2, 1, prompts[1], 0), (3, 2, prompts[2][:17], 0), (4, 2, prompts[2][17:], 17)]
    batched = decode(engine, prompts, 6, prefills)
    assert batched == single
    assert len({tuple(t) for t in single.values()}) == 3  # different prompts, different continuations


def test_generate_runs_the_steps_of_every_row_in_one_call(module, tiny_checkpoint):
    weights = module.load_weights(tiny_checkpoint)
    stepped, looped = (module.Engine(weights, rows=2, max_positions=64) for _ in range(2))
    for engine in (stepped, looped):
        engine.prefill(0, [5, 6, 7])
        engine.prefill(1, list(range(200, 230)))  # rows at different positions
    expected = np.stack([stepped.step() for _ in range(9)])
    ids = looped.generate(9)
    assert ids.shape == (9, 2) and ids.dtype == np.int32
    assert (ids == expected).all() and len(set(ids[:, 0])) > 1
    assert (looped.generate(0) == expected[:0]).all()
    assert (looped.step() == stepped.step()).all()  # last tokens and positions moved on as nine steps move them
    with pytest.raises(ValueError, match="65 decode steps do not fit rows of 64 positions"):
        looped.generate(65)


def test_the_cache_is_updated_in_place(module, tiny_checkpoint):
    engine = module.load_engine(tiny_checkpoint, rows=2, max_positions=64)
    for run in (lambda: engine.prefill(1, [1, 2, 3]), engine.step, lambda: engine.generate(3)):
        before = engine.cache[0][0]  # layer 0's keys
        pointer = before.unsafe_buffer_pointer()
        run()
        assert before.is_deleted()  # donated
        assert engine.cache[0][0].unsafe_buffer_pointer() == pointer  # and written in place, not copied


def test_bad_prefills_are_refused(module, tiny_checkpoint):
    engine = module.Engine(module.load_weights(tiny_checkpoint), rows=2, max_positions=32)
    for row, tokens, start in ((2, [1], 0), (0, [], 0), (0, [1] * 30, 3)):
        with pytest.raises(ValueError, match="does not fit 2 x 32"):
            engine.prefill(row, tokens, start)
    with pytest.raises(ValueError, match="cannot score 33 tokens: the cache has 32 positions"):
        engine.score(list(range(33)), 8)


def test_the_jax_target_writes_an_importable_module(tmp_path, tiny_checkpoint):
    out = subprocess.run(
        [sys.executable, "-m", "linnet_core.cli", "compile", "qwen2-tiny", "--target", "jax", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    module = import_module(tmp_path / MODULE_FILE, "linnet_compiled_jax")
    assert "Precision.HIGHEST" in inspect.getsource(module)
    assert module.Engine(module.load_weights(tiny_checkpoint), 1, 32).prefill(0, [5, 6, 7]) >= 0


def test_the_linnet_jax_row_matches_the_reference(tiny, tmp_path):
    settings = BenchSettings(tiny, (RUNNERS["linnet-jax"],), get_profile("quick"), "f32", "cpu", None, tmp_path)
    [row] = load_result(run_bench(settings)).rows
    assert row.status == "ok", row.reason
    assert row.group == "JAX" and row.peer == "kerashub" and row.label == "Linnet, XLA (generated JAX)"
    assert 0 < row.distance <= 1e-4
    assert row.tokens_agree == get_profile("quick").new_tokens
    assert row.metrics["decode_tok_s"] > 0 and "allocator_peak_gib" not in row.metrics  # a GPU-only field


def test_cuda_without_a_gpu_is_a_skip_with_the_reason(tiny_checkpoint, tmp_path):
    import jax

    from runners.linnet_jax import Runner

    try:
        jax.devices("gpu")
        pytest.skip("this machine has a GPU JAX can use")
    except RuntimeError:
        pass
    spec = RunSpec("linnet-jax", "runners.linnet_jax", "qwen2-tiny", str(tiny_checkpoint), "f32", "cuda", [1], 2, 0, 1,
                   [1, 2], 1, 64, str(tmp_path))  # fmt: skip
    assert Runner.unavailable(spec) == "CUDA requested but JAX sees no GPU"
