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
    # When the checkpoint stores it fused with others in one tensor (Phi-3's qkv_proj, gate_up_proj): its rows
    # (start, stop) of hf_name's first dim. The parts of one tensor tile it in order.
    rows: tuple[int, int] | None = None

    @property
    def source(self) -> str:
        """Where a loader reads it: hf_name, or "hf_name[start:stop]" for rows of a fused tensor (the generated
        modules and the StableHLO manifest name their tensors so)."""
        return self.hf_name if self.rows is None else f"{self.hf_name}[{self.rows[0]}:{self.rows[1]}]"

    def take(self, tensors: dict):
        """Its values from a checkpoint's tensors by Hugging Face name."""
        tensor = tensors[self.hf_name]
        return tensor if self.rows is None else tensor[self.rows[0] : self.rows[1]]


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
            w.name.removeprefix(prefix): Weight(w.name.format(layer=layer), w.hf_name.format(layer=layer), w.shape, w.rows)
            for w in self.block_weights
        }

    def all_weights(self) -> list[Weight]:
        """Every stored weight once, with layer names filled in, in checkpoint order."""
        layers = [w for n in range(self.config.num_hidden_layers) for w in self.weights_of_layer(n).values()]
        return [*self.global_weights[:1], *layers, *self.global_weights[1:]]

    def sources(self) -> dict[str, str]:
        """Linnet name -> where it is read from (Weight.source), for every stored weight."""
        return {w.name: w.source for w in self.all_weights()}

    def checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of the Hugging Face checkpoint by name, a fused one once, its shape its parts' stacked."""
        shapes: dict[str, tuple[int, ...]] = {}
        for w in self.all_weights():
            if w.rows is None:
                shapes[w.hf_name] = w.shape
                continue
            start = shapes.get(w.hf_name, (0,))[0]
            assert w.rows == (start, start + w.shape[0]), f"{w.name}: rows {w.rows} do not follow the parts before"
            shapes[w.hf_name] = (w.rows[1], *w.shape[1:])
        return shapes
