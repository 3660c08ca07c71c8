"""Gemma 3 (text): blocks of grouped-query attention and GeGLU (tanh-approximated GELU) with RMSNorms of (1 + w)
before and after each, RMS-normalised query and key heads, attention scores scaled by query_pre_attn_scalar^-1/2,
embeddings scaled by sqrt(hidden), and two kinds of layer: sliding-window attention with its own RoPE base
(rope_local_base_freq) and global attention (rope_theta), interleaved (five local to one global by default).
Defaults as transformers' Gemma3TextConfig."""

from __future__ import annotations

from linnet_core.arch.common import HF_LAYER, LAYER, global_weights, linear, weight
from linnet_core.config import ModelConfig
from linnet_core.graph import Decoder, Op

MODEL_TYPE = "gemma3_text"
HF_CLASS = "Gemma3ForCausalLM"
DEFAULTS = {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
            "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "sliding_window": 4096,
            "rope_local_base_freq": 10_000.0, "query_pre_attn_scalar": 256}  # fmt: skip
FIXED = {"mlp_bias": False, "hidden_act": "gelu_pytorch_tanh"}
GGUF_ARCH = "GEMMA3"
LLAMA_CPP_MISMATCH = (
    "llama.cpp's Gemma 3 is not within the f32 bound of transformers: on gemma3-tiny its logits are 2.5e-2 from "
    "transformers' with an f32 GGUF and KV cache (its Llama and Qwen rows: under 1e-4), and it ignores "
    "query_pre_attn_scalar and sliding-window patterns other than 5:1; the GGUF export is written"
)
KERAS_HUB = ("Gemma3Backbone", "Gemma3CausalLM")
# Gemma3CausalLM's cache build also takes image embeddings, a vision mask and vision indices (none: text only),
# and a padding mask (all true: attention is causal, so the padding after the prompt is never read)
KERAS_HUB_CACHE_ARGS = ("token_ids", None, None, "padding_mask", None)
SLIDING_WINDOW_PATTERN = 6  # transformers' default: every sixth layer is global


def check(hf: dict) -> None:
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(key) is not None:
            raise ValueError(f"Gemma 3 with {key} is not supported")
    if hf.get("use_bidirectional_attention"):
        raise ValueError("Gemma 3 with use_bidirectional_attention is not supported (Linnet decodes causally)")


def read(hf: dict) -> dict:
    """layer_types (from the older sliding_window_pattern when absent), and the two RoPE bases, wherever this
    config.json keeps them (top-level keys, or transformers 5's rope_parameters per layer type)."""
    values = {k: hf[k] for k in ("sliding_window", "query_pre_attn_scalar", "rope_local_base_freq") if hf.get(k) is not None}
    if hf.get("layer_types") is not None:
        values["layer_types"] = hf["layer_types"]
    layers = hf.get("num_hidden_layers")
    if hf.get("layer_types") is None and isinstance(layers, int):
        pattern = hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern") or SLIDING_WINDOW_PATTERN
        values["layer_types"] = tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers))
    rope = hf.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):
        full, local = rope["full_attention"], rope.get("sliding_attention") or {}
        if full.get("rope_type", "default") != "default" or local.get("rope_type", "default") != "default":
            raise ValueError("Gemma 3 with scaled RoPE is not supported")
        values["rope_theta"] = float(full.get("rope_theta", DEFAULTS["rope_theta"]))
        values["rope_local_base_freq"] = float(local.get("rope_theta", DEFAULTS["rope_local_base_freq"]))
    return values


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE, "hidden_activation": config.hidden_act, "hidden_act": None,
            "layer_types": list(config.layer_types),
            "final_logit_softcapping": None, "attn_logit_softcapping": None, "use_bidirectional_attention": False,
            "pad_token_id": 0}  # fmt: skip


def gguf_hyperparameters(config) -> dict:
    """Which layers slide, over how many positions, turning how fast; the attention scores' scale."""
    keys = {}
    if config.layer_types is not None:
        keys |= {"sliding_window": config.sliding_window,
                 "sliding_window_pattern": [t == "sliding_attention" for t in config.layer_types],
                 "rope_freq_base_swa": config.rope_local_base_freq}  # fmt: skip
    if config.query_pre_attn_scalar is not None:
        keys["attention_scale"] = config.query_pre_attn_scalar**-0.5
    return keys


def gguf_tensor(name: str, array, config):
    # llama.cpp's Gemma norms scale by the stored weight, Hugging Face's by (1 + w)
    return array + 1.0 if name.endswith("norm.weight") else array


