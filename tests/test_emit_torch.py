"""The PyTorch emitter and the module it writes: standalone, faithful to transformers through the cache path,
rows independent of each other (what serving relies on), bad use refused."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import types
import typing
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.utils._python_dispatch import TorchDispatchMode

from harness.registry import get_model
from harness.workload import probe_ids, prompt_ids
from linnet_core.emit_torch import RENDER, fuse_linears, import_generated, write
from linnet_core.errors import UserError
from linnet_core.arch import build_decoder
from linnet_core.graph import OpKind
from linnet_core.targets import CompileOptions
from runners.base import RunSpec

NEW = 16  # greedy tokens compared per sequence


@pytest.fixture(scope="module")
def module(tiny, tiny_checkpoint, tmp_path_factory):
    [path] = write(build_decoder(tiny.config), tiny_checkpoint, tmp_path_factory.mktemp("gen"), CompileOptions())
    return import_generated(path)


@pytest.fixture(scope="module")
def reference(tiny, tiny_checkpoint):
    """transformers eager, the reference row's own runner, in this process."""
    from runners.transformers_eager import Runner

    probe = probe_ids(tiny.first_special_token, 0, length=40)
    spec = RunSpec("transformers", "runners.transformers_eager", tiny.id, str(tiny_checkpoint), "f32", "cpu",
                   probe, NEW, 0, 0, probe, 24, 256, "/nonexistent")  # fmt: skip
    runner = Runner(spec)
    runner.load()
    return runner


def engine(module, checkpoint, **kw):
    return module.Engine(checkpoint, **{"max_positions": 256, **kw})


def generate(eng, row, prompt, n=NEW):
    """Greedy tokens of one row when it is the only row being prefilled: [first, *n - 1 more]."""
    tokens = [eng.prefill(row, prompt)]
    tokens += [int(eng.step()[row]) for _ in range(n - 1)]
    return tokens


def test_every_op_kind_has_a_renderer():
    assert set(typing.get_args(OpKind)) == set(RENDER)


def test_linears_reading_one_value_are_fused(tiny):
    decoder = build_decoder(tiny.config)
    shapes = {n: w.shape for n, w in decoder.weights_of_layer(0).items()}
    ops, fused = fuse_linears(decoder.block, shapes)
    linears = [op for op in ops if op.kind == "linear"]
    assert [op.out for op in linears] == [("q", "k", "v"), ("o",), ("g", "u"), ("d",)]
    assert linears[0].weights == ("qkv_proj.weight", "qkv_proj.bias")
    assert linears[0].attrs == {"split": (64, 32, 32), "joint": "qkv"} and linears[2].attrs["joint"] == "gate_up"
    assert fused == {
        "qkv_proj.weight": ["q_proj.weight", "k_proj.weight", "v_proj.weight"],
        "qkv_proj.bias": ["q_proj.bias", "k_proj.bias", "v_proj.bias"],
        "gate_up_proj.weight": ["gate_proj.weight", "up_proj.weight"],
    }
    assert len(ops) == len(decoder.block) - 3  # five linears became two


