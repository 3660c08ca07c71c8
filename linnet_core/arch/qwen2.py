"""Qwen2 (Qwen2 and Qwen2.5): the Llama block with biased q/k/v projections; rotate-half RoPE, RMSNorm, SwiGLU.
Defaults as transformers' Qwen2Config."""

from __future__ import annotations

from linnet_core.arch.common import standard_decoder

MODEL_TYPE = "qwen2"
HF_CLASS = "Qwen2ForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
FIXED = {"hidden_act": "silu", "attention_bias": True, "mlp_bias": False}  # q/k/v always biased, o and the MLP never
GGUF_ARCH = "QWEN2"
KERAS_HUB = ("QwenBackbone", "QwenCausalLM")


def check(hf: dict) -> None:
    if hf.get("use_sliding_window"):
        raise ValueError("Qwen2 with use_sliding_window is not supported (Linnet attends over the whole sequence)")


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": config.num_hidden_layers}  # fmt: skip


def build(config):
    return standard_decoder(config, qkv_bias=True, o_bias=False, mlp_bias=False, qk_norm=False)
