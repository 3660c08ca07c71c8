"""Parallel projections (linnet_core.fuse): one pass finds the linears that can share a matmul and names them once,
and the PyTorch and JAX emitters both render them under that name."""

from __future__ import annotations

from linnet_core.arch import build_decoder
from linnet_core.emit_jax import emit_module
from linnet_core.emit_torch import fuse_linears
from linnet_core.fuse import Fused, parallel_linears
from linnet_core.graph import Op
from linnet_core.models import get_model


def fused_of(model: str) -> list[Fused]:
    return [item for item in parallel_linears(build_decoder(get_model(model).config).block) if isinstance(item, Fused)]


def test_qkv_and_gate_up_are_found_in_each_architecture():
    for model in ("qwen2-tiny", "llama-tiny", "qwen3-tiny", "gemma3-tiny"):
        qkv, gate_up = fused_of(model)
        assert (qkv.name, qkv.output, gate_up.name, gate_up.output) == ("qkv_proj", "qkv", "gate_up_proj", "gate_up")
        assert [op.out[0] for op in qkv.ops] == ["q", "k", "v"] and [op.out[0] for op in gate_up.ops] == ["g", "u"]
        assert gate_up.weights == {"gate_up_proj.weight": ("gate_proj.weight", "up_proj.weight")}
    [qkv, _] = fused_of("qwen2-tiny")  # biased q/k/v: the biases fuse alike
    assert qkv.weights == {"qkv_proj.weight": ("q_proj.weight", "k_proj.weight", "v_proj.weight"),
                           "qkv_proj.bias": ("q_proj.bias", "k_proj.bias", "v_proj.bias")}  # fmt: skip


def test_only_consecutive_linears_of_one_input_and_one_bias_kind_fuse():
    def linear(out, x, proj, bias=False):
        return Op("linear", (out,), (x,), (f"{proj}.weight", *([f"{proj}.bias"] if bias else [])))

    add = Op("add", ("z",), ("x", "y"))
    ops = [linear("a", "h", "a_proj", bias=True), linear("b", "h", "b_proj", bias=True), linear("c", "h", "c_proj"),
           linear("d", "x", "d_proj"), add, linear("e", "x", "e_proj")]  # fmt: skip
    items = parallel_linears(ops)
    assert [type(i).__name__ for i in items] == ["Fused", "Op", "Op", "Op", "Op"]
    assert items[0].name == "ab_proj" and items[0].ops == tuple(ops[:2])
    assert items[1:] == ops[2:]


def test_both_emitters_use_the_one_naming():
    decoder = build_decoder(get_model("qwen2-tiny").config)
    shapes = {w.name.removeprefix("layers.{layer}."): w.shape for w in decoder.block_weights}
    _, torch_fused = fuse_linears(decoder.block, shapes)
    [qkv, gate_up] = fused_of("qwen2-tiny")
    assert torch_fused == {name: list(parts) for item in (qkv, gate_up) for name, parts in item.weights.items()}
    source = emit_module(decoder)
    assert all(f'"{name}"' in source for name in torch_fused)
    assert "q_proj+k_proj" not in source