def test_the_source_is_readable_python_with_one_class_per_block(module):
    source = open(module.__file__).read()
    classes = [n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
    assert classes == ["Prologue", "Block", "Epilogue", "Decoder", "Engine"]
    assert "import transformers" not in source and "linnet_core" not in source
    assert "qkv = linear(h, self.qkv_proj_weight, self.qkv_proj_bias)  # [B, T, 128]" in source
    assert "q, k = rope(qkv[..., :96], cos, sin, 16).split_with_sizes((64, 32), dim=-1)" in source  # q, k rotate as one
    assert "# [B, T, 192], [B, T, 192]" in source  # shape comments
    assert "[1024, 64]: the token embedding's (tied head)" in source


def test_the_loader_fuses_and_reads_the_tied_embedding_once(module, tiny_checkpoint):
    eng = engine(module, tiny_checkpoint)
    hf = load_file(tiny_checkpoint / "model.safetensors")
    block = eng.model.blocks[1]
    p = "model.layers.1."
    qkv = torch.cat([hf[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
    assert torch.equal(block.qkv_proj_weight, qkv)
    assert torch.equal(block.gate_up_proj_weight, torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]]))
    assert torch.equal(block.down_proj_weight, hf[p + "mlp.down_proj.weight"])
    assert eng.model.epilogue.embed_weight is eng.model.prologue.embed_weight  # one tensor for embedding and head


@pytest.mark.parametrize("every_matrix_in_the_kernel", [False, True])
def test_logits_and_tokens_match_transformers_through_the_cache(module, tiny_checkpoint, reference, tiny,
                                                                every_matrix_in_the_kernel, monkeypatch):  # fmt: skip
    """The tiny model's matrices sit below MATVEC_MIN_WEIGHTS; with the bound at 0 its decode runs in matvec_f32."""
    if every_matrix_in_the_kernel:
        monkeypatch.setattr(module, "MATVEC_MIN_WEIGHTS", 0)
    eng = engine(module, tiny_checkpoint)
    if every_matrix_in_the_kernel and AVX512:  # row-major, as the kernel reads them
        assert all(b.down_proj_weight.is_contiguous() and b.qkv_proj_weight.is_contiguous() for b in eng.model.blocks)
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    logits = eng.score(probe, 24)
    assert logits.shape == (len(probe) - 24 + 1, tiny.config.vocab_size) and logits.dtype == np.float32
    assert np.abs(logits - reference.score(probe, 24)).max() <= 1e-4
    expected = [reference.prefill(probe), *reference.decode(NEW - 1)]
    assert generate(eng, 0, probe) == expected
    assert len(set(expected)) > 3  # the synthetic weights do not collapse into one repeated token


def test_the_static_window_step_the_cuda_graph_runs_matches(module, tiny_checkpoint, tiny):
    """A CUDA graph replays decode_step over the whole cache window whatever the positions: the same logits."""
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    windowed = engine(module, tiny_checkpoint)
    static = engine(module, tiny_checkpoint)
    static.decode = lambda window, n: static.decode_step(static.max_positions, rows=n)
    # attending over masked-out keys too only changes the softmax's summation order
    np.testing.assert_allclose(static.score(probe, 24), windowed.score(probe, 24), atol=3e-5)
    assert generate(static, 0, probe) == generate(windowed, 0, probe)


def test_generate_returns_the_tokens_of_step_calls_in_blocks(module, tiny_checkpoint, reference, tiny):
    """generate(n) runs full blocks through run_block (what a CUDA graph replays) and a shorter tail step by step,
    continuing where the last call left off; n = 0 returns no tokens. Here the block runs as it is captured."""
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    stepped = engine(module, tiny_checkpoint, rows=2)
    blocked = engine(module, tiny_checkpoint, rows=2, block_steps=3)
    calls, block = [], blocked.decode_block
    blocked.run_block = lambda tokens: (calls.append(("block", len(tokens))), block(tokens))[1]
    blocked.decode_block = lambda tokens: (calls.append(("steps", len(tokens))), block(tokens))[1]
    first = [stepped.prefill(0, probe), blocked.prefill(0, probe)]
    got = []
    schedules = {0: [], 2: [("steps", 2)], 3: [("block", 3)], 7: [("block", 3), ("block", 3), ("steps", 1)]}
    for n, expected_calls in schedules.items():
        calls.clear()
        tokens = blocked.generate(n)
        assert tokens.shape == (n, 2) and tokens.dtype == np.int64 and calls == expected_calls
        assert tokens.tolist() == [stepped.step().tolist() for _ in range(n)]
        got += tokens[:, 0].tolist()
    assert blocked.host_positions.tolist() == stepped.host_positions.tolist() == [40 + 12, 12]
    expected = [reference.prefill(probe), *reference.decode(NEW - 1)]
    assert [first[1], *got] == expected[:13] and first[0] == first[1]


def test_a_replayed_block_gives_the_tokens_of_steps(module, tiny_checkpoint, tiny):
    """The CUDA graph path on a CPU: replay_block's 'graph' runs decode_block over the static block buffer, as the
    captured graph does, over the static-window step the graphs capture; generate() then copies the buffer out."""
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    stepped = engine(module, tiny_checkpoint)
    graphed = engine(module, tiny_checkpoint, block_steps=4)
    graphed.decode = lambda window, n: graphed.decode_step(graphed.max_positions, rows=n)
    graphed.block_tokens = torch.zeros((4, 1), dtype=torch.int64)
    graphed.block_graph = types.SimpleNamespace(replay=lambda: graphed.decode_block(graphed.block_tokens))
    graphed.run_block = graphed.replay_block
    assert stepped.prefill(0, probe) == graphed.prefill(0, probe)
    assert graphed.generate(10)[:, 0].tolist() == [int(stepped.step()[0]) for _ in range(10)]
    assert graphed.generate(4)[:, 0].tolist() == [int(stepped.step()[0]) for _ in range(4)]


class ComputeOps(TorchDispatchMode):
    """Counts the ops that compute: on a GPU, eagerly, each is a kernel launch. A view, or a cast to the dtype a
    tensor has, returns its input's storage and launches nothing."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        outputs = {o.untyped_storage().data_ptr() for o in (out if isinstance(out, (list, tuple)) else [out])}
        self.count += not (func.is_view and outputs <= inputs)
        return out


def test_the_step_a_gpu_replays_is_few_kernels_and_closer_to_the_truth(module, tiny_checkpoint, tiny, monkeypatch):
    """A CUDA graph replays the eager decode step's kernels one by one, so their number bounds linnet-cudagraphs'
    speed. In the forms a GPU runs (here on the CPU: GPU_FORMS_ON_CPU) a bf16 step is at most 14 computing ops per
    layer: each norm one kernel where the form by hand is eight, each projection onto the residual stream one where
    a linear and an add are two. Its logits are no farther from f32's than the plain forms', which round more."""
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    f32 = engine(module, tiny_checkpoint).score(probe, 24)
    ops, logits = {}, {}
    for gpu_forms in (False, True):
        monkeypatch.setattr(module, "GPU_FORMS_ON_CPU", gpu_forms)
        eng = engine(module, tiny_checkpoint, dtype="bf16")
        logits[gpu_forms] = eng.score(probe, 24)
        with torch.inference_mode(), ComputeOps() as counted:
            eng.decode_step(eng.max_positions)
        ops[gpu_forms] = counted.count
    layers = module.LAYERS
    assert ops[True] <= 14 * layers + 12 and ops[False] - ops[True] == 7 * (2 * layers + 1) + 2 * layers, ops
    gpu, plain = (np.abs(logits[f] - f32).max() for f in (True, False))
    assert 0 < gpu <= plain, (gpu, plain)
    np.testing.assert_allclose(engine(module, tiny_checkpoint).score(probe, 24), f32, atol=1e-5)  # the same sums in f32


@pytest.mark.parametrize("T", [1, 5])
def test_a_gpu_asks_attention_under_a_mask_with_grouped_heads_folded_into_positions(module, monkeypatch, T):
    """Flash attention takes no mask and torch 2.11's memory-efficient attention no grouped heads, so SDPA given
    both on a GPU runs its math kernel. There the query heads a kv head serves become its query positions, and
    SDPA is asked for equal heads (here on a CPU: GPU_FORMS_ON_CPU), with the same result. Unmasked, or on a CPU,
    it is asked for grouped heads as before."""
    torch.manual_seed(0)
    B, heads, kv_heads, W, D = 3, 6, 2, 9, 8
    q, keys, values = torch.randn(B, heads, T, D), torch.randn(B, kv_heads, W, D), torch.randn(B, kv_heads, W, D)
    positions = torch.tensor([[4 + t for t in range(T)], [W - T + t for t in range(T)], [t for t in range(T)]])
    mask = module.causal_mask(positions, W, torch.float32)  # [B, 1, T, W], each row at its own positions
    expected = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True, scale=0.3)
    asked, sdpa = [], F.scaled_dot_product_attention

    def recorded(q, k, *args, **kwargs):
        asked.append((q.shape[1], k.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(q, k, *args, **kwargs)

    monkeypatch.setattr(module.F, "scaled_dot_product_attention", recorded)
    for gpu_forms in (False, True):
        monkeypatch.setattr(module, "GPU_FORMS_ON_CPU", gpu_forms)
        got = module.grouped_attention(q, keys, values, mask, scale=0.3)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    module.grouped_attention(q, keys, values, None, T > 1)  # unmasked: grouped heads, with the GPU forms too
    assert asked == [(heads, kv_heads, True), (kv_heads, kv_heads, False), (heads, kv_heads, True)]


def test_a_gpu_attends_a_batch_of_chunks_in_one_padded_call(module, tiny_checkpoint, tiny, monkeypatch):
    """On a GPU a batched prefill's chunks of several tokens attend in one call, each padded to the longest, over the
    widest window (here on a CPU: GPU_FORMS_ON_CPU): the same logits, tokens and cache as a call per chunk, with
    SDPA asked twice a layer (the chunks, the one-token chunks) where it was asked once per chunk and once more."""
    probe = probe_ids(tiny.first_special_token, 0, length=60)
    # a continued prompt, fresh ones of other lengths, a one-token chunk (a decode step) and a short continuation
    chunks = [(2, probe[13:31], 13), (3, probe[:7], 0), (0, probe[3:24], 0), (1, [9], 5), (4, probe[40:43], 40)]
    got, sdpa = {}, F.scaled_dot_product_attention
    for gpu_forms in (False, True):
        monkeypatch.setattr(module, "GPU_FORMS_ON_CPU", gpu_forms)
        eng = engine(module, tiny_checkpoint, rows=5)
        for row, length in ((2, 13), (1, 5), (4, 40)):
            eng.prefill(row, probe[:length])
        calls = []
        monkeypatch.setattr(module.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(a[0].shape[0]) or sdpa(*a, **k))
        logits = eng.prefill_batch_logits(chunks)
        monkeypatch.setattr(module.F, "scaled_dot_product_attention", sdpa)
        got[gpu_forms] = (logits, logits.argmax(-1).tolist(), eng.generate(4).tolist(), calls)
    (plain_logits, *plain), (padded_logits, *padded) = got[False], got[True]
    np.testing.assert_allclose(padded_logits, plain_logits, atol=1e-5)
    assert padded[:2] == plain[:2]  # the chunks' next tokens, then four steps reading the cache the chunks wrote
    assert plain[2] == [1, 1, 1, 1, 1] * module.LAYERS and padded[2] == [4, 1] * module.LAYERS, (plain[2], padded[2])


def test_a_prefill_padded_to_its_bucket_gives_the_same_logits(module, tiny_checkpoint, tiny):
    """What a prefill graph runs, on a CPU: the prompt padded to its bucket's length, the pad at positions past the
    prompt. Chunks continue it; a prompt whose bucket would pass the cache's end runs unpadded."""
    probe = probe_ids(tiny.first_special_token, 0, length=60)
    plain = engine(module, tiny_checkpoint, max_positions=64)
    padded = engine(module, tiny_checkpoint, max_positions=64)
    padded.prefill_graphs = {}  # a one-row engine on a GPU has these; on a CPU captured_prefill runs as is
    ran, captured = [], padded.captured_prefill
    padded.captured_prefill = lambda ids, positions: (ran.append(ids.shape[1]), captured(ids, positions))[1]
    for start, end, bucket in ((0, 20, [32]), (20, 37, [32]), (37, 60, [])):  # 37 + 32 would pass 64
        chunk = probe[start:end]
        ran.clear()
        got = padded.prefill_logits(0, chunk, start)
        np.testing.assert_allclose(got, plain.prefill_logits(0, chunk, start), atol=2e-5)
        assert ran == bucket
        assert padded.generate(3).tolist() == plain.generate(3).tolist()
        padded.prefill(0, probe[:end]), plain.prefill(0, probe[:end])  # back to the chunk's end
    assert module.prefill_bucket(17, 0, 640) == 32 and module.prefill_bucket(16, 0, 640) == 16
    assert module.prefill_bucket(600, 0, 640) is None and module.prefill_bucket(30, 620, 640) is None
    ids, positions = module.padded_prompt([5, 6, 7], 10, 5, "cpu")
    assert ids.tolist() == [[5, 6, 7, 7, 7]] and positions.tolist() == [[10, 11, 13, 14, 12]]


def test_rows_at_different_positions_get_the_tokens_of_single_row_runs(module, tiny_checkpoint, tiny):
    prompts = [prompt_ids(n, tiny.first_special_token, seed) for n, seed in ((30, 1), (17, 2), (45, 3))]
    solo = [generate(engine(module, tiny_checkpoint), 0, p) for p in prompts]

    eng = engine(module, tiny_checkpoint, rows=4)  # row 3 stays idle and computes harmlessly
    got = [[eng.prefill(0, prompts[0])], [], []]
    for step in range(NEW - 1):
        if step == 3:  # row 1 joins mid-run (continuous batching)
            got[1].append(eng.prefill(1, prompts[1]))
        if step == 6:  # row 2 joins in two chunks, the second continuing the first
            eng.prefill(2, prompts[2][:20])
            got[2].append(eng.prefill(2, prompts[2][20:], start=20))
        tokens = eng.step()
        assert tokens.shape == (4,) and tokens.dtype == np.int64
        for row in range(3):
            if got[row] and len(got[row]) < NEW:
                got[row].append(int(tokens[row]))
    assert got[0] == solo[0]
    assert got[1] == solo[1][: len(got[1])] and len(got[1]) == NEW - 3
    assert got[2] == solo[2][: len(got[2])] and len(got[2]) == NEW - 6


@pytest.mark.parametrize("window", ["eager", "static"])
def test_a_step_over_the_first_rows_leaves_the_others_as_they_were(module, tiny_checkpoint, tiny, window):
    """A step may cover only a bucket of the first rows (linnet.serve's steps while few rows are busy): each row's
    tokens, taken whenever a step covered it, are its single-row run's, and the rows outside a step wait as they were.
    Eagerly one row alone attends without a mask (its window is exactly its length), as a one-row engine does; the
    static window is the step each bucket's CUDA graph captures."""
    prompts = [prompt_ids(n, tiny.first_special_token, seed) for n, seed in ((30, 1), (17, 2), (45, 3), (9, 4))]
    solo = [generate(engine(module, tiny_checkpoint), 0, p) for p in prompts]
    eng = engine(module, tiny_checkpoint, rows=4)
    if window == "static":
        eng.decode = lambda window, n: eng.decode_step(eng.max_positions, rows=n)
    assert eng.step_row_buckets == (1, 2, 4)
    got = [[eng.prefill(row, p)] for row, p in enumerate(prompts)]
    for n in (1, 1, 2, 4, 2, 1, 4, 4, 1, 2):
        tokens = eng.step(n)
        assert tokens.shape == (n,) and tokens.dtype == np.int64
        for row in range(n):
            got[row].append(int(tokens[row]))
    assert [len(g) for g in got] == [11, 7, 4, 4]
    assert got == [s[: len(g)] for s, g in zip(solo, got)]
    for bad in (3, 0, 8, -1, 2.0, True):
        with pytest.raises(ValueError, match=r"covers one of \[1, 2, 4\] rows"):
            eng.step(bad)
    with pytest.raises(ValueError, match=r"a step over 2 rows cannot sample rows \[3\]"):
        eng.step_sampled(np.zeros(4, dtype=np.int64), module_draws([3]), 2)
    assert engine(module, tiny_checkpoint).step_row_buckets == (1,)
    assert module.row_buckets(64) == (1, 2, 4, 8, 16, 32, 64) and module.row_buckets(6) == (1, 2, 4, 6)


def module_draws(index):
    from linnet_core.engine import Draws

    return Draws(index, [1.0] * len(index), [1.0] * len(index), [0.5] * len(index))


def test_16_bit_linear_on_a_cpu_multiplies_many_rows_in_f32(module):
    """A prefill's rows multiply in f32 over the upcast weight and round once; a decode step's few rows keep
    torch's 16-bit matmul. Both accumulate in f32."""
    gen = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 64, generator=gen).bfloat16(), torch.randn(96, generator=gen).bfloat16()
    x = torch.randn(1, module.UPCAST_ROWS + 1, 64, generator=gen).bfloat16()
    exact = torch.nn.functional.linear(x.float(), w.float(), b.float())
    assert torch.equal(module.linear(x, w, b), exact.bfloat16())
    few = module.linear(x[:, :2], w, b)
    assert few.dtype == torch.bfloat16 and torch.equal(few, torch.nn.functional.linear(x[:, :2], w, b))
    torch.testing.assert_close(few.float(), exact[:, :2], atol=0, rtol=2**-7)  # within one bf16 rounding


