"""The ONNX emitter: Linnet's model description rendered node by node with onnx.helper into one ONNX graph that
serves prefill and decode alike, with its static KV cache as inputs and outputs (the `onnx` compile target).

One graph, two shapes: prefill runs it with B = 1 batch entry and T = the prompt's tokens, decode with B = every
cache row and T = 1, so one session loads the weights once. Its inputs and outputs:

    tokens                      int64 [B, T]            token ids
    positions                   int64 [B, T]            their positions in their rows
    past_key_values.{l}.key     dtype [B, KV, P, D]     layer l's cached keys of the B rows (and .value)
  ->
    next_tokens                 int64 [B, 1]            greedy argmax at the last position: the next step's tokens
    next_positions              int64 [B, 1]            the last position + 1: the next step's positions
    logits                      f32   [B, V]            the last position's logits (read only when scoring)
    present.{l}.key             dtype [B, KV, P, D]     the same cache with this call's keys written in (and .value)

Nothing grows or is concatenated onto the cache: each layer writes its new keys and values at their positions and
attends over its row's positions up to the query's (stale entries of an earlier sequence in the row are never
read). Each `present` is meant to be bound to the same memory as its `past` (linnet_core/ort_engine.py does): a call
then writes only its new entries. Which B rows a call reads is the caller's choice of memory, so the graph has no
row input. Parallel linears (q/k/v, gate/up: linnet_core.fuse) are one MatMul over their weights concatenated into one
initializer ("qkv_proj.weight"), then a Split.

Attention takes one of two forms (CompileOptions.fused_attention):
- fused: ONNX Runtime's RotaryEmbedding and GroupQueryAttention contrib ops, three nodes a layer where the plain
  form has about thirty. Their CPU kernels take f32 and f16; CUDA's GroupQueryAttention only 16-bit; TensorRT
  neither. ONNX Runtime's GroupQueryAttention reads the cache sharing its past and present buffers.
- plain: standard ONNX operators only (every provider): ScatterElements writes the new entries, a MatMul against all
  P positions, a mask of positions <= the query's, Softmax, MatMul.

The tied embedding is one initializer, read by the prologue's Gather and by the head's Gemm (transB). Values are
[B, T, ...] throughout and every Reshape uses only 0 (keep) and -1 (infer), so the graph has no Shape nodes:
everything can stay on a GPU (and be captured as a CUDA graph)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Mapping

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

from linnet_core.checkpoint import LazyWeights, numpy_on_small_pages
from linnet_core.fuse import Fused, parallel_linears
from linnet_core.graph import Decoder, Op
from linnet_core.quant import onnx_blocks, quantize
from linnet_core.rope import check_positions, rotation
from linnet_core.targets import CompileOptions

OPSET = 21  # ONNX Runtime >= 1.18 and TensorRT 10 read it
IR_VERSION = 10
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"  # external data: the 0.5B f32 weights exceed protobuf's 2 GB limit
# Weights of at least this many bytes go to DATA_FILE (write_onnx); smaller ones (a tiny model's norm scales) stay in
# model.onnx with the graph's constants, as onnx.save_model's size_threshold would place them.
EXTERNAL_BYTES = 1024
# Each external tensor starts on a multiple of this (mmap's allocation granularity), as onnx's own writer aligns
# large tensors, so that a runtime may map it in place.
EXTERNAL_ALIGN = 65536

# Linnet dtype name -> (ONNX element type, numpy dtype)
DTYPES = {
    "f32": (TensorProto.FLOAT, np.dtype(np.float32)),
    "f16": (TensorProto.FLOAT16, np.dtype(np.float16)),
    "bf16": (TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16)),
}
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
# Weight-only int8 (--quant int8) runs ONNX Runtime's MatMulNBits contrib op: 8-bit weights in blocks of this many
# inputs, one scale each. Its CPU kernel for 8-bit weights is fast only at accuracy level 4, which rounds each
# block of activations to int8 too (as llama.cpp's q8_0 does, also in blocks of 32): at level 0 (float activations)
# it dequantizes as it goes, measured ~10x slower than the f32 MatMul on Qwen2.5-0.5B's head on this CPU.
INT8_BLOCK = 32
INT8_ACCURACY_LEVEL = 4
CONTRIB = "com.microsoft"
KV = ("key", "value")


def past_name(layer: int, kv: str) -> str:
    """The graph input of layer `layer`'s cached keys ("key") or values ("value")."""
    return f"past_key_values.{layer}.{kv}"


def present_name(layer: int, kv: str) -> str:
    """The graph output of the same cache with this call's entries written in."""
    return f"present.{layer}.{kv}"


