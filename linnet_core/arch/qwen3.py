"""Qwen3 (dense): the Llama block with an RMSNorm over each query and key head before RoPE (q_norm, k_norm), and an
explicit head_dim (Qwen3-0.6B: 16 heads of 128 over a width of 1024). Defaults as transformers' Qwen3Config."""

from __future__ import annotations

from linnet_core.arch.common import standard_decoder

MODEL_TYPE = "qwen3"
HF_CLASS = "Qwen3ForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
            "head_dim": 128}  # fmt: skip
FIXED = {"hidden_act": "silu", "mlp_bias": False}
GGUF_ARCH = "QWEN3"
KERAS_HUB = ("Qwen3Backbone", "Qwen3CausalLM")


def check(hf: dict) -> None:
    if hf.get("use_sliding_window"):
        raise ValueError("Qwen3 with use_sliding_window is not supported (Linnet attends over the whole sequence)")


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": config.num_hidden_layers}  # fmt: skip


def build(config):
    bias = config.attention_bias
    return standard_decoder(config, qkv_bias=bias, o_bias=bias, mlp_bias=False, qk_norm=True)
