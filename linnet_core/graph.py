"""The model description every Linnet emitter reads: the Qwen2 decoder as a short list of named steps.

A `Decoder` holds the config, every weight once (a tied output head reads the embedding; it is never
stored twice), and three op lists: the prologue (token embedding), one decoder block (applied to every
layer, its weights named relative to the layer) and the epilogue (final norm, logits, greedy argmax).
Emitters (PyTorch, JAX, ONNX) walk the ops in order and render each kind once, so a fix to the model is
a fix to this file, and every engine computes the same thing.

Values are named strings; shapes are written with B (rows of the batch: one per request) and T (new
positions this call: the prompt in prefill, 1 in decode). Attention reads and writes a static KV cache:
each row has its own position, so one batched decode step can serve rows at different lengths."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from linnet_core.config import ModelConfig

OpKind = Literal["embed", "rms_norm", "linear", "rope", "attention", "silu_mul", "add", "logits", "argmax"]


@dataclass(frozen=True)
class Weight:
    name: str  # Linnet's name, e.g. "layers.{layer}.q_proj.weight" for block weights
    hf_name: str  # the Hugging Face checkpoint's name, same placeholder
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """One step: out = kind(inputs, weights, **attrs)."""

    kind: OpKind
    out: tuple[str, ...]  # the values it defines (rope defines two)
    inputs: tuple[str, ...]  # the values it reads
    weights: tuple[str, ...] = ()  # weight names (relative to the layer inside the block)
    shape: str = ""  # the output's shape, for comments in emitted code, e.g. "[B, T, 896]"
    attrs: dict = field(default_factory=dict)  # eps, theta, head counts...


@dataclass(frozen=True)
class Decoder:
    config: ModelConfig
    global_weights: tuple[Weight, ...]  # embedding, final norm (and lm_head when untied)
    block_weights: tuple[Weight, ...]  # one layer's weights; names hold "{layer}"
    prologue: tuple[Op, ...]  # tokens -> x
    block: tuple[Op, ...]  # x -> x, reading and writing this layer's cache
    epilogue: tuple[Op, ...]  # x -> logits -> next token

    @property
    def head_weight(self) -> str:
        """The weight the output head multiplies by: the embedding when tied."""
        return "embed.weight" if self.config.tie_word_embeddings else "lm_head.weight"

    def weights_of_layer(self, layer: int) -> dict[str, Weight]:
        """This layer's weights by relative name ("q_proj.weight"), with real names filled in."""
        prefix = "layers.{layer}."
        return {
            w.name.removeprefix(prefix): Weight(w.name.format(layer=layer), w.hf_name.format(layer=layer), w.shape)
            for w in self.block_weights
        }

    def all_weights(self) -> list[Weight]:
        """Every stored weight once, with layer names filled in, in checkpoint order."""
        layers = [w for n in range(self.config.num_hidden_layers) for w in self.weights_of_layer(n).values()]
        return [*self.global_weights[:1], *layers, *self.global_weights[1:]]

    def hf_names(self) -> dict[str, str]:
        """Linnet name -> Hugging Face name, for every stored weight."""
        return {w.name: w.hf_name for w in self.all_weights()}