class GraphBuilder:
    """The nodes and initializers of one graph. Values are named `<scope><name>` ("layers.3.scores"), made unique."""

    def __init__(self, data: BinaryIO | None = None):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self.scope = ""
        self.taken: set[str] = set()
        self.data = data  # DATA_FILE open for writing: weights are written there as they are made

    def fresh(self, name: str) -> str:
        name, n = self.scope + name, 1
        candidate = name
        while candidate in self.taken:
            n += 1
            candidate = f"{name}.{n}"
        self.taken.add(candidate)
        return candidate

    def op(
        self, op_type: str, *inputs: str, name: str | None = None, out: str | None = None, doc: str = "", **attrs
    ) -> str:
        """Adds one node; returns its output (named `out` exactly, or `name` in the current scope)."""
        output = out or self.fresh(name or op_type.lower())
        return self.node(op_type, inputs, (output,), doc, **attrs)[0]

    def node(self, op_type: str, inputs, outputs: tuple[str, ...], doc: str = "", **attrs) -> tuple[str, ...]:
        """Adds one node with outputs named exactly `outputs`; returns them."""
        self.taken.update(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=outputs[0], doc_string=doc, **attrs))
        return outputs

    def tensor(self, name: str, array: np.ndarray, elem_type: int, doc: str = "") -> str:
        """A constant of the graph (shapes, RoPE tables, scales) from an array already in its ONNX dtype, kept inside
        model.onnx; added once per name, and a second call under a name must bring the same values."""
        array = np.asarray(array, order="C")  # not ascontiguousarray, which makes a scalar [1]
        if name in self.initializers:
            t = self.initializers[name]
            assert t.raw_data == array.tobytes() and list(t.dims) == list(array.shape), name
            return name
        t = TensorProto(name=name, data_type=elem_type, dims=array.shape, doc_string=doc, raw_data=array.tobytes())
        return self.add(t)

    def weight(self, name: str, array: np.ndarray, elem_type: int, doc: str = "") -> str:
        """A checkpoint weight from an array already in its ONNX dtype, made once: appended to the data file (when
        the builder writes one) at an aligned offset, the initializer recording where and holding no bytes itself.
        Written as they are made, the weights are never all in memory at once, and onnx.helper's copies of every
        initializer (into the graph, then into the model) copy names and offsets, not weights."""
        assert name not in self.initializers, f"{name} is made twice"
        array = np.asarray(array, order="C")
        t = TensorProto(name=name, data_type=elem_type, dims=array.shape, doc_string=doc)
        if self.data is None or array.nbytes < EXTERNAL_BYTES:
            t.raw_data = array.tobytes()
            return self.add(t)
        offset = -(-self.data.tell() // EXTERNAL_ALIGN) * EXTERNAL_ALIGN
        self.data.seek(offset)
        self.data.write(array.reshape(-1).view(np.uint8))
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", DATA_FILE), ("offset", offset), ("length", array.nbytes)):
            t.external_data.add(key=key, value=str(value))
        return self.add(t)

    def add(self, t: TensorProto) -> str:
        self.initializers[t.name] = t
        self.taken.add(t.name)
        return t.name

    def const(self, value, dtype=np.int64, name: str = "") -> str:
        """A small constant (shapes, axes, indices, eps), named by its value."""
        array = np.asarray(value, dtype=dtype)
        elem = {np.dtype(np.int64): I64, np.dtype(np.float32): F32}[array.dtype]
        label = name or "_".join(str(v) for v in array.ravel()[:8]).replace("-", "m")
        shape = "x".join(map(str, array.shape)) or "scalar"
        return self.tensor(f"const.{array.dtype.name}.{shape}.{label}", array, elem)

    def split(self, x: str, sizes: tuple[int, ...], names: tuple[str, ...], doc: str = "") -> tuple[str, ...]:
        """x split along its last dim into parts of `sizes`, named `names` in the current scope."""
        outputs = [self.fresh(n) for n in names]
        self.nodes.append(helper.make_node("Split", [x, self.const(list(sizes))], outputs, name=f"{outputs[0]}_split",
                                           doc_string=doc, axis=-1))  # fmt: skip
        return tuple(outputs)


class OnnxEmitter:
    """Renders a Decoder as one ONNX model in one compute dtype, over a cache of `rows` x `max_positions`."""

    def __init__(self, decoder: Decoder, dtype: str, rows: int, max_positions: int, quant: str | None = None,
                 fused_attention: bool = False, data: BinaryIO | None = None):  # fmt: skip
        assert dtype in DTYPES, dtype
        assert quant in (None, "int8"), quant
        self.quant, self.fused_attention = quant, fused_attention
        self.decoder, self.config = decoder, decoder.config
        self.dtype, (self.elem, self.np_dtype) = dtype, DTYPES[dtype]
        self.rows, self.max_positions = rows, max_positions
        c = self.config
        for ops in decoder.blocks():
            check_positions(next(op for op in ops if op.kind == "rope").attrs, max_positions)
        self.layer_cache_shape = ["B", c.num_key_value_heads, max_positions, c.head_dim]
        self.g = GraphBuilder(data)
        # With contrib ops allowed (f32): a residual add and the RMSNorm that reads it become one
        # SkipSimplifiedLayerNormalization node; an add waits here (a, b, its output's name) until the next op shows
        # whether it fuses.
        self.fuse_residual_norms = fused_attention and dtype == "f32"
        self.pending_add: tuple[str, str, str, str] | None = None

    # ---- the whole graph ---------------------------------------------------------------------------------

    def build(self, tensors: Mapping[str, np.ndarray]) -> onnx.ModelProto:
        """tensors: the checkpoint's arrays by Hugging Face name (any float dtype), each read once, when its
        initializer is made."""
        self.tensors, self.stored = tensors, {w.name: w for w in self.decoder.all_weights()}
        self.parts: dict[str, list[str]] = {}  # a fused weight's name -> the weights it concatenates
        env = {"tokens": "tokens", "positions": "positions"}
        self.render(self.decoder.prologue, env, {w.name: w.name for w in self.decoder.global_weights})
        for layer in range(self.config.num_hidden_layers):
            self.layer, self.g.scope = layer, f"layers.{layer}."
            names = {rel: w.name for rel, w in self.decoder.weights_of_layer(layer).items()}
            self.render(self.decoder.block_of(layer), env, names)
        self.g.scope = ""
        # The epilogue's argmax is at the last position ("at": "last"): only that position needs the final norm
        # and the head. x [B, T, H] -> [B, H]
        self.flush_add()
        env["x"] = self.g.op("Gather", env["x"], self.g.const(-1), axis=1, name="x_last")
        self.render(self.decoder.epilogue, env, {w.name: w.name for w in self.decoder.global_weights})
        last = self.g.op(
            "Slice", "positions", self.g.const([-1]), self.g.const([2**62]), self.g.const([1]), name="last_position"
        )
        self.g.op("Add", last, self.g.const([[1]]), out="next_positions", doc="[B, 1]")
        self.flush_add()
        return self.model()

    def render(self, ops: tuple[Op, ...], env: dict[str, str], weight_names: dict[str, str]) -> None:
        """Each op reads env's values and its weights, and (re)defines its outputs in env; parallel linears run as
        one."""
        for item in parallel_linears(ops):
            if self.pending_add and (isinstance(item, Fused) or not self.fuses_with_pending_add(item, env)):
                self.flush_add()
            if isinstance(item, Fused):
                env.update(self.fused_linear(item, env, weight_names))
                continue
            op = item
            outs = getattr(self, op.kind)(op, *(env[i] for i in op.inputs), *(weight_names[w] for w in op.weights))
            env.update(zip(op.out, outs if isinstance(outs, tuple) else (outs,)))

    def fused_linear(self, fused: Fused, env: dict[str, str], weight_names: dict[str, str]) -> dict[str, str]:
        """One MatMul over the fused weight (+ its bias), split into the linears' outputs."""
        names = []
        for name, parts in fused.weights.items():  # "qkv_proj.weight" -> "layers.3.qkv_proj.weight", and its parts
            prefix = weight_names[parts[0]].removesuffix(parts[0])
            names.append(prefix + name)
            self.parts[names[-1]] = [weight_names[p] for p in parts]
        ops = fused.ops
        joint = Op("linear", (fused.output,), ops[0].inputs, tuple(fused.weights), ", ".join(op.shape for op in ops))
        y = self.linear(joint, env[ops[0].inputs[0]], *names)
        sizes = tuple(self.stored[part].shape[0] for part in self.parts[names[0]])
        outs = tuple(op.out[0] for op in ops)
        return dict(zip(outs, self.g.split(y, sizes, outs, joint.shape)))

    def model(self) -> onnx.ModelProto:
        c, dt = self.config, self.elem
        layers = range(c.num_hidden_layers)
        inputs = [
            helper.make_tensor_value_info("tokens", I64, ["B", "T"]),
            helper.make_tensor_value_info("positions", I64, ["B", "T"]),
            *(helper.make_tensor_value_info(past_name(n, kv), dt, self.layer_cache_shape) for n in layers for kv in KV),
        ]
        outputs = [
            helper.make_tensor_value_info("next_tokens", I64, ["B", 1]),
            helper.make_tensor_value_info("next_positions", I64, ["B", 1]),
            helper.make_tensor_value_info("logits", F32, ["B", c.vocab_size]),
            *(helper.make_tensor_value_info(present_name(n, kv), dt, self.layer_cache_shape) for n in layers for kv in KV),
        ]
        graph = helper.make_graph(self.g.nodes, "linnet_decoder", inputs, outputs, list(self.g.initializers.values()))
        contrib = self.quant or self.fused_attention
        opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(CONTRIB, 1)] if contrib else [])
        model = helper.make_model(
            graph, opset_imports=opsets, ir_version=IR_VERSION, producer_name="linnet",
            doc_string=f"Linnet {self.dtype} decoder: one graph for prefill (B=1, T=prompt) and decode (B=rows, T=1)",
        )  # fmt: skip
        helper.set_model_props(model, {
            "linnet.dtype": self.dtype,
            "linnet.rows": str(self.rows),
            "linnet.max_positions": str(self.max_positions),
            "linnet.quant": self.quant or "none",
            "linnet.attention": "fused" if self.fused_attention else "plain",
            "linnet.cache_layout": "per layer and k/v: rows, kv_heads, positions, head_dim",
        })  # fmt: skip
        return model

    # ---- weights and dtypes --------------------------------------------------------------------------------

    def weight(self, name: str, transpose: bool = False) -> str:
        """The initializer of a Linnet weight in the compute dtype, created on first use (so each is stored once);
        linear weights are stored transposed, [in, out], for MatMul."""
        doc = "stored transposed: [in, out]" if transpose else ""
        if name in self.g.initializers:
            assert self.g.initializers[name].doc_string == doc, f"{name} is read in two layouts"
            return name
        array = self.array(name).astype(np.float32, copy=False).astype(self.np_dtype, copy=False)
        return self.g.weight(name, array.T if transpose else array, self.elem, doc)

    def array(self, name: str) -> np.ndarray:
        """A Linnet weight's checkpoint array; a fused weight's parts concatenated along their output dim, each
        checkpoint tensor read once (Phi-3's q, k and v are rows of one)."""
        parts = [self.stored[part] for part in self.parts.get(name, [name])]
        tensors = {part.hf_name: self.tensors[part.hf_name] for part in parts}
        arrays = [np.asarray(part.take(tensors)) for part in parts]
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)  # one: no copy

    def int8_weight(self, name: str) -> tuple[str, str, int, int]:
        """A Linnet weight [N, K] as MatMulNBits' inputs, created on first use: its int8 blocks (linnet_core.quant)
        and their scales [N * blocks] in the compute dtype. Returns (blocks, scales, N, K)."""
        array = self.array(name)
        n, k = array.shape
        blocks, scales = f"{name}.int8", f"{name}.scales"
        if blocks not in self.g.initializers:
            q = quantize(array, bits=8, group=INT8_BLOCK)
            self.g.weight(blocks, onnx_blocks(q), TensorProto.UINT8, f"int8 + 128 in blocks of {INT8_BLOCK}: [out, blocks, {INT8_BLOCK}]")
            self.g.weight(scales, q.scales.reshape(-1).astype(self.np_dtype), self.elem, "one per block, [out * blocks]")
        return blocks, scales, n, k

    def matmul_int8(self, x: str, weight: str, name: str, doc: str) -> str:
        """x [..., K] @ weight.T -> [..., N] with the weight in int8 blocks (MatMulNBits, ONNX Runtime's contrib op)."""
        blocks, scales, n, k = self.int8_weight(weight)
        return self.g.op("MatMulNBits", x, blocks, scales, name=name, doc=doc, domain=CONTRIB, K=k, N=n, bits=8,
                         block_size=INT8_BLOCK, accuracy_level=INT8_ACCURACY_LEVEL)  # fmt: skip

    def cast(self, x: str, elem: int, name: str) -> str:
        """x cast to elem; nothing when it already is (the f32 graph has no casts)."""
        if self.elem == F32:
            return x
        return self.g.op("Cast", x, to=elem, name=name)

    # ---- one method per op kind ------------------------------------------------------------------------------

    def embed(self, op: Op, tokens: str, table: str) -> str:
        # tokens [B, T] -> x [B, T, H]: rows of the embedding (the same initializer the tied head reads)
        if "scale" not in op.attrs:
            return self.g.op("Gather", self.weight(table), tokens, axis=0, name="x", doc=op.shape)
        x = self.g.op("Gather", self.weight(table), tokens, axis=0, name="x_unscaled", doc=op.shape)
        scale = self.g.tensor("embed.scale", np.asarray(op.attrs["scale"], np.float32).astype(self.np_dtype), self.elem)
        return self.g.op("Mul", x, scale, name="x", doc=f"{op.shape}, scaled by {op.attrs['scale']:g}")

    def rms_norm(self, op: Op, x: str, weight: str) -> str:
        """x / sqrt(mean(x^2) + eps) * weight. The statistics are taken in f32 inside f16/bf16 graphs, as
        transformers does: squares of f16 activations overflow past 256 and their mean loses digits; the
        normalised value is cast back and scaled in the compute dtype."""
        if self.pending_add:  # render() checked that it fuses
            return self.skip_rms_norm(op, weight)
        g = self.g
        x32 = self.cast(x, F32, "norm_in_f32")
        square = g.op("Pow", x32, g.const(2.0, np.float32), name="square")
        mean_square = g.op("ReduceMean", square, g.const([-1]), keepdims=1, name="mean_square")  # [B, T, 1]
        var_eps = g.op("Add", mean_square, g.const(op.attrs["eps"], np.float32, "eps"), name="var_eps")
        rms = g.op("Sqrt", var_eps, name="rms")
        normed = g.op("Div", x32, rms, name="normed")
        if "offset" in op.attrs:  # Gemma: scaled by (1 + w), in f32, then cast, as transformers' Gemma3RMSNorm
            scale = self.cast(self.weight(weight), F32, "norm_weight_f32")
            scale = g.op("Add", scale, g.const(op.attrs["offset"], np.float32, "offset"), name="norm_scale")
            scaled = g.op("Mul", normed, scale, name=f"{op.out[0]}_f32" if self.elem != F32 else op.out[0], doc=op.shape)
            return scaled if self.elem == F32 else g.op("Cast", scaled, to=self.elem, name=op.out[0], doc=op.shape)
        normed = self.cast(normed, self.elem, "normed_cast")
        return g.op("Mul", normed, self.weight(weight), name=op.out[0], doc=op.shape)

    def head_norm(self, op: Op, x: str, weight: str) -> str:
        """RMSNorm over each head's D values: [B, T, N*D] -> [B, T, N, D] -> normalised -> [B, T, N*D]."""
        heads = self.g.op("Reshape", x, self.g.const([0, 0, -1, op.attrs["head_dim"]]), name=f"{op.out[0]}_heads")
        normed = self.rms_norm(Op("rms_norm", (f"{op.out[0]}_normed",), op.inputs, op.weights, "", op.attrs), heads, weight)
        return self.g.op("Reshape", normed, self.g.const([0, 0, -1]), name=op.out[0], doc=op.shape)

    def linear(self, op: Op, x: str, weight: str, bias: str | None = None) -> str:
        """The one place a linear layer becomes nodes: x [B, T, in] @ W.T [in, out] (+ b) -> [B, T, out]."""
        if self.quant == "int8":
            y = self.matmul_int8(x, weight, f"{op.out[0]}_matmul", op.shape)
        else:
            y = self.g.op("MatMul", x, self.weight(weight, transpose=True), name=f"{op.out[0]}_matmul", doc=op.shape)
        return self.g.op("Add", y, self.weight(bias), name=op.out[0], doc=op.shape) if bias else y

    def rope(self, op: Op, q: str, k: str, positions: str) -> tuple[str, str]:
        """q [B, T, NQ*D] and k [B, T, KV*D] rotated by their positions: x * cos + rotate_half(x) * sin on each head's
        first R dims (R = D unless partial rotary leaves the others unturned), rotate_half(x) = [-x2, x1] for the
        halves x1, x2 of those R. Fused: ONNX Runtime's RotaryEmbedding, one node each, returning [B, T, N*D]. Plain:
        x * cos + [x2, x1] * [-sin, sin] (one Gather swaps the halves, the sign lives in the table), returning heads
        [B, T, N, D]."""
        g, d = self.g, op.attrs["head_dim"]
        inv_freq, scale = rotation(op.attrs)
        r = 2 * len(inv_freq)
        key = inv_freq.tobytes() + np.float64(scale).tobytes()
        if self.fused_attention:
            cos, sin = self.per_rope_table("_rope_positions", key, lambda: self.position_tables(inv_freq, scale))
            partial = {"rotary_embedding_dim": r} if r < d else {}
            return tuple(
                g.op("RotaryEmbedding", x, self.write_positions(), cos, sin, domain=CONTRIB, num_heads=heads,
                     interleaved=0, name=f"{name}_roped", **partial)  # fmt: skip
                for x, heads, name in ((q, op.attrs["heads"], "q"), (k, op.attrs["kv_heads"], "k"))
            )
        cos, signed_sin = self.per_rope_table("_rope", key, lambda: self.rope_tables(positions, r, inv_freq, scale))
        swap = g.const(np.r_[np.arange(r // 2, r), np.arange(r // 2)], name="swap_halves")
        out = []
        for x, heads, name in ((q, op.attrs["heads"], "q"), (k, op.attrs["kv_heads"], "k")):
            x = g.op("Reshape", x, g.const([0, 0, heads, d]), name=f"{name}_heads")
            turned = x
            if r < d:  # partial rotary: the first r dims turn, the others pass
                turned = g.op("Slice", x, g.const([0]), g.const([r]), g.const([-1]), name=f"{name}_turned")
                passed = g.op("Slice", x, g.const([r]), g.const([d]), g.const([-1]), name=f"{name}_passed")
            swapped = g.op("Gather", turned, swap, axis=-1, name=f"{name}_swapped")
            x_cos = g.op("Mul", turned, cos, name=f"{name}_cos")
            swapped_sin = g.op("Mul", swapped, signed_sin, name=f"{name}_sin")
            roped = g.op("Add", x_cos, swapped_sin, name=f"{name}_roped")
            out.append(g.op("Concat", roped, passed, axis=-1, name=f"{name}_rotary") if r < d else roped)
        return out[0], out[1]

    def rope_tables(self, positions: str, d: int, inv_freq: np.ndarray, scale: float) -> tuple[str, str]:
        """cos and [-sin, sin] of the halves at the positions, [B, T, 1, d] for the d dims RoPE turns, times `scale`
        (LongRoPE's attention factor): the angles in f32 as transformers computes them, then cast to the compute
        dtype."""
        g = self.g
        pos = g.op("Cast", positions, to=F32, name="positions_f32")
        pos = g.op("Unsqueeze", pos, g.const([-1, -2]), name="positions_4d")  # [B, T, 1, 1]
        freqs = g.op("Mul", pos, g.tensor("rope.inv_freq", inv_freq.astype(np.float32), F32), name="rope_freqs")
        angles = g.op("Concat", freqs, freqs, axis=-1, name="rope_angles")  # [B, T, 1, d]
        sign = g.const(np.r_[-np.ones(d // 2), np.ones(d // 2)], np.float32, "sin_sign")
        cos = g.op("Cos", angles, name="rope_cos_f32")
        signed_sin = g.op("Mul", g.op("Sin", angles, name="rope_sin_f32"), sign, name="rope_signed_sin_f32")
        if scale != 1.0:
            factor = g.const(scale, np.float32, "rope_scale")
            cos = g.op("Mul", cos, factor, name="rope_cos_scaled")
            signed_sin = g.op("Mul", signed_sin, factor, name="rope_signed_sin_scaled")
        return self.cast(cos, self.elem, "rope_cos"), self.cast(signed_sin, self.elem, "rope_signed_sin")

    def position_tables(self, inv_freq: np.ndarray, scale: float) -> tuple[str, str]:
        """cos and sin of every cache position's angles, [P, R/2] (RotaryEmbedding's tables), times `scale`: the
        angles in f32 as transformers computes them, then cast to the compute dtype."""
        angles = np.arange(self.max_positions, dtype=np.float32)[:, None] * inv_freq.astype(np.float32)[None, :]
        cos, sin = ((f(angles) * np.float32(scale)).astype(np.float32).astype(self.np_dtype) for f in (np.cos, np.sin))
        return (self.g.tensor("rope.cos", cos, self.elem, "[P, R/2]"), self.g.tensor("rope.sin", sin, self.elem, "[P, R/2]"))

    def per_rope_table(self, kind: str, key: bytes, make) -> tuple[str, str]:
        """make()'s tables once per graph and distinct rotation (Gemma 3 has two); the second's names get a suffix."""
        tables = self.__dict__.setdefault("_rope_rotations", [])
        tables.append(key) if key not in tables else None
        n = tables.index(key)
        if n:
            return self.once(f"{kind}{n}", lambda: self.with_suffix(f".{n}", make))
        return self.once(kind, make)

    def with_suffix(self, suffix: str, make):
        """make() with `suffix` added to the names of the initializers it creates."""
        tensor = self.g.tensor
        self.g.tensor = lambda name, *args, **kw: tensor(name + suffix, *args, **kw)
        try:
            return make()
        finally:
            self.g.tensor = tensor

    def attention(self, op: Op, q: str, k: str, v: str, positions: str) -> str:
        """Writes k, v into this layer's cache at the positions, then attends over the row's positions up to the
        query's (and within a sliding window, where the op has one). Query heads are grouped by the kv head they
        share (GQA). q, k as rope returned them, v [B, T, KV*D] -> a [B, T, NQ*D]"""
        if self.fused_attention:
            return self.group_query_attention(op, q, k, v)
        return self.plain_attention(op, q, k, v, positions)

    def group_query_attention(self, op: Op, q: str, k: str, v: str) -> str:
        """ONNX Runtime's GroupQueryAttention over this layer's past and present, which share their buffer: it writes
        the new k, v at each row's positions (seqlens_k: the last one) and attends causally."""
        d = op.attrs["head_dim"]
        attrs = {"num_heads": op.attrs["heads"], "kv_num_heads": op.attrs["kv_heads"], "scale": op.attrs.get("scale", d**-0.5)}
        if op.attrs.get("window"):  # a query sees the last `window` positions, its own included
            attrs["local_window_size"] = op.attrs["window"]
        seqlens, total = self.sequence_lengths()
        past = [past_name(self.layer, kv) for kv in KV]
        outputs = (self.g.fresh("a"), *(present_name(self.layer, kv) for kv in KV))
        return self.g.node("GroupQueryAttention", [q, k, v, *past, seqlens, total], outputs, op.shape, domain=CONTRIB,
                           **attrs)[0]  # fmt: skip

    def plain_attention(self, op: Op, q: str, k: str, v: str, positions: str) -> str:
        """q [B, T, NQ, D], k [B, T, KV, D] (roped heads), v [B, T, KV*D] -> a [B, T, NQ*D]"""
        g, nq, kv, d = self.g, op.attrs["heads"], op.attrs["kv_heads"], op.attrs["head_dim"]
        group, p = nq // kv, self.max_positions
        k_new = g.op("Transpose", k, perm=[0, 2, 1, 3], name="k_new")  # [B, KV, T, D]
        v_heads = g.op("Reshape", v, g.const([0, 0, kv, d]), name="v_heads")
        v_new = g.op("Transpose", v_heads, perm=[0, 2, 1, 3], name="v_new")
        keys, values = (self.cached(kind, new) for kind, new in zip(KV, (k_new, v_new)))  # [B, KV, P, D]
        # q [B, T, NQ, D] -> [B, T, KV, G, D] -> [B, KV, G, T, D] -> [B, KV, G*T, D]
        qg = g.op("Reshape", q, g.const([0, 0, kv, group, d]), name="q_groups")
        qg = g.op("Transpose", qg, perm=[0, 2, 3, 1, 4], name="q_by_kv")
        qg = g.op("Reshape", qg, g.const([0, kv, -1, d]), name="q_rows")
        keys_t = g.op("Transpose", keys, perm=[0, 1, 3, 2], name="keys_t")  # [B, KV, D, P]
        scores = g.op("MatMul", qg, keys_t, name="scores")  # [B, KV, G*T, P]
        # Scale, mask and softmax in f32 inside f16/bf16 graphs (transformers' softmax also runs in f32): the
        # exponentials of f16 scores lose the small probabilities and bf16 keeps only 3 digits.
        scale = g.const(op.attrs.get("scale", d**-0.5), np.float32, "scale")
        scores = g.op("Mul", self.cast(scores, F32, "scores_f32"), scale, name="scores_scaled")
        scores = g.op("Reshape", scores, g.const([0, kv, group, -1, p]), name="scores_by_query")  # [B, KV, G, T, P]
        scores = g.op("Add", scores, self.attention_mask(positions, op.attrs.get("window")), name="scores_masked")
        probs = g.op("Softmax", scores, axis=-1, name="probs")
        probs = g.op("Reshape", self.cast(probs, self.elem, "probs_cast"), g.const([0, kv, -1, p]), name="probs_rows")
        a = g.op("MatMul", probs, values, name="attended")  # [B, KV, G*T, D]
        a = g.op("Reshape", a, g.const([0, kv, group, -1, d]), name="attended_groups")  # [B, KV, G, T, D]
        a = g.op("Transpose", a, perm=[0, 3, 1, 2, 4], name="attended_by_token")  # [B, T, KV, G, D]
        return g.op("Reshape", a, g.const([0, 0, nq * d]), name="a", doc=op.shape)

    def cached(self, kind: str, new: str) -> str:
        """This layer's keys ("key") or values ("value") of the B rows with new [B, KV, T, D] written at the
        positions: the graph's present output, [B, KV, P, D]."""
        past, present = past_name(self.layer, kind), present_name(self.layer, kind)
        return self.g.op("ScatterElements", past, self.write_index(), new, axis=2, out=present, doc="[B, KV, P, D]")

    # ---- position bookkeeping, once per graph ------------------------------------------------------------------

    def once(self, key: str, make) -> str:
        """A value computed once per graph, outside any layer's scope."""
        if not hasattr(self, key):
            scope, self.g.scope = self.g.scope, ""
            setattr(self, key, make())
            self.g.scope = scope
        return getattr(self, key)

    def write_positions(self) -> str:
        """Where each token is written: its position, clamped to P - 1 so rows nobody uses can keep stepping
        without writing outside the cache (their last slot is never read by a live row: it rewrites it first)."""
        last = self.g.const(self.max_positions - 1)
        return self.once("_write_pos", lambda: self.g.op("Min", "positions", last, name="write_positions"))

    def sequence_lengths(self) -> tuple[str, str]:
        """GroupQueryAttention's seqlens_k (each row's last written position, int32 [B]) and total_sequence_length
        (the longest row's length, an int32 scalar)."""
        g = self.g

        def make():
            last = g.op("ReduceMax", self.write_positions(), g.const([1]), keepdims=0, name="last_positions")  # [B]
            longest = g.op("Add", g.op("ReduceMax", last, keepdims=0, name="longest_last"), g.const(1), name="longest")
            return (g.op("Cast", last, to=TensorProto.INT32, name="seqlens_k"),
                    g.op("Cast", longest, to=TensorProto.INT32, name="total_sequence_length"))  # fmt: skip

        return self.once("_sequence_lengths", make)

    def write_index(self) -> str:
        """The write positions [B, T] as ScatterElements' index along the position axis: [B, KV, T, D]."""
        kv, d = self.config.num_key_value_heads, self.config.head_dim

        def make():
            pos = self.g.op("Reshape", self.write_positions(), self.g.const([0, 1, -1, 1]), name="write_positions_4d")
            return self.g.op("Expand", pos, self.g.const([1, kv, 1, d]), name="write_index")

        return self.once("_write_index", make)

    def attention_mask(self, positions: str, window: int | None = None) -> str:
        """Additive f32 mask [B, 1, 1, T, P]: 0 where the key's position <= the query's (and, with a sliding
        `window`, > the query's - window), the most negative float elsewhere (as transformers does), so each row
        attends to its own written positions only."""
        g = self.g

        def make():
            query = g.op("Reshape", positions, g.const([0, 1, 1, -1, 1]), name="query_positions")  # [B, 1, 1, T, 1]
            keys = g.const(np.arange(self.max_positions), name="key_positions")  # [P]
            visible = g.op("LessOrEqual", keys, query, name="visible")
            if window is not None:
                start = g.op("Sub", query, g.const(window), name="window_start")
                visible = g.op("And", visible, g.op("Greater", keys, start, name="in_window"), name="visible_in_window")
            zero, lowest = g.const(0.0, np.float32, "zero"), g.const(np.finfo(np.float32).min, np.float32, "lowest")
            return g.op("Where", visible, zero, lowest, name="mask" if window is None else f"mask_window_{window}")

        return self.once("_mask" if window is None else f"_mask_{window}", make)

    # ---- the rest of the block and the epilogue --------------------------------------------------------------

    def silu_mul(self, op: Op, gate: str, up: str) -> str:
        # silu(g) * u = g * sigmoid(g) * u  [B, T, I]
        silu = self.g.op("Mul", gate, self.g.op("Sigmoid", gate, name="gate_sigmoid"), name="gate_silu")
        return self.g.op("Mul", silu, up, name=op.out[0], doc=op.shape)

    def gelu_mul(self, op: Op, gate: str, up: str) -> str:
        # GeGLU: gelu(g) with the tanh approximation, times u  [B, T, I]
        gelu = self.g.op("Gelu", gate, approximate="tanh", name="gate_gelu")
        return self.g.op("Mul", gelu, up, name=op.out[0], doc=op.shape)

    def add(self, op: Op, a: str, b: str) -> str:
        if not self.fuse_residual_norms:
            return self.g.op("Add", a, b, name=op.out[0], doc=op.shape)
        out = self.g.fresh(op.out[0])
        self.pending_add = (a, b, out, op.shape)
        return out

    def fuses_with_pending_add(self, op: Op, env: dict[str, str]) -> bool:
        """Whether op is an RMSNorm (of plain weights) of the pending add's sum."""
        return op.kind == "rms_norm" and "offset" not in op.attrs and env[op.inputs[0]] == self.pending_add[2]

    def flush_add(self) -> None:
        """The pending add as an Add node, its output named as promised."""
        if self.pending_add:
            a, b, out, shape = self.pending_add
            self.pending_add = None
            self.g.op("Add", a, b, out=out, doc=shape)

    def skip_rms_norm(self, op: Op, weight: str) -> str:
        """The pending add a + b and the RMSNorm of it in one node; the sum stays available under its name."""
        a, b, total, _ = self.pending_add
        self.pending_add = None
        normed = self.g.fresh(op.out[0])
        return self.g.node("SkipSimplifiedLayerNormalization", [a, b, self.weight(weight)], (normed, "", "", total),
                           op.shape, domain=CONTRIB, epsilon=op.attrs["eps"])[0]  # fmt: skip

    def logits(self, op: Op, x: str, head: str) -> str:
        # x [B, H] @ head.T -> [B, V]: Gemm reads the [V, H] head (the tied embedding) transposed in place
        if self.quant == "int8":  # the head in int8 blocks; a tied embedding's Gather keeps reading the float table
            logits = self.matmul_int8(x, head, "logits_compute", "[B, V]")
        else:
            logits = self.g.op("Gemm", x, self.weight(head), transB=1, name="logits_compute", doc="[B, V]")
        if self.elem == F32:
            return self.g.op("Identity", logits, out="logits", doc="[B, V]")
        return self.g.op("Cast", logits, to=F32, out="logits", doc="[B, V] f32")

    def argmax(self, op: Op, logits: str) -> str:
        # the first maximal index, as torch.argmax: [B, 1], fed back as the next step's tokens
        return self.g.op("ArgMax", logits, axis=-1, keepdims=1, select_last_index=0, out="next_tokens", doc="[B, 1]")


def build_model(
    decoder: Decoder, tensors: Mapping[str, np.ndarray], dtype: str, rows: int, max_positions: int,
    quant: str | None = None, fused_attention: bool = False,
) -> onnx.ModelProto:
    """The model in memory, every initializer inside it (for tests and small models; write_onnx streams them)."""
    return OnnxEmitter(decoder, dtype, rows, max_positions, quant, fused_attention).build(tensors)


def write_onnx(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions) -> list[Path]:
    """The `onnx` compile target: one model for options.dtype over a cache of options.batch x options.max_positions,
    its linear layers and head in int8 blocks when options.quant is "int8", its attention fused when
    options.fused_attention. Writes model.onnx and its weights in model.onnx.data beside it, checked by onnx.checker;
    returns both paths. Each checkpoint tensor is read when its initializer is made and written out at once, so the
    emit needs about one tensor's memory beyond the process's own, whatever the model's size."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path, data_path = out / MODEL_FILE, out / DATA_FILE
    path.unlink(missing_ok=True)  # an emit that fails part way leaves no model reading the half-written data
    with numpy_on_small_pages(), open(data_path, "wb") as data:
        emitter = OnnxEmitter(decoder, options.dtype, options.batch, options.max_positions, options.quant,
                              options.fused_attention, data)  # fmt: skip
        model = emitter.build(LazyWeights(checkpoint, "np"))
    onnx.save_model(model, path)
    onnx.checker.check_model(str(path))
    return [path, data_path]
