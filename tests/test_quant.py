"""Weight-only int8 (linnet_core/quant.py): the rounding itself, the generated PyTorch and the ONNX graph that carry it,
the rows that run them against the reference, and the flag's hostile inputs."""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace
from unittest import mock

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file
from torch._inductor.graph import GraphLowering
from torch.utils._python_dispatch import TorchDispatchMode

from harness.accuracy import accuracy
from harness.bench import BenchSettings, run_bench
from harness.bounds import ACCURACY_BOUNDS, tolerance
from harness.registry import get_model
from harness.results import load_result
from harness.workload import PROBE_PREFILL, get_profile, probe_ids
from linnet_core.emit_onnx import INT8_BLOCK, build_model
from linnet_core.emit_torch import import_generated, load_engine, render_module, write
from linnet_core.errors import UserError
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.quant import check_quant, onnx_blocks, quantize
from linnet_core.targets import CompileOptions
from runners import RUNNERS
from runners._linnet_torch import int8_products

INT8_ROWS = ["linnet-torch-int8", "linnet-inductor-int8", "linnet-ort-int8"]
AVX512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def test_per_channel_int8_rounds_each_row_to_its_own_scale():
    w = np.array([[0.5, -1.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.5, -2.9, 0.01]], np.float32)
    q = quantize(w)
    np.testing.assert_allclose(q.scales[:, 0], [1 / 127, 1e-12 / 127, 3 / 127], rtol=1e-6)
    assert q.values.dtype == np.int8 and q.values[0].tolist() == [64, -127, 32, 0]  # 63.5 rounds to even: 64
    assert q.values[1].tolist() == [0, 0, 0, 0]  # an all-zero row stays zero, no division by zero
    assert q.values[2].tolist() == [127, 64, -123, 0]  # 63.5 -> 64, -122.77 -> -123
    # the rounding error is at most half a step of each row's scale
    assert np.all(np.abs(q.dequantize() - w) <= q.scales / 2 + 1e-7)


def test_blocks_have_a_scale_each_and_pad_the_last_one():
    w = np.random.default_rng(0).normal(size=(5, 40)).astype(np.float32)
    w[:, 32:] *= 100  # the second block's scale must not shrink the first's resolution
    q = quantize(w, group=32)
    assert q.scales.shape == (5, 2) and q.values.shape == (5, 40)
    assert np.all(np.abs(q.dequantize() - w) <= np.repeat(q.scales, 32, axis=1)[:, :40] / 2 + 1e-6)
    packed = onnx_blocks(q)
    assert packed.shape == (5, 2, 32) and packed.dtype == np.uint8
    assert (packed[:, 1, 8:] == 128).all()  # padding past K stores zero (128 is MatMulNBits' default zero point)
    np.testing.assert_array_equal(packed.reshape(5, 64)[:, :40].astype(np.int16) - 128, q.values)


@pytest.mark.parametrize("group", [None, 32])
def test_a_weight_quantized_a_block_of_rows_at_a_time_is_quantized_as_a_whole(monkeypatch, group):
    """quantize walks a weight QUANTIZE_ROWS rows at a time to bound its temporaries; rows are independent, so the
    blocks (the last one short) give what one pass over every row does, bit for bit. A bf16 input is read as float32."""
    import ml_dtypes

    from linnet_core import quant

    w = (np.random.default_rng(1).normal(size=(11, 40)) * np.geomspace(1e-3, 1e3, 11)[:, None]).astype(ml_dtypes.bfloat16)
    whole = quantize(w, group=group)
    monkeypatch.setattr(quant, "QUANTIZE_ROWS", 4)
    blocked = quantize(w, group=group)
    np.testing.assert_array_equal(blocked.values, whole.values)
    np.testing.assert_array_equal(blocked.scales, whole.scales)
    assert whole.values.dtype == np.int8 and whole.scales.dtype == np.float32 and len(set(whole.scales[:, 0])) == 11


def test_the_generated_module_quantizes_exactly_as_linnet_core_quant(tiny, tiny_checkpoint, tmp_path):
    [path] = write(build_decoder(tiny.config), tiny_checkpoint, tmp_path, CompileOptions(quant="int8"))
    module = import_generated(path)
    w = np.random.default_rng(1).normal(size=(96, 64)).astype(np.float32) * np.linspace(0.01, 10, 96)[:, None]
    q, scales = module.quantize_int8(torch.from_numpy(w))
    ours = quantize(w)
    np.testing.assert_array_equal(q.numpy(), ours.values)
    np.testing.assert_array_equal(scales.numpy(), ours.scales[:, 0])