def qwen2_decoder(config: ModelConfig) -> Decoder:
    """The Qwen2 decoder: GQA with biased q/k/v, rotate-half RoPE, RMSNorm, SwiGLU, tied head."""
    h, i, v, d = config.hidden_size, config.intermediate_size, config.vocab_size, config.head_dim
    nq, nkv = config.num_attention_heads, config.num_key_value_heads
    eps = config.rms_norm_eps
    L = "layers.{layer}."  # block weight prefix, Linnet's and Hugging Face's
    HF = "model.layers.{layer}."

    def w(name, hf_name, *shape):
        return Weight(name, hf_name, tuple(shape))

    global_weights = [w("embed.weight", "model.embed_tokens.weight", v, h), w("norm.weight", "model.norm.weight", h)]
    if not config.tie_word_embeddings:
        global_weights.append(w("lm_head.weight", "lm_head.weight", v, h))
    block_weights = (
        w(L + "attn_norm.weight", HF + "input_layernorm.weight", h),
        w(L + "q_proj.weight", HF + "self_attn.q_proj.weight", nq * d, h),
        w(L + "q_proj.bias", HF + "self_attn.q_proj.bias", nq * d),
        w(L + "k_proj.weight", HF + "self_attn.k_proj.weight", nkv * d, h),
        w(L + "k_proj.bias", HF + "self_attn.k_proj.bias", nkv * d),
        w(L + "v_proj.weight", HF + "self_attn.v_proj.weight", nkv * d, h),
        w(L + "v_proj.bias", HF + "self_attn.v_proj.bias", nkv * d),
        w(L + "o_proj.weight", HF + "self_attn.o_proj.weight", h, nq * d),
        w(L + "mlp_norm.weight", HF + "post_attention_layernorm.weight", h),
        w(L + "gate_proj.weight", HF + "mlp.gate_proj.weight", i, h),
        w(L + "up_proj.weight", HF + "mlp.up_proj.weight", i, h),
        w(L + "down_proj.weight", HF + "mlp.down_proj.weight", h, i),
    )
    heads = {"heads": nq, "kv_heads": nkv, "head_dim": d}
    prologue = (Op("embed", ("x",), ("tokens",), ("embed.weight",), f"[B, T, {h}]"),)
    block = (
        Op("rms_norm", ("h",), ("x",), ("attn_norm.weight",), f"[B, T, {h}]", {"eps": eps}),
        Op("linear", ("q",), ("h",), ("q_proj.weight", "q_proj.bias"), f"[B, T, {nq * d}]"),
        Op("linear", ("k",), ("h",), ("k_proj.weight", "k_proj.bias"), f"[B, T, {nkv * d}]"),
        Op("linear", ("v",), ("h",), ("v_proj.weight", "v_proj.bias"), f"[B, T, {nkv * d}]"),
        # rotate-half RoPE at each row's positions, on q and k viewed as heads
        Op("rope", ("q", "k"), ("q", "k", "positions"), (), f"[B, T, {nq * d}], [B, T, {nkv * d}]",
           {**heads, "theta": config.rope_theta}),  # fmt: skip
        # writes k, v into this layer's cache at the positions, then attends causally over the row's cache;
        # kv heads are shared by heads // kv_heads query heads each (grouped-query attention)
        Op("attention", ("a",), ("q", "k", "v", "positions"), (), f"[B, T, {nq * d}]", heads),
        Op("linear", ("o",), ("a",), ("o_proj.weight",), f"[B, T, {h}]"),
        Op("add", ("x",), ("x", "o"), (), f"[B, T, {h}]"),
        Op("rms_norm", ("h",), ("x",), ("mlp_norm.weight",), f"[B, T, {h}]", {"eps": eps}),
        Op("linear", ("g",), ("h",), ("gate_proj.weight",), f"[B, T, {i}]"),
        Op("linear", ("u",), ("h",), ("up_proj.weight",), f"[B, T, {i}]"),
        Op("silu_mul", ("m",), ("g", "u"), (), f"[B, T, {i}]"),
        Op("linear", ("d",), ("m",), ("down_proj.weight",), f"[B, T, {h}]"),
        Op("add", ("x",), ("x", "d"), (), f"[B, T, {h}]"),
    )
    head = "embed.weight" if config.tie_word_embeddings else "lm_head.weight"
    epilogue = (
        Op("rms_norm", ("x",), ("x",), ("norm.weight",), f"[B, T, {h}]", {"eps": eps}),
        # the output head: x @ head.T, the head being the token embedding when tied
        Op("logits", ("logits",), ("x",), (head,), f"[B, T, {v}]"),
        Op("argmax", ("next",), ("logits",), (), "[B]", {"at": "last"}),
    )
    return Decoder(config, tuple(global_weights), block_weights, prologue, block, epilogue)