AVX512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")


@pytest.mark.skipif(not AVX512, reason="matvec_f32 runs on AVX-512 CPUs only")
@pytest.mark.parametrize("rows, n, k", [(1, 5, 1), (1, 37, 17), (3, 64, 100), (8, 130, 2049), (2, 7, 4867),
                                         (1, 896, 64)])
def test_f32_decode_rows_on_an_avx512_cpu_run_in_the_matvec_kernel(module, rows, n, k, monkeypatch):
    """Every row length (full 64-float steps, masked tails, the four-row path of long rows, row counts not divisible
    by four) against a float64 product: the kernel sums in another order than torch, so within f32 rounding. linear()
    takes it for a decode's few rows over a weight of MATVEC_MIN_WEIGHTS or more, torch's product otherwise."""
    gen = torch.Generator().manual_seed(rows * n + k)
    x, w, b = torch.randn(1, rows, k, generator=gen), torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
    assert module.load_cpu_matvec()
    for bias in (None, b):
        y = torch.ops.linnet_cpu.matvec_f32(x[0], w, bias)
        exact = torch.nn.functional.linear(x[0].double(), w.double(), None if bias is None else bias.double())
        torch.testing.assert_close(y.double(), exact, atol=1e-5 * math.sqrt(k), rtol=1e-5)
        kernel = n * k >= module.MATVEC_MIN_WEIGHTS
        assert torch.equal(module.linear(x, w, bias)[0], y if kernel else torch.nn.functional.linear(x[0], w, bias))
        monkeypatch.setattr(module, "MATVEC_MIN_WEIGHTS", 0)
        assert torch.equal(module.linear(x, w, bias)[0], y)
        monkeypatch.undo()
    many = torch.randn(1, module.MATVEC_ROWS + 1, k, generator=gen)  # a prefill's rows: torch's own product
    assert torch.equal(module.linear(many, w, b), torch.nn.functional.linear(many, w, b))


