"""The model description every Linnet emitter reads: a decoder-only transformer as a short list of named steps.
Each architecture's module in linnet_core/arch/ builds one (`linnet_core.arch.build_decoder(config)`).

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

# rms_norm normalises the last dim; head_norm each head's head_dim values (Qwen3's q/k norm); rope's attrs carry
# its base and frequency scaling (linnet_core/rope.py turns them into the inverse frequencies every emitter uses).
# Gemma's variants: embed's attrs may scale it ("scale"), a norm's may add 1 to its weight ("offset"), attention's may
# set its score scale ("scale") and a sliding window ("window"); gelu_mul is GeGLU's gelu_tanh(gate) * up.
OpKind = Literal["embed", "rms_norm", "head_norm", "linear", "rope", "attention", "silu_mul", "gelu_mul", "add",
                 "logits", "argmax"]


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
    # When layers differ (Gemma 3's sliding-window and global layers): one op list per kind of layer, over the same
    # weights, and each layer's index into them. `block` is then variants[0].
    variants: tuple[tuple[Op, ...], ...] = ()
    layer_variant: tuple[int, ...] = ()

    def block_of(self, layer: int) -> tuple[Op, ...]:
        """The ops of layer `layer`."""
        return self.variants[self.layer_variant[layer]] if self.variants else self.block

    def blocks(self) -> tuple[tuple[Op, ...], ...]:
        """Every distinct block (one unless layers differ)."""
        return self.variants or (self.block,)

    def variant_of_layer(self) -> tuple[int, ...]:
        return self.layer_variant or (0,) * self.config.num_hidden_layers

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