def build(config: ModelConfig) -> Decoder:
    h, i, d = config.hidden_size, config.intermediate_size, config.head_dim
    nq, nkv, eps = config.num_attention_heads, config.num_key_value_heads, config.rms_norm_eps
    heads = {"heads": nq, "kv_heads": nkv, "head_dim": d}
    norm = {"eps": eps, "offset": 1.0}  # Gemma's RMSNorm scales by (1 + w)
    bias = config.attention_bias
    ops, weights = zip(
        linear("q", "h", "q_proj", "self_attn.q_proj", nq * d, h, bias, f"[B, T, {nq * d}]"),
        linear("k", "h", "k_proj", "self_attn.k_proj", nkv * d, h, bias, f"[B, T, {nkv * d}]"),
        linear("v", "h", "v_proj", "self_attn.v_proj", nkv * d, h, bias, f"[B, T, {nkv * d}]"),
        linear("o", "a", "o_proj", "self_attn.o_proj", h, nq * d, bias, f"[B, T, {h}]"),
        linear("g", "h", "gate_proj", "mlp.gate_proj", i, h, False, f"[B, T, {i}]"),
        linear("u", "h", "up_proj", "mlp.up_proj", i, h, False, f"[B, T, {i}]"),
        linear("d", "m", "down_proj", "mlp.down_proj", h, i, False, f"[B, T, {h}]"),
    )
    q_op, k_op, v_op, o_op, g_op, u_op, d_op = ops
    norms = {  # Linnet's name -> (Hugging Face's, width)
        "attn_norm": ("input_layernorm", h), "q_norm": ("self_attn.q_norm", d), "k_norm": ("self_attn.k_norm", d),
        "post_attn_norm": ("post_attention_layernorm", h), "mlp_norm": ("pre_feedforward_layernorm", h),
        "post_mlp_norm": ("post_feedforward_layernorm", h),
    }  # fmt: skip
    block_weights = [weight(f"{LAYER}{n}.weight", f"{HF_LAYER}{hf}.weight", width) for n, (hf, width) in norms.items()]
    block_weights += [w for ws in weights for w in ws]
    hs = f"[B, T, {h}]"

    def block(theta: float, window: int | None) -> tuple[Op, ...]:
        attention = {**heads, "scale": config.query_pre_attn_scalar**-0.5, **({"window": window} if window else {})}
        return (
            Op("rms_norm", ("h",), ("x",), ("attn_norm.weight",), hs, norm),
            q_op, k_op, v_op,
            Op("head_norm", ("qn",), ("q",), ("q_norm.weight",), f"[B, T, {nq * d}]", {**norm, "head_dim": d}),
            Op("head_norm", ("kn",), ("k",), ("k_norm.weight",), f"[B, T, {nkv * d}]", {**norm, "head_dim": d}),
            Op("rope", ("q", "k"), ("qn", "kn", "positions"), (), f"[B, T, {nq * d}], [B, T, {nkv * d}]",
               {**heads, "theta": theta, "scaling": None}),
            # causal attention over the row's cache; a sliding layer's query sees only its last `window` positions
            Op("attention", ("a",), ("q", "k", "v", "positions"), (), f"[B, T, {nq * d}]", attention),
            o_op,
            Op("rms_norm", ("o",), ("o",), ("post_attn_norm.weight",), hs, norm),
            Op("add", ("x",), ("x", "o"), (), hs),
            Op("rms_norm", ("h",), ("x",), ("mlp_norm.weight",), hs, norm),
            g_op, u_op,
            Op("gelu_mul", ("m",), ("g", "u"), (), f"[B, T, {i}]"),
            d_op,
            Op("rms_norm", ("d",), ("d",), ("post_mlp_norm.weight",), hs, norm),
            Op("add", ("x",), ("x", "d"), (), hs),
        )  # fmt: skip

    kinds = ("sliding_attention", "full_attention")
    variants = (block(config.rope_local_base_freq, config.sliding_window), block(config.rope_theta, None))
    layer_variant = tuple(kinds.index(t) for t in config.layer_types)
    head = "embed.weight" if config.tie_word_embeddings else "lm_head.weight"
    prologue = (Op("embed", ("x",), ("tokens",), ("embed.weight",), hs, {"scale": h**0.5}),)
    epilogue = (
        Op("rms_norm", ("x",), ("x",), ("norm.weight",), hs, norm),
        Op("logits", ("logits",), ("x",), (head,), f"[B, T, {config.vocab_size}]"),
        Op("argmax", ("next",), ("logits",), (), "[B]", {"at": "last"}),
    )
    return Decoder(config, global_weights(config), tuple(block_weights), prologue, variants[0], epilogue, variants,
                   layer_variant)  # fmt: skip