@pytest.mark.skipif(not AVX512, reason="matvec_f32 runs on AVX-512 CPUs only")
def test_the_matvec_kernel_refuses_what_it_cannot_multiply(module):
    assert module.load_cpu_matvec()
    matvec, w = torch.ops.linnet_cpu.matvec_f32, torch.ones(4, 8)
    for x, weight, why in [(torch.ones(1, 7), w, "x \\[M, K\\]"), (torch.ones(1, 8).double(), w, "f32"),
                           (torch.ones(1, 4), w.t(), "row-major")]:  # fmt: skip
        with pytest.raises(RuntimeError, match=why):
            matvec(x, weight, None)


def test_cpu_weights_move_into_one_huge_page_mapping_unchanged(module, tiny_checkpoint):
    """The loaded weights, moved: equal values, in the layout their product reads, the tied head still the
    embedding's tensor, all in one mapping that starts on a 2 MiB boundary."""
    eng = engine(module, tiny_checkpoint)
    hf = load_file(tiny_checkpoint / "model.safetensors")
    block = eng.model.blocks[1]
    assert torch.equal(block.down_proj_weight, hf["model.layers.1.mlp.down_proj.weight"])
    # column-major for torch's product: the tiny model's matrices are below what the kernel takes
    assert block.down_proj_weight.t().is_contiguous() and not block.down_proj_weight.is_contiguous()
    assert eng.model.epilogue.embed_weight is eng.model.prologue.embed_weight
    weights = [t for m in eng.model.modules() for t in vars(m).values() if isinstance(t, torch.Tensor) and t.dim() == 2]
    starts = sorted(w.data_ptr() for w in weights)
    assert starts[0] % module.HUGE_PAGE == 0
    ends = max(w.data_ptr() + w.numel() * w.element_size() for w in weights)
    region = next(r for r in mappings() if r[0] <= starts[0] < r[1])
    assert ends <= region[1]  # one mapping holds them all


