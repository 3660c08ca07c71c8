"""Phi-3 and Phi-4-mini: the Llama block (pre-norm grouped-query attention, SwiGLU, no biases) whose checkpoint
stores q, k and v as one tensor (self_attn.qkv_proj, rows q then k then v) and gate and up as another
(mlp.gate_up_proj, rows gate then up), with partial rotary (RoPE turns the first head_dim * partial_rotary_factor
dims of each head: Phi-4-mini 96 of 128) and LongRoPE frequency scaling (short factors and an attention factor on
cos and sin, as transformers computes them for sequences up to original_max_position_embeddings; Linnet refuses a
cache longer than that, where transformers turns to the long factors). A sliding_window shorter than
max_position_embeddings limits every layer's attention (Phi-3-mini-4k: 2047); a longer one (Phi-4-mini's 262144)
changes nothing. Defaults as transformers' Phi3Config."""

from __future__ import annotations

from linnet_core.arch.common import fused_in_checkpoint, standard_decoder
from linnet_core.config import ModelConfig
from linnet_core.graph import Decoder

MODEL_TYPE = "phi3"
HF_CLASS = "Phi3ForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
FIXED = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}  # Phi3's projections carry no biases
# Linnet's GGUF export writes no Phi-3: llama.cpp's phi3 would need the rotated dims (rope dimension count) and
# LongRoPE's factors as tensors, which linnet_core/gguf.py does not write yet.
GGUF_ARCH = None
KERAS_HUB = None  # keras_hub has Phi3CausalLM but no converter from a Hugging Face checkpoint for it
# The checkpoint's fused tensors (relative to the layer) -> Linnet's projections they stack, in row order.
FUSED = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"), "mlp.gate_up_proj": ("gate_proj", "up_proj")}


def check(hf: dict) -> None:
    if hf.get("attention_bias") or hf.get("mlp_bias") or hf.get("lm_head_bias"):
        raise ValueError("Phi-3 with biases is not supported (transformers' Phi3 has none)")


def read(hf: dict) -> dict:
    """partial_rotary_factor and sliding_window, wherever this config.json keeps them (top-level keys, or
    transformers 5's rope_parameters)."""
    rope = hf.get("rope_parameters") if isinstance(hf.get("rope_parameters"), dict) else {}
    factor = hf.get("partial_rotary_factor", rope.get("partial_rotary_factor"))
    values = {"sliding_window": hf.get("sliding_window")}
    w = values["sliding_window"]
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
        raise ValueError(f"sliding_window must be a positive integer or null, not {w!r}")
    if factor is not None and factor != 1.0:
        values["partial_rotary_factor"] = factor
    return values


def hf_extras(config) -> dict:
    scaling = config.rope_scaling or {}
    original = scaling.get("original_max_position_embeddings", config.max_position_embeddings)
    return {"model_type": MODEL_TYPE, "original_max_position_embeddings": original, "sliding_window": config.sliding_window,
            "pad_token_id": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0}  # fmt: skip


def window(config: ModelConfig) -> int | None:
    """The sliding window that limits attention, or None when it is at least the model's whole length."""
    w = config.sliding_window
    return w if w is not None and w < config.max_position_embeddings else None


def build(config: ModelConfig) -> Decoder:
    decoder = standard_decoder(config, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False, window=window(config))
    return fused_in_checkpoint(decoder, FUSED)
