"""Llama (Llama 2/3, SmolLM2 and kin): pre-norm blocks of grouped-query attention and SwiGLU, no biases by
default, a tied or untied head, RoPE with optional llama3 frequency scaling. Defaults as transformers' LlamaConfig."""

from __future__ import annotations

from linnet_core.arch.common import standard_decoder
from linnet_core.rope import inverse_frequencies

MODEL_TYPE = "llama"
HF_CLASS = "LlamaForCausalLM"
DEFAULTS = {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
            "mlp_bias": False}  # fmt: skip
FIXED = {"hidden_act": "silu"}
GGUF_ARCH = "LLAMA"
GGUF_PRE_TOKENIZER = "llama-bpe"
KERAS_HUB = ("Llama3Backbone", "Llama3CausalLM")


def check(hf: dict) -> None:
    if hf.get("pretraining_tp", 1) != 1:
        raise ValueError("Llama with pretraining_tp > 1 is not supported")


def hf_extras(config) -> dict:
    return {"model_type": MODEL_TYPE, "pretraining_tp": 1}


def build(config):
    bias = config.attention_bias
    return standard_decoder(config, qkv_bias=bias, o_bias=bias, mlp_bias=config.mlp_bias, qk_norm=False)


# llama.cpp's `llama` rotates adjacent pairs of dims (2i with 2i + 1) where Hugging Face's Llama rotates halves (i
# with i + D/2): its q/k rows are permuted as llama.cpp's own converter does, and Llama 3's frequency scaling
# travels as the rope_freqs tensor.


def gguf_tensor(name: str, array, config):
    if ".self_attn.q_proj." in name:
        return interleave_rope_rows(array, config.num_attention_heads)
    if ".self_attn.k_proj." in name:
        return interleave_rope_rows(array, config.num_key_value_heads)
    return array


def gguf_extra_tensors(config) -> dict:
    return {"ROPE_FREQS": rope_divisors(config)} if config.rope_scaling else {}


def interleave_rope_rows(data, heads: int):
    """q or k projection rows (weight [heads * D, in] or bias [heads * D]) reordered per head from Hugging Face's
    halves (dim i pairs with i + D/2) to llama.cpp's adjacent pairs (2i with 2i + 1): llama.cpp's converter's
    permute."""
    return data.reshape(heads, 2, data.shape[0] // heads // 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape)


def rope_divisors(config):
    """llama.cpp's rope_freqs: per pair of dims, what its plain RoPE frequency is divided by (Llama 3 scaling)."""
    plain = inverse_frequencies(config.head_dim, config.rope_theta)
    return (plain / inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)).astype("float32")