def test_weights_of_real_size_land_on_huge_pages_in_their_layouts(module):
    """8 MiB of weights, one of them column-major and one named twice (a tied head): the same values and strides,
    one tensor for both names, and huge pages under them where Linux grants them to advised memory."""
    gen = torch.Generator().manual_seed(0)
    embed, column = torch.randn(1024, 1024, generator=gen), torch.randn(512, 2048, generator=gen).t().contiguous().t()
    weights = {"embed": embed, "head": embed, "column": column, "norm": torch.randn(1024, generator=gen)}
    shapes = {name: tuple(w.shape) for name, w in weights.items() if name != "head"}
    moved = module.in_huge_pages(iter(weights.items()), module.reserve_bytes(shapes))
    assert moved["head"] is moved["embed"] and moved["embed"].data_ptr() != embed.data_ptr()
    for name, w in weights.items():
        assert torch.equal(moved[name], w) and moved[name].stride() == w.stride()
    region = next(r for r in mappings() if r[0] <= moved["embed"].data_ptr() < r[1])
    if "[never]" not in THP_SETTING:
        assert region[2] >= 4096  # kB of it on huge pages: at least two


LOAD_MEMORY = """
import json, sys
from pathlib import Path
import psutil
from harness.memory import own_peak_rss_bytes
from linnet_core.emit_torch import import_generated

module = import_generated(Path(sys.argv[1]))
before = psutil.Process().memory_info().rss
engine = module.Engine(Path(sys.argv[2]), rows=1, max_positions=64, device="cpu", dtype="f32", mode="eager")
print(json.dumps({"growth": own_peak_rss_bytes() - before, "token": engine.prefill(0, [5, 6, 7])}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak resident memory from /proc")
def test_loading_the_engine_holds_its_weights_about_once(tiny, tmp_path):
    """The weights go into their huge-page mapping one at a time as they are read: a fresh process loading 308 MiB of
    weights grew by 353 MiB. Reading them all first (with the checkpoint's file mapped throughout), then copying,
    grew it by 627 MiB."""
    import dataclasses

    from linnet_core.checkpoint import synthetic_checkpoint

    # ~80M parameters in f32 over 6 layers: the largest tensor (a fused gate/up) a tenth of the weights
    config = dataclasses.replace(tiny.config, vocab_size=8192, hidden_size=1024, intermediate_size=3072,
                                 num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, head_dim=None)  # fmt: skip
    checkpoint = synthetic_checkpoint("load-memory", config, "float32", cache=tmp_path)
    weights = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors"))
    [path] = write(build_decoder(config), checkpoint, tmp_path / "gen", CompileOptions())
    run = subprocess.run([sys.executable, "-c", LOAD_MEMORY, str(path), str(checkpoint)], capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    growth = json.loads(run.stdout)["growth"]
    assert growth < 1.3 * weights, f"loading {weights / 2**20:.0f} MiB of weights grew the process by {growth / 2**20:.0f} MiB"


THP_SETTING = open("/sys/kernel/mm/transparent_hugepage/enabled").read() if os.path.exists(
    "/sys/kernel/mm/transparent_hugepage/enabled") else "[never]"  # fmt: skip


def mappings() -> list[tuple[int, int, int]]:
    """This process's mappings: (start, end, kB on anonymous huge pages), from /proc/self/smaps."""
    found = []
    for line in open("/proc/self/smaps"):
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
            start, end = (int(a, 16) for a in line.split()[0].split("-"))
            found.append([start, end, 0])
        elif line.startswith("AnonHugePages:"):
            found[-1][2] = int(line.split()[1])
    return [tuple(r) for r in found]


def test_the_rope_table_is_the_same_in_every_process(module):
    """Its cos and sin are numpy's f64 ones of the f32 angles: torch's f32 cos on a multi-threaded CPU was 1.5e-4
    off for the half of a 512-position table a worker thread computed, in about one process in fifteen."""
    [inv_freq] = module.INV_FREQ
    table = module.rope_tables(inv_freq, 512, torch.float32, "cpu")
    angles = np.arange(512, dtype=np.float32)[:, None] * np.asarray(inv_freq, dtype=np.float32)
    half = len(inv_freq)
    assert np.array_equal(table[0, :, :half].numpy(), np.cos(angles.astype(np.float64)).astype(np.float32))
    assert np.array_equal(table[1, :, half:].numpy(), np.sin(angles.astype(np.float64)).astype(np.float32))
    assert np.array_equal(table[1, :, :half].numpy(), -table[1, :, half:].numpy())


def test_bad_use_is_refused(module, tiny_checkpoint, tmp_path):
    eng = engine(module, tiny_checkpoint, max_positions=64)
    with pytest.raises(ValueError, match="cannot prefill 60 tokens at 10 of row 0"):
        eng.prefill(0, list(range(60)), start=10)
    with pytest.raises(ValueError, match="of row 1"):
        eng.prefill(1, [1, 2])
    with pytest.raises(ValueError, match="cannot score 65 tokens: the cache has 64 positions"):
        eng.score(list(range(65)), 8)
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        engine(module, tiny_checkpoint, mode="fast")
    with pytest.raises(ValueError, match="CUDA graphs need a GPU"):
        engine(module, tiny_checkpoint, mode="cudagraphs")
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((tiny_checkpoint / "config.json").read_text()) | {"hidden_size": 128}
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="config.json has hidden_size=128, this module is compiled for 64"):
        engine(module, other)