def test_the_int8_source_reads_like_the_float_one_plus_scales(tiny, tiny_checkpoint):
    decoder = build_decoder(tiny.config)
    plain = render_module(decoder, tiny_checkpoint, CompileOptions())
    int8 = render_module(decoder, tiny_checkpoint, CompileOptions(quant="int8"))
    assert "linear_int8" not in plain and "QUANTIZED" not in plain and "_scales" not in plain
    assert "qkv = linear_int8(h, self.qkv_proj_weight, self.qkv_proj_weight_scales, self.qkv_proj_bias)" in int8
    assert 'self.qkv_proj_weight_scales = weights["qkv_proj.weight_scales"]  # [128]: per output channel' in int8
    assert "logits = linear_int8(x, self.embed_weight, self.embed_weight_scales)" in int8  # the tied head
    assert max(len(line) for line in int8.splitlines() if not line.startswith("CHECKPOINT = ")) <= 140  # the path varies
    with pytest.raises(UserError, match="offers weight-only int8"):
        render_module(decoder, tiny_checkpoint, CompileOptions(quant="int4"))


def dequantize(config, checkpoint, out):
    """The checkpoint with every matrix the int8 engine quantizes (the linear layers' and the head's, which is the
    embedding table when tied) replaced by what its integers stand for."""
    out.mkdir()
    shutil.copy(checkpoint / "config.json", out)
    tensors = load_file(str(checkpoint / "model.safetensors"))
    float_table = None if config.tie_word_embeddings else "model.embed_tokens.weight"
    save_file({k: quantize(v).dequantize() if v.ndim == 2 and k != float_table else v for k, v in tensors.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def dequantized_checkpoint(tiny, tiny_checkpoint, tmp_path_factory):
    return dequantize(tiny.config, tiny_checkpoint, tmp_path_factory.mktemp("dequantized") / "checkpoint")


@pytest.mark.parametrize("mode", ["eager", "inductor"])
def test_the_int8_engine_computes_what_its_dequantized_weights_do(tiny, tiny_checkpoint, dequantized_checkpoint, tmp_path, mode):
    """Weight-only int8 changes the weights and nothing else: the f32 engine over the dequantized weights gives the
    int8 engine's logits to f32 rounding (the product is (x . q) * s instead of x . (q * s))."""
    assert_int8_matches_dequantized(tiny, tiny_checkpoint, dequantized_checkpoint, tmp_path, mode)


@pytest.mark.parametrize("model", ["llama-tiny", "qwen3-tiny", "gemma3-tiny", "olmo2-tiny", "phi3-tiny"])
def test_each_architectures_int8_engine_computes_what_its_dequantized_weights_do(model, private_cache, tmp_path):
    """The same on each other architecture's twin (an untied head, q/k norms, Gemma's scaled embedding and (1 + w)
    norms, OLMo 2's norms after the sublayers): Gemma 3's int8 lookup once dropped the embedding's sqrt(hidden) scale."""
    entry = get_model(model)
    checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    dequantized = dequantize(entry.config, checkpoint, tmp_path / "dequantized")
    assert_int8_matches_dequantized(entry, checkpoint, dequantized, tmp_path, "eager")


def assert_int8_matches_dequantized(entry, checkpoint, dequantized, tmp_path, mode):
    decoder, probe = build_decoder(entry.config), probe_ids(entry.first_special_token, 0)
    options = CompileOptions(max_positions=512)
    reference = load_engine(decoder, dequantized, tmp_path / "f32", options).score(probe, PROBE_PREFILL)
    int8 = load_engine(decoder, checkpoint, tmp_path / "int8", CompileOptions(max_positions=512, quant="int8"), mode=mode)
    module = sys.modules[type(int8).__module__]
    # in f32 the int8 kernel's rows and product round as the reference's do: f32 rounding, bounded with depth as every
    # row is (gemma3-tiny, six layers and larger logits, goes past 1e-4)
    module.CPU_INT8_ROWS = torch.float32
    logits = int8.score(probe, PROBE_PREFILL)
    assert np.abs(logits - reference).max() <= tolerance("linnet-torch", "f32", entry.id)
    assert accuracy(reference, logits).top1_agree == 1.0
    # as the engine runs by default: in bf16, they round as bf16 does
    module.CPU_INT8_ROWS = torch.bfloat16
    logits = int8.score(probe, PROBE_PREFILL)
    assert np.abs(logits - reference).max() <= tolerance("linnet-torch", "bf16", entry.id)
    bf16 = ACCURACY_BOUNDS["bf16"]
    measured = accuracy(reference, logits)
    assert measured.kl_mean <= bf16.kl_mean and measured.top1_agree >= bf16.top1_agree, measured


@pytest.fixture(scope="module")
def int8_module(tiny, tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8")
    [path] = write(build_decoder(tiny.config), tiny_checkpoint, out, CompileOptions(quant="int8"))
    return import_generated(path)


@pytest.mark.skipif(not AVX512, reason="matvec_int8 runs on AVX-512 CPUs only")
@pytest.mark.parametrize("rows, n, k", [(1, 5, 1), (1, 37, 17), (3, 64, 100), (8, 130, 2049), (2, 7, 4867),
                                         (1, 896, 64)])
def test_int8_decode_rows_on_an_avx512_cpu_run_in_the_matvec_kernel(int8_module, rows, n, k, monkeypatch):
    """Every row length (whole 64-byte lines, the tail past them, a row shorter than one) and up to MATVEC_ROWS rows,
    against a float64 product with the dequantized weight: the kernel sums in its own order, so within f32 rounding.
    linear_int8 takes it for a decode's few f32 rows over a weight of MATVEC_MIN_WEIGHTS or more."""
    module = int8_module
    gen = torch.Generator().manual_seed(rows * n + k)
    x, bias = torch.randn(1, rows, k, generator=gen), torch.randn(n, generator=gen)
    q, scales = module.quantize_int8(torch.randn(n, k, generator=gen) * torch.linspace(0.1, 10, n)[:, None])
    assert module.load_cpu_matvec()
    for b in (None, bias):
        y = torch.ops.linnet_cpu.matvec_int8(x[0], q, scales, b)
        exact = F.linear(x[0].double(), q.double() * scales.double()[:, None], None if b is None else b.double())
        torch.testing.assert_close(y.double(), exact, atol=1e-5 * math.sqrt(k), rtol=1e-5)
        monkeypatch.setattr(module, "MATVEC_MIN_WEIGHTS", n * k)
        assert torch.equal(module.linear_int8(x, q, scales, b)[0], y)
        monkeypatch.undo()


@pytest.mark.skipif(not AVX512, reason="matmul_int8 runs on AVX-512 CPUs only")
@pytest.mark.parametrize("n, k", [(5, 1), (37, 17), (130, 2049), (7, 4867), (2100, 1000)])
def test_int8_prefill_rows_on_an_avx512_cpu_run_in_the_tiled_kernel(int8_module, n, k, monkeypatch):
    """A prefill's rows (more than UPCAST_ROWS) multiply the weight widened a tile of rows at a time: against a
    float64 product with the dequantized weight, within f32 rounding, for a weight of one tile and of several
    (TILE_BYTES is 4 MiB: 2100 x 1000 floats are two tiles of 1048 rows and one of 4), a row shorter than a cache
    line, and a tail."""
    module = int8_module
    gen = torch.Generator().manual_seed(n + k)
    many, bias = torch.randn(2, module.UPCAST_ROWS, k, generator=gen), torch.randn(n, generator=gen)
    q, scales = module.quantize_int8(torch.randn(n, k, generator=gen) * torch.linspace(0.1, 10, n)[:, None])
    assert module.load_cpu_matvec()
    for b in (None, bias):
        with OpCalls() as called:
            y = module.linear_int8(many, q, scales, b)
        assert called.names.count("linnet_cpu.matmul_int8.default") == 1, called.names
        weight = q.double() * scales.double()[:, None]
        exact = F.linear(many.double(), weight, None if b is None else b.double())
        # f32 rounding of a sum of k terms: a few units of the last place of the terms' summed magnitudes, times sqrt(k)
        bound = 4 * 2**-24 * math.sqrt(k) * (F.linear(many.double().abs(), weight.abs()) + exact.abs())
        assert ((y.double() - exact).abs() <= bound).all(), ((y.double() - exact).abs() / bound).max()
    monkeypatch.setattr(module, "cpu_matvec_loaded", False)  # where the kernels did not load: the whole weight widened
    expected = F.linear(many, q.float()) * scales + bias
    assert torch.equal(module.linear_int8(many, q, scales, bias), expected)


@pytest.mark.skipif(not AVX512, reason="the int8 kernels run on AVX-512 CPUs only")
@pytest.mark.parametrize("kernel", ["matvec_int8", "matmul_int8"])
def test_the_int8_kernels_refuse_what_they_cannot_multiply(int8_module, kernel):
    assert int8_module.load_cpu_matvec()
    product, x = getattr(torch.ops.linnet_cpu, kernel), torch.ones(1, 8)
    q, scales = torch.ones(4, 8, dtype=torch.int8), torch.ones(4)
    for rows, weight, s, why in [(torch.ones(1, 7), q, scales, "x \\[M, K\\]"), (x.double(), q, scales, "f32 x"),
                                 (x, q.float(), scales, "an int8 weight"), (x, q, scales.half(), "f32 x and scales"),
                                 (x[:, :4], q.t(), scales, "row-major"),
                                 (x, q, torch.ones(3), "scales \\[N\\]")]:  # fmt: skip
        with pytest.raises(RuntimeError, match=f"{kernel}: .*{why}"):
            product(rows, weight, s, None)


class OpCalls(TorchDispatchMode):
    """The name of every op called eagerly while it is on."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not AVX512, reason="matvec_int8 runs on AVX-512 CPUs only")
@pytest.mark.parametrize("mode", ["eager", "inductor"])
def test_the_int8_engine_in_the_matvec_kernel_computes_what_its_dequantized_weights_do(
        tiny, tiny_checkpoint, dequantized_checkpoint, tmp_path, mode):  # fmt: skip
    """The twin's matrices sit below MATVEC_MIN_WEIGHTS (a real shape's are all above it); with the bound at 0 every
    decode step's matrix runs in matvec_int8, and a prefill's in matmul_int8, eagerly and from inductor's compiled
    graphs: f32 rounding from the f32 engine over the dequantized weights, and its greedy tokens."""
    decoder, probe = build_decoder(tiny.config), probe_ids(tiny.first_special_token, 0)
    reference = load_engine(decoder, dequantized_checkpoint, tmp_path / "f32", CompileOptions(max_positions=512))
    [path] = write(decoder, tiny_checkpoint, tmp_path / "int8", CompileOptions(max_positions=512, quant="int8"))
    module = import_generated(path)
    module.MATVEC_MIN_WEIGHTS = 0
    module.CPU_INT8_ROWS = torch.float32  # the rows between MATVEC_ROWS and UPCAST_ROWS (a 32-token prefill) in f32
    codes = []  # the source of each graph inductor compiles
    with torch._inductor.config.patch(force_disable_caches=True), \
            mock.patch.object(GraphLowering, "save_output_code", codes.append):  # fmt: skip
        int8 = module.Engine(tiny_checkpoint, rows=1, max_positions=512, mode=mode)
        logits = int8.score(probe, PROBE_PREFILL)
        with OpCalls() if mode == "eager" else contextlib.nullcontext() as prefilled:  # compiling refuses the mode
            first = int8.prefill(0, probe[:64])
        with OpCalls() if mode == "eager" else contextlib.nullcontext() as called:
            tokens = [first, *int8.generate(16)[:, 0].tolist()]
    assert np.abs(logits - reference.score(probe, PROBE_PREFILL)).max() <= tolerance("linnet-torch", "f32", tiny.id)
    assert tokens == [reference.prefill(0, probe[:64]), *reference.generate(16)[:, 0].tolist()]
    if mode == "eager":  # each decode step: per layer qkv, o, gate/up and down; the head. The prefill: the same four
        assert called.names.count("linnet_cpu.matvec_int8.default") == 16 * (4 * module.LAYERS + 1), called.names
        assert prefilled.names.count("linnet_cpu.matmul_int8.default") == 4 * module.LAYERS, prefilled.names
    if mode == "inductor":
        # the kernel's calls in each compiled graph's wrapper (Python in the prefill's, C++ in the decode step's)
        calls = sorted(len(re.findall(r'matvec_int8\.default\(|"linnet_cpu::matvec_int8"', code)) for code in codes)
        assert calls[-1] == 4 * module.LAYERS + 1  # the decode step: per layer qkv, o, gate/up and down; the head
        assert set(calls[:-1]) == {1}  # each prefill: the head, over the last position alone
        # a prefill over UPCAST_ROWS (the 64-token one) calls matmul_int8 in its block region, once for each kind of
        # product every layer runs; the 32-token prefill and the decode step not at all
        assert sorted(len(re.findall(r"matmul_int8\.default\(", code)) for code in codes) == [0, 0, 4]


def test_the_onnx_graph_runs_every_matrix_through_matmulnbits(tiny):
    rng = np.random.default_rng(0)
    from linnet_core.checkpoint import tensor_shapes

    tensors = {name: rng.normal(size=shape).astype(np.float32) for name, shape in tensor_shapes(tiny.config).items()}
    model = build_model(build_decoder(tiny.config), tensors, "f32", 1, 64, quant="int8")
    kinds = [n.op_type for n in model.graph.node]
    layers = tiny.config.num_hidden_layers
    # qkv (fused), o, gate_up (fused), down, and the head
    assert kinds.count("MatMulNBits") == 4 * layers + 1 and "Gemm" not in kinds
    assert all(n.domain == "com.microsoft" for n in model.graph.node if n.op_type == "MatMulNBits")
    node = next(n for n in model.graph.node if n.op_type == "MatMulNBits")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["block_size"] == INT8_BLOCK
    initializers = {t.name: t for t in model.graph.initializer}
    assert initializers["embed.weight"].data_type == onnx.TensorProto.FLOAT  # the lookup's float table stays
    assert initializers["embed.weight.int8"].data_type == onnx.TensorProto.UINT8


@pytest.mark.parametrize("quant, where, message", [
    ("bogus", "torch", "unknown quantization 'bogus'; use one of int8"),
    ("int4", "onnx", "unknown quantization 'int4'"),
    ("", "torch", "unknown quantization ''"),
    ("int8; rm -rf /", "torch", "unknown quantization"),
])  # fmt: skip
def test_an_unknown_quantization_is_a_user_error(quant, where, message):
    with pytest.raises(UserError, match=message):
        check_quant(quant)


@pytest.mark.parametrize("args, message", [
    (["compile", "qwen2-tiny", "--target", "torch", "--out", "{tmp}/out", "--quant", "bogus"], "unknown quantization 'bogus'"),
    (["compile", "qwen2-tiny", "--target", "jax", "--out", "{tmp}/out", "--quant", "int8"], "jax has no quantized weights"),
    (["compile", "qwen2-tiny", "--target", "onnx", "--out", "{tmp}/out", "--quant", "x" * 10000], "unknown quantization"),
    (["serve", "qwen2-tiny", "--quant", "bogus"], "unknown quantization 'bogus'"),
    (["serve", "qwen2-tiny", "--backend", "xla", "--quant", "int8"], "xla has no quantized weights"),
])  # fmt: skip
def test_the_quant_flag_refuses_bad_values_in_one_line(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", *[a.format(tmp=tmp_path) for a in args]],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 1, out
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stdout
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def int8_run(tiny, tmp_path_factory, private_cache):
    runners = tuple(RUNNERS[r] for r in ["transformers", *INT8_ROWS])
    settings = BenchSettings(tiny, runners, get_profile("quick"), "f32", "cpu", None, tmp_path_factory.mktemp("results"))
    return {r.runner: r for r in load_result(run_bench(settings)).rows}


@pytest.mark.parametrize("runner", INT8_ROWS)
def test_every_int8_row_is_close_to_the_reference_in_distribution(int8_run, runner):
    """On qwen2-tiny (the trained twin) f32, text probe. Measured (results/int8-twins/): KL mean 6e-4 to 1e-3, p99
    3e-3 to 7e-3, top-1 0.965-0.984 over the three rows and two CPUs; llama.cpp q8_0 1.1e-3 to 1.2e-3, 7e-3 to 9e-3,
    0.969-0.977. Ten of the probe's 257 positions are near-ties that any rounding may flip: weights and activations
    rounded to bf16 alone agree at 0.984 (scripts/accuracy_floor.py). The bounds sit about 5x above those."""
    row = int8_run[runner]
    assert row.status == "ok", row.reason
    assert row.quant == "int8" and row.peer == "llamacpp-linnet-gguf-q8_0"
    assert row.kl_mean <= 5e-3 and row.kl_p99 <= 0.04 and row.top1_agree >= 0.94, (row.kl_mean, row.kl_p99, row.top1_agree)
    bound = ACCURACY_BOUNDS["int8"]
    assert row.kl_mean <= bound.kl_mean and row.kl_p99 <= bound.kl_p99 and row.top1_agree >= bound.top1_agree
    assert row.kl_mean > 1e-4  # it really is quantized: an f32 row is at 1e-11


@pytest.mark.parametrize("runner, decode", [("linnet-torch-int8", "torch's int8 weight-pack matmul"),
                                            ("linnet-inductor-int8", "one fused inductor pass over the int8 weight")])
def test_the_torch_int8_rows_say_what_their_products_run_in(int8_run, runner, decode):
    """The twin's matrices are too small for Linnet's CPU kernels; a real shape's rows name them instead."""
    notes = " | ".join(int8_run[runner].notes)
    assert f"decode: {decode}; prefill: the weight widened to the activations' dtype" in notes, notes
    kernels = int8_products(SimpleNamespace(cpu_matvec_loaded=True), "inductor")
    assert kernels.startswith("decode: matvec_int8") and "prefill: matmul_int8" in kernels
