"""The decoder block most architectures share (Llama's): pre-norm grouped-query attention with rotate-half RoPE,
then a pre-norm SwiGLU MLP, each added back to the residual stream; a final RMSNorm and the output head. The
architecture modules choose its options: which projections carry biases, whether query and key heads are
RMS-normalised before RoPE (Qwen3), a sliding window, and which weights the checkpoint stores fused (Phi-3)."""

from __future__ import annotations

import dataclasses

from linnet_core.config import ModelConfig
from linnet_core.graph import Decoder, Op, Weight

LAYER = "layers.{layer}."  # block weight prefix, Linnet's
HF_LAYER = "model.layers.{layer}."  # and Hugging Face's


def weight(name: str, hf_name: str, *shape: int) -> Weight:
    return Weight(name, hf_name, tuple(shape))


def global_weights(config: ModelConfig) -> tuple[Weight, ...]:
    """The embedding and final norm, and the output head when it is not tied to the embedding."""
    h, v = config.hidden_size, config.vocab_size
    weights = [weight("embed.weight", "model.embed_tokens.weight", v, h), weight("norm.weight", "model.norm.weight", h)]
    if not config.tie_word_embeddings:
        weights.append(weight("lm_head.weight", "lm_head.weight", v, h))
    return tuple(weights)


def linear(out: str, x: str, proj: str, hf_proj: str, n_out: int, n_in: int, bias: bool, shape: str):
    """(the linear op, its weights): out = x @ W.T (+ b); W [n_out, n_in], stored as the checkpoint names it."""
    weights = [weight(f"{LAYER}{proj}.weight", f"{HF_LAYER}{hf_proj}.weight", n_out, n_in)]
    if bias:
        weights.append(weight(f"{LAYER}{proj}.bias", f"{HF_LAYER}{hf_proj}.bias", n_out))
    names = tuple(w.name.removeprefix(LAYER) for w in weights)
    return Op("linear", (out,), (x,), names, shape), weights


def rope_attrs(config: ModelConfig) -> dict:
    """What a rope op needs besides the heads: its base and frequency scaling, and the dims it turns when fewer
    than the head's (partial rotary)."""
    partial = {"rotary_dim": config.rotary_dim} if config.rotary_dim < config.head_dim else {}
    return {"theta": config.rope_theta, "scaling": config.rope_scaling, **partial}


def fused_in_checkpoint(decoder: Decoder, fused: dict[str, tuple[str, ...]]) -> Decoder:
    """The decoder with some block weights read as rows of one checkpoint tensor: fused maps the checkpoint's
    tensor (relative to the layer, "self_attn.qkv_proj") to Linnet's projections it stacks, in order ("q_proj",
    "k_proj", "v_proj"), each of its .weight (and .bias) rows in turn."""
    by_name = {w.name: w for w in decoder.block_weights}
    replaced = {}
    for tensor, parts in fused.items():
        for suffix in ("weight", "bias"):
            names = [f"{LAYER}{p}.{suffix}" for p in parts]
            if not all(n in by_name for n in names):
                continue
            start = 0
            for n in names:
                rows = by_name[n].shape[0]
                replaced[n] = dataclasses.replace(by_name[n], hf_name=f"{HF_LAYER}{tensor}.{suffix}", rows=(start, start + rows))
                start += rows
    weights = tuple(replaced.get(w.name, w) for w in decoder.block_weights)
    return dataclasses.replace(decoder, block_weights=weights)