def test_write_refuses_a_checkpoint_of_another_model(tiny_checkpoint, tmp_path):
    big = build_decoder(get_model("qwen2.5-0.5b").config)
    with pytest.raises(UserError, match="has shape"):
        write(big, tiny_checkpoint, tmp_path, CompileOptions())
    assert not list(tmp_path.iterdir())


def test_linnet_compile_writes_a_module_that_runs_without_linnet(tiny_checkpoint, tmp_path, reference, tiny):
    """`linnet compile`, then a fresh interpreter outside the repository imports the module alone."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "linnet_core.cli", "compile", "qwen2-tiny", "--target", "torch",
                           "--out", str(out), "--max-positions", "128"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out / 'linnet_torch_model.py'}\n"
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    script = (
        f"import sys; sys.path.insert(0, {str(out)!r}); import linnet_torch_model as m\n"
        f"engine = m.Engine()\n"  # the checkpoint it was compiled from, 128 positions
        f"tokens = [engine.prefill(0, {probe})] + [int(engine.step()[0]) for _ in range({NEW - 1})]\n"
        f"ours = [n for n in sys.modules if n.split('.')[0] in ('linnet_core', 'harness', 'runners', 'transformers')]\n"
        f"print(engine.max_positions, tokens, ours)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    expected = [reference.prefill(probe), *reference.decode(NEW - 1)]
    assert run.stdout.split(" ", 1) == ["128", f"{expected} []\n"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_cuda_graph_engine_matches_eager_on_a_gpu(module, tiny_checkpoint, tiny):
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    eager = engine(module, tiny_checkpoint, device="cuda")
    graphed = engine(module, tiny_checkpoint, device="cuda", mode="cudagraphs")
    np.testing.assert_allclose(graphed.score(probe, 24), eager.score(probe, 24), atol=1e-4)
    assert generate(graphed, 0, probe) == generate(eager, 0, probe)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_each_bucket_of_rows_replays_its_own_graph_with_the_eager_tokens_on_a_gpu(module, tiny_checkpoint, tiny):
    """Under CUDA graphs a step over a bucket of rows replays that bucket's graph; its tokens are eager's."""
    prompts = [prompt_ids(n, tiny.first_special_token, seed) for n, seed in ((30, 1), (17, 2), (45, 3), (9, 4))]
    eager = engine(module, tiny_checkpoint, device="cuda", rows=4)
    graphed = engine(module, tiny_checkpoint, device="cuda", mode="cudagraphs", rows=4)
    assert sorted(graphed.step_graphs) == [1, 2, 4]
    for row, p in enumerate(prompts):
        assert graphed.prefill(row, p) == eager.prefill(row, p)
    for n in (1, 2, 4, 2, 1, 4):
        assert graphed.step(n).tolist() == eager.step(n).tolist()
        assert graphed.start_step(n)().tolist() == eager.step(n).tolist()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("mode", ["cudagraphs", "inductor"])
def test_captured_blocks_and_prefill_graphs_give_the_eager_tokens_on_a_gpu(module, tiny_checkpoint, tiny, mode):
    """Two replayed blocks of 4 and a tail of 2; the 40-token prompt through its bucket's graph (64), twice."""
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    eager = engine(module, tiny_checkpoint, device="cuda")
    graphed = engine(module, tiny_checkpoint, device="cuda", mode=mode, block_steps=4)
    for _ in range(2):
        assert graphed.prefill(0, probe) == eager.prefill(0, probe)
        assert graphed.generate(10).tolist() == [eager.step().tolist() for _ in range(10)]
    assert list(graphed.prefill_graphs) == [64]


