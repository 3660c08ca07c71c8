"""OLMo 2: the Llama block with its norms moved after the sublayers. No norm before attention or the MLP: each
sublayer reads the residual stream itself, and its output is RMS-normalised before it is added back
(post_attention_layernorm, post_feedforward_layernorm). Queries and keys are RMS-normalised over the whole
projection (one weight of heads * head_dim values, and one of kv_heads * head_dim: not per head as Qwen3's) before
RoPE. SwiGLU, no biases by default, an untied head. Defaults as transformers' Olmo2Config."""

from __future__ import annotations

from linnet_core.arch.common import HF_LAYER, LAYER, global_weights, linear, rope_attrs, weight
from linnet_core.config import ModelConfig
from linnet_core.graph import Decoder, Op

MODEL_TYPE = "olmo2"
HF_CLASS = "Olmo2ForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False}
FIXED = {"hidden_act": "silu", "mlp_bias": False}
GGUF_ARCH = "OLMO2"  # its q/k rows stay in Hugging Face's order: llama.cpp rotates OLMo 2 NEOX-style
KERAS_HUB = None


def check(hf: dict) -> None:
    """Nothing in Olmo2Config that Linnet does not compute (RoPE scaling is checked for every architecture)."""


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE}


def build(config: ModelConfig) -> Decoder:
    h, i, v, d = config.hidden_size, config.intermediate_size, config.vocab_size, config.head_dim
    nq, nkv, eps = config.num_attention_heads, config.num_key_value_heads, config.rms_norm_eps
    bias = config.attention_bias
    heads = {"heads": nq, "kv_heads": nkv, "head_dim": d}
    hs = f"[B, T, {h}]"
    ops, weights = zip(
        linear("q", "x", "q_proj", "self_attn.q_proj", nq * d, h, bias, f"[B, T, {nq * d}]"),
        linear("k", "x", "k_proj", "self_attn.k_proj", nkv * d, h, bias, f"[B, T, {nkv * d}]"),
        linear("v", "x", "v_proj", "self_attn.v_proj", nkv * d, h, bias, f"[B, T, {nkv * d}]"),
        linear("o", "a", "o_proj", "self_attn.o_proj", h, nq * d, bias, hs),
        linear("g", "x", "gate_proj", "mlp.gate_proj", i, h, False, f"[B, T, {i}]"),
        linear("u", "x", "up_proj", "mlp.up_proj", i, h, False, f"[B, T, {i}]"),
        linear("d", "m", "down_proj", "mlp.down_proj", h, i, False, hs),
    )
    q_op, k_op, v_op, o_op, g_op, u_op, d_op = ops
    norms = {  # Linnet's name -> (Hugging Face's, width)
        "q_norm": ("self_attn.q_norm", nq * d), "k_norm": ("self_attn.k_norm", nkv * d),
        "post_attn_norm": ("post_attention_layernorm", h), "post_mlp_norm": ("post_feedforward_layernorm", h),
    }  # fmt: skip
    block_weights = [weight(f"{LAYER}{n}.weight", f"{HF_LAYER}{hf}.weight", width) for n, (hf, width) in norms.items()]
    block_weights += [w for ws in weights for w in ws]

    def norm(out: str, x: str, name: str, shape: str) -> Op:  # RMSNorm over the value's whole last dim
        return Op("rms_norm", (out,), (x,), (f"{name}.weight",), shape, {"eps": eps})

    block = (
        q_op, k_op, v_op,
        norm("qn", "q", "q_norm", f"[B, T, {nq * d}]"),
        norm("kn", "k", "k_norm", f"[B, T, {nkv * d}]"),
        Op("rope", ("q", "k"), ("qn", "kn", "positions"), (), f"[B, T, {nq * d}], [B, T, {nkv * d}]",
           {**heads, **rope_attrs(config)}),
        Op("attention", ("a",), ("q", "k", "v", "positions"), (), f"[B, T, {nq * d}]", heads),
        o_op,
        norm("o", "o", "post_attn_norm", hs),
        Op("add", ("x",), ("x", "o"), (), hs),
        g_op, u_op,
        Op("silu_mul", ("m",), ("g", "u"), (), f"[B, T, {i}]"),
        d_op,
        norm("d", "d", "post_mlp_norm", hs),
        Op("add", ("x",), ("x", "d"), (), hs),
    )  # fmt: skip
    head = "embed.weight" if config.tie_word_embeddings else "lm_head.weight"
    prologue = (Op("embed", ("x",), ("tokens",), ("embed.weight",), hs),)
    epilogue = (
        Op("rms_norm", ("x",), ("x",), ("norm.weight",), hs, {"eps": eps}),
        Op("logits", ("logits",), ("x",), (head,), f"[B, T, {v}]"),
        Op("argmax", ("next",), ("logits",), (), "[B]", {"at": "last"}),
    )
    return Decoder(config, global_weights(config), tuple(block_weights), prologue, block, epilogue)