def standard_decoder(config: ModelConfig, *, qkv_bias: bool, o_bias: bool, mlp_bias: bool, qk_norm: bool,
                     window: int | None = None) -> Decoder:  # fmt: skip
    """window: every layer's query sees only its last `window` positions (None: all, causally)."""
    h, i, v, d = config.hidden_size, config.intermediate_size, config.vocab_size, config.head_dim
    nq, nkv, eps = config.num_attention_heads, config.num_key_value_heads, config.rms_norm_eps
    heads = {"heads": nq, "kv_heads": nkv, "head_dim": d}
    block_weights: list[Weight] = []

    def add(op_and_weights):
        op, weights = op_and_weights
        block_weights.extend(weights)
        return op

    def norm(out, x, name, hf_name, width=h, shape=f"[B, T, {h}]", **attrs):
        block_weights.append(weight(f"{LAYER}{name}.weight", f"{HF_LAYER}{hf_name}.weight", width))
        kind = "head_norm" if "head_dim" in attrs else "rms_norm"
        return Op(kind, (out,), (x,), (f"{name}.weight",), shape, {"eps": eps, **attrs})

    q, k = ("qn", "kn") if qk_norm else ("q", "k")
    block = [
        norm("h", "x", "attn_norm", "input_layernorm"),
        add(linear("q", "h", "q_proj", "self_attn.q_proj", nq * d, h, qkv_bias, f"[B, T, {nq * d}]")),
        add(linear("k", "h", "k_proj", "self_attn.k_proj", nkv * d, h, qkv_bias, f"[B, T, {nkv * d}]")),
        add(linear("v", "h", "v_proj", "self_attn.v_proj", nkv * d, h, qkv_bias, f"[B, T, {nkv * d}]")),
    ]
    if qk_norm:  # RMSNorm over each head's D values, one weight [D] shared by the heads
        block += [
            norm("qn", "q", "q_norm", "self_attn.q_norm", d, f"[B, T, {nq * d}]", head_dim=d),
            norm("kn", "k", "k_norm", "self_attn.k_norm", d, f"[B, T, {nkv * d}]", head_dim=d),
        ]
    block += [
        # rotate-half RoPE at each row's positions, on q and k viewed as heads
        Op("rope", ("q", "k"), (q, k, "positions"), (), f"[B, T, {nq * d}], [B, T, {nkv * d}]",
           {**heads, **rope_attrs(config)}),  # fmt: skip
        # writes k, v into this layer's cache at the positions, then attends causally over the row's cache;
        # kv heads are shared by heads // kv_heads query heads each (grouped-query attention)
        Op("attention", ("a",), ("q", "k", "v", "positions"), (), f"[B, T, {nq * d}]",
           {**heads, **({"window": window} if window else {})}),  # fmt: skip
        add(linear("o", "a", "o_proj", "self_attn.o_proj", h, nq * d, o_bias, f"[B, T, {h}]")),
        Op("add", ("x",), ("x", "o"), (), f"[B, T, {h}]"),
        norm("h", "x", "mlp_norm", "post_attention_layernorm"),
        add(linear("g", "h", "gate_proj", "mlp.gate_proj", i, h, mlp_bias, f"[B, T, {i}]")),
        add(linear("u", "h", "up_proj", "mlp.up_proj", i, h, mlp_bias, f"[B, T, {i}]")),
        Op("silu_mul", ("m",), ("g", "u"), (), f"[B, T, {i}]"),
        add(linear("d", "m", "down_proj", "mlp.down_proj", h, i, mlp_bias, f"[B, T, {h}]")),
        Op("add", ("x",), ("x", "d"), (), f"[B, T, {h}]"),
    ]
    head = "embed.weight" if config.tie_word_embeddings else "lm_head.weight"
    prologue = (Op("embed", ("x",), ("tokens",), ("embed.weight",), f"[B, T, {h}]"),)
    epilogue = (
        Op("rms_norm", ("x",), ("x",), ("norm.weight",), f"[B, T, {h}]", {"eps": eps}),
        # the output head: x @ head.T, the head being the token embedding when tied
        Op("logits", ("logits",), ("x",), (head,), f"[B, T, {v}]"),
        Op("argmax", ("next",), ("logits",), (), "[B]", {"at": "last"}),
    )
    return Decoder(config, global_weights(config), tuple(block_weights), prologue, tuple(block), epilogue)
