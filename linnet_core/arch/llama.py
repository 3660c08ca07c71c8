"""Llama (Llama 2/3, SmolLM2 and kin): pre-norm blocks of grouped-query attention and SwiGLU, no biases by
default, a tied or untied head, RoPE with optional llama3 frequency scaling. Defaults as transformers' LlamaConfig."""

from __future__ import annotations

from linnet_core.arch.common import standard_decoder

MODEL_TYPE = "llama"
HF_CLASS = "LlamaForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
            "mlp_bias": False}  # fmt: skip
FIXED = {"hidden_act": "silu"}
GGUF_ARCH = "LLAMA"
KERAS_HUB = ("Llama3Backbone", "Llama3CausalLM")


def check(hf: dict) -> None:
    if hf.get("pretraining_tp", 1) != 1:
        raise ValueError("Llama with pretraining_tp > 1 is not supported")


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE, "pretraining_tp": 1}


def build(config):
    bias = config.attention_bias
    return standard_decoder(config, qkv_bias=bias, o_bias=bias, mlp_bias=config.mlp_bias, qk_norm=False)