def test_the_engine_turns_cudnn_attention_off_for_cuda_alone(module):
    """torch 2.11 puts cuDNN's attention first on an H100 or H200, and cuDNN plans per shape; an engine on a GPU turns it
    off for its process, one on a CPU leaves torch's settings alone."""
    enabled = torch.backends.cuda.cudnn_sdp_enabled()  # off already where a GPU test made an engine in this process
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        module.without_cudnn_attention(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        module.without_cudnn_attention(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_attention_runs_fused_kernels_not_the_math_one_on_a_gpu(module, tiny_checkpoint, tiny):
    """In 16-bit on a GPU every attention the engine asks for has a fused kernel: a prompt from position 0 (causal,
    flash attention), a chunk continuing it and a decode step (masked: memory-efficient attention, heads folded),
    a batch of chunks with decode steps riding along. With the math kernel excluded, SDPA raises where it needs it.
    cuDNN's is excluded too: the engine turns it off (without_cudnn_attention), as it plans per shape."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    probe = probe_ids(tiny.first_special_token, 0, length=40)
    eng = engine(module, tiny_checkpoint, device="cuda", dtype="bf16", rows=3)
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        eng.prefill(0, probe[:24])
        eng.prefill(0, probe[24:], start=24)
        token = int(eng.step()[0])
        eng.prefill_batch([(1, probe[:7], 0), (2, probe[:30], 0), (0, [token], 41)])


def allocations(code: str) -> list[int]:
    """Element counts of the buffers that inductor's generated code allocates (C++ or Python wrapper)."""
    arrays = dict(re.findall(r"(int_array_\d+)\[\] = \{([^}]*)\}", code))
    sizes = [arrays[name] for name in re.findall(r"aoti_torch_empty_strided\(\d+, (int_array_\d+)", code)]
    sizes += re.findall(r"empty_strided_cpu\(\(([^)]*)\)", code)
    return [math.prod(int(v.strip().rstrip("L")) for v in size.split(",") if v.strip()) for size in sizes]


def test_inductor_compiles_each_graph_once_and_writes_the_cache_in_place(module, tiny_checkpoint, reference, tiny,
                                                                          monkeypatch):  # fmt: skip
    """The decode step compiles once, without graph breaks, and neither other positions, step(), score() nor
    another prompt length compile again (the prefill's length is dynamic); in the prefill's code each block is its
    kind's compile region, written once and called at every layer; the compiled step allocates nothing
    the size of a layer's cache (around an index_copy_ into a view of it, inductor copied the cache every step);
    generate() gives transformers' greedy tokens.

    The first prompt is as long as a weight (the norms' doubled weight, 2 * HIDDEN): with every size dynamic, the
    compiler gave both one symbol, pinned it to the weight's length, and compiled the prefill again for the next
    prompt length."""
    from torch._dynamo.utils import counters
    from torch._inductor.graph import GraphLowering

    probe = probe_ids(tiny.first_special_token, 0, length=2 * module.HIDDEN)
    monkeypatch.setattr(module, "MATVEC_MIN_WEIGHTS", 0)  # the tiny model's matrices in matvec_f32 too (see below)
    torch._dynamo.reset()
    counters.clear()
    codes = []  # the source of each graph inductor compiles (as torch._inductor.utils.run_and_get_code sees it)
    # compile here rather than load from the cache, so that the code is seen; a change of this setting recompiles
    with torch._inductor.config.patch(force_disable_caches=True), \
            mock.patch.object(GraphLowering, "save_output_code", codes.append):  # fmt: skip
        eng = engine(module, tiny_checkpoint, mode="inductor")
        first = eng.prefill(0, probe)
        tokens = eng.generate(NEW - 1)
        [prefill, decode] = codes
        eng.prefill(0, probe[:30])
        eng.step()
        eng.generate(5)
        eng.score(probe, 24)
    assert [first, *tokens[:, 0].tolist()] == [reference.prefill(probe), *reference.decode(NEW - 1)]
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]
    regions = re.findall(r"# subgraph: (\w+)", prefill)
    assert len(regions) == module.LAYERS, regions
    if torch.torch_version.TorchVersion(torch.__version__) >= (2, 13):  # 2.11 (the GPU image's) writes one per layer
        assert len(set(regions)) == 1, regions
    layer_cache = eng.max_positions * module.KV_HEADS * module.HEAD_DIM
    sizes = allocations(decode)
    assert sizes and max(sizes) < layer_cache, (max(sizes), layer_cache)
    # on an AVX-512 CPU the compiled f32 step calls matvec_f32 for its linears (per layer the fused qkv, the output
    # projection, gate/up and down, and the head once)
    if AVX512:
        assert decode.count("matvec_f32") >= 4 * module.LAYERS + 1


def test_a_16_bit_compiled_prefill_serves_every_prompt_length_on_a_cpu(module, tiny_checkpoint, tiny):
    """In 16 bits on a CPU, linear() multiplies a prefill's many rows in f32 and a few rows in 16 bits. As F.linear
    of a [B, T, K] input, either pinned the dynamic prompt length to the first prompt's in torch 2.13, and the
    compiled prefill failed at once (bf16 and f16 alike: cpu_16_bit_linear serves both). Now prompts below and above
    UPCAST_ROWS and a decode step compile and give eager's tokens."""
    dtype = "bf16"  # the GPU suite's
    from torch._dynamo.utils import counters

    lengths = (module.UPCAST_ROWS // 2, module.UPCAST_ROWS + 8, module.UPCAST_ROWS + 30)
    prompts = [probe_ids(tiny.first_special_token, seed, length=n) for seed, n in enumerate(lengths)]
    torch._dynamo.reset()
    counters.clear()
    eager = engine(module, tiny_checkpoint, dtype=dtype)
    compiled = engine(module, tiny_checkpoint, dtype=dtype, mode="inductor")
    for prompt in prompts:
        assert [compiled.prefill(0, prompt), *compiled.generate(3)[:, 0]] == [eager.prefill(0, prompt), *eager.generate(3)[:, 0]]
    # the prefill compiles once for a length <= UPCAST_ROWS and once above it (linear() branches there); the step once
    assert counters["stats"]["unique_graphs"] <= 3 and not counters["graph_break"]


def test_compiled_blocks_compile_each_kind_of_block_once_for_all_layers(module, tiny_checkpoint, reference, tiny):
    """What inductor runs on a GPU (compile_blocks), on a CPU: the static-window step and the bucketed prefill the
    CUDA graphs capture, with each block compiled. transformers' greedy tokens, no graph breaks, and one compile
    per kind of block for the one-token step and one for prefills of any length, however many layers."""
    from torch._dynamo.utils import counters

    probe = probe_ids(tiny.first_special_token, 0, length=40)
    torch._dynamo.reset()
    counters.clear()
    eng = engine(module, tiny_checkpoint)
    module.compile_blocks(eng.model)
    eng.decode = lambda window, n: eng.decode_step(eng.max_positions, rows=n)  # as on a GPU (Engine.__init__)
    eng.prefill_graphs = {}  # a one-row engine on a GPU has these; on a CPU captured_prefill runs as is
    eng.generate(1)  # a GPU engine captures its decode step at load, before any prefill
    eng.reset()
    first = eng.prefill(0, probe)  # bucket 64
    tokens = eng.generate(NEW - 1)
    eng.prefill(0, probe[:20])  # bucket 32
    eng.generate(2)
    assert [first, *tokens[:, 0].tolist()] == [reference.prefill(probe), *reference.decode(NEW - 1)]
    assert module.LAYERS > 1 and not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == 2 * len(module.BLOCKS)
    # linnet.serve's batched prefill (linnet serve --mode inductor on a GPU) stays eager: its layout changes every call
    batched = engine(module, tiny_checkpoint, rows=3)
    module.compile_blocks(batched.model)
    for chunks in ([(0, probe[:9], 0), (2, probe[:30], 0)], [(1, probe[:5], 0), (0, probe[9:10], 9), (2, probe[30:38], 30)]):
        assert batched.prefill_batch(chunks).tolist() == [reference.prefill(probe[: start + len(t)]) for _, t, start in chunks]
    assert counters["stats"]["unique_graphs"] == 2 * len(module.BLOCKS) and not counters["graph_break"]


def test_the_inductor_rows_trials_share_its_compile_cache(tiny, tiny_checkpoint, tmp_path, monkeypatch):
    """Each trial is a fresh process with the run's compile caches (harness.launch.compile_caches): the second loads
    what the first compiled."""
    from torch._dynamo.utils import counters

    from harness.launch import compile_caches

    for name, value in compile_caches(tmp_path / "compile-cache").items():  # what the harness gives a run's children
        monkeypatch.setenv(name, value)  # restored after the test
    probe = probe_ids(tiny.first_special_token, 0, length=40)
    seen = []
    for k in (1, 2):
        work = tmp_path / "linnet-inductor" / f"trial-{k}"
        torch._dynamo.reset()
        counters.clear()
        [path] = write(build_decoder(tiny.config), tiny_checkpoint, work / "generated", CompileOptions())
        eng = engine(import_generated(path), tiny_checkpoint, mode="inductor")
        eng.prefill(0, probe)
        eng.generate(2)
        seen.append((counters["inductor"]["fxgraph_cache_miss"], counters["inductor"]["fxgraph_cache_hit"]))
    assert seen == [(2, 0), (0, 2)]
    assert (tmp_path / "compile-cache" / "inductor").is_dir()
