"""The PyTorch emitter: renders a graph.Decoder as one standalone, readable Python module (torch, numpy and
safetensors only), with the loader that maps the checkpoint's tensors onto it and an Engine over a static KV cache.

Each op kind has one small render function returning the line of `forward` it becomes; the module's frame
(helpers, the Decoder over the blocks, the loader, the Engine) is the template templates/torch_module.py.j2.
Before rendering, parallel linear ops (q/k/v, gate/up; found and named by linnet_core.fuse) become one matmul over
their fused weight, q and k, side by side in the fused output, are rotated by one rope call, and a projection that
only the residual add reads becomes one add_linear (one kernel on a GPU)."""

from __future__ import annotations

import builtins
import importlib.util
import json
import keyword
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jinja2

from linnet_core import dtypes
from linnet_core.checkpoint import check_weights, header_shapes
from linnet_core.errors import UserError
from linnet_core.fuse import Fused, parallel_linears
from linnet_core.graph import Decoder, Op
from linnet_core.rope import check_positions, rotation
from linnet_core.targets import CompileOptions

MODULE_NAME = "linnet_torch_model"  # the generated file is OUT/linnet_torch_model.py


@dataclass(frozen=True)
class Section:
    """One class of the module: its weights' init lines and its forward's body lines."""

    init: list[str]
    body: list[str]


def py(value: str) -> str:
    """A graph value's Python name: "next" would shadow the builtin, so it becomes "next_"."""
    return value + "_" if keyword.iskeyword(value) or hasattr(builtins, value) else value


def attr(weight: str) -> str:
    """The module attribute holding a weight: "qkv_proj.weight" -> "qkv_proj_weight"."""
    return weight.replace(".", "_")


def fuse_linears(ops: tuple[Op, ...], shapes: dict[str, tuple[int, ...]]) -> tuple[list[Op], dict[str, list[str]]]:
    """Each run of parallel linears (linnet_core.fuse) becomes one linear op with several outputs over their fused
    weight. Returns the ops and, for each fused weight, the weights it concatenates (in order). shapes: weight
    name -> shape."""
    out: list[Op] = []
    fused: dict[str, list[str]] = {}
    for item in parallel_linears(ops):
        if not isinstance(item, Fused):
            out.append(item)
            continue
        fused |= {name: list(parts) for name, parts in item.weights.items()}
        split = tuple(shapes[op.weights[0]][0] for op in item.ops)
        outs = tuple(v for op in item.ops for v in op.out)
        shape = ", ".join(op.shape for op in item.ops)
        attrs = {"split": split, "joint": item.output}
        out.append(Op("linear", outs, item.ops[0].inputs, tuple(item.weights), shape, attrs))
    return out, fused


def joint_rope(ops: list[Op]) -> list[Op]:
    """A rope op whose two inputs sit side by side in one fused linear's output (q and k of qkv) rotates them
    in one call over that slice: the heads of both rotate alike."""
    where = {}  # value -> (fused output, offset, width)
    for op in ops:
        if op.kind == "linear" and "joint" in op.attrs:
            offsets = [sum(op.attrs["split"][:n]) for n in range(len(op.out))]
            where |= {v: (op.attrs["joint"], o, w) for v, o, w in zip(op.out, offsets, op.attrs["split"])}
    out = []
    for op in ops:
        a, b = (where.get(v) for v in op.inputs[:2]) if op.kind == "rope" else (None, None)
        if a and b and a[0] == b[0] and a[1] + a[2] == b[1]:
            op = Op(op.kind, op.out, op.inputs, op.weights, op.shape, {**op.attrs, "joint": (a[0], a[1], a[2], b[2])})
        out.append(op)
    return out


def residual_linears(ops: list[Op]) -> list[Op]:
    """A linear (one weight, no bias) whose output only the next op reads, an add onto the residual stream, becomes
    one op that adds the product to the stream (add_linear): on a GPU, one kernel where the two are two."""
    reads = [v for op in ops for v in op.inputs]
    out: list[Op] = []
    for op in ops:
        last = out[-1] if out else None
        if (op.kind == "add" and last is not None and last.kind == "linear" and len(last.weights) == 1
                and "split" not in last.attrs and op.inputs[1] == last.out[0] and reads.count(last.out[0]) == 1):  # fmt: skip
            out[-1] = Op("linear", op.out, last.inputs, last.weights, op.shape, {**last.attrs, "residual": op.inputs[0]})
        else:
            out.append(op)
    return out


# One render function per op kind: op -> the line (or lines) of forward it becomes, without the shape comment.


def embed_scale(op: Op) -> str:
    """What an embedding lookup's rows are multiplied by, as source: Gemma scales them by sqrt(hidden)."""
    return f" * {op.attrs['scale']!r}" if "scale" in op.attrs else ""


def render_embed(op: Op) -> str:
    return f"{py(op.out[0])} = F.embedding({py(op.inputs[0])}, self.{attr(op.weights[0])}){embed_scale(op)}"


def render_rms_norm(op: Op) -> str:
    w = f"self.{attr(op.weights[0])}"
    return f"{py(op.out[0])} = rms_norm({py(op.inputs[0])}, {w}, {op.attrs['eps']!r}, {w}_doubled)"


def render_head_norm(op: Op) -> str:
    # RMSNorm over each head's values: [B, T, N * D] viewed as [B, T, N, D], normalised, flattened back
    w, d = f"self.{attr(op.weights[0])}", op.attrs["head_dim"]
    x = f"{py(op.inputs[0])}.unflatten(-1, (-1, {d}))"
    return f"{py(op.out[0])} = rms_norm({x}, {w}, {op.attrs['eps']!r}, {w}_doubled).flatten(-2)"


def render_linear(op: Op, function: str = "linear", scaled: bool = False) -> str | list[str]:
    """The one place a linear layer (matmul + optional bias, or several fused) becomes code."""
    weight, *bias = (f"self.{attr(w)}" for w in op.weights)
    args = ", ".join([py(op.inputs[0]), weight, *([f"{weight}_scales"] if scaled else []), *bias])
    if "residual" in op.attrs:  # added to the residual stream (residual_linears)
        x = py(op.attrs["residual"])
        return f"{py(op.out[0])} = " + (f"add_linear({x}, {args})" if function == "linear" else f"{x} + {function}({args})")
    if "split" not in op.attrs:
        return f"{py(op.out[0])} = {function}({args})"
    joint, outs = op.attrs["joint"], ", ".join(py(v) for v in op.out)
    width = sum(op.attrs["split"])
    return [f"{joint} = {function}({args})  # [B, T, {width}]", f"{outs} = {joint}.split_with_sizes({op.attrs['split']}, dim=-1)"]


def render_linear_int8(op: Op) -> str | list[str]:
    """The weight-only int8 variant: the int8 weight and its per-channel scales (see linear_int8 in the module)."""
    return render_linear(op, "linear_int8", scaled=True)


def render_rope(op: Op) -> str:
    # cos, sin are the rows of the model's rope table at this call's positions (see Decoder.forward)
    q, k = (py(v) for v in op.out)
    d = op.attrs["head_dim"]
    if "joint" in op.attrs:  # q and k side by side in one tensor (joint_rope)
        joint, offset, wq, wk = op.attrs["joint"]
        return f"{q}, {k} = rope({joint}[..., {offset or ''}:{offset + wq + wk}], cos, sin, {d}).split_with_sizes(({wq}, {wk}), dim=-1)"
    return f"{q}, {k} = rope({py(op.inputs[0])}, cos, sin, {d}), rope({py(op.inputs[1])}, cos, sin, {d})"


def render_attention(op: Op) -> str:
    # the positions reach attention as what every layer derives from them once per call: the cache slots to
    # write and the causal mask (see Decoder.forward)
    q, k, v, _positions = (py(x) for x in op.inputs)
    a = op.attrs
    heads = f"heads={a['heads']}, kv_heads={a['kv_heads']}, head_dim={a['head_dim']}"
    scale = f", scale={a['scale']!r}" if "scale" in a else ""  # else head_dim ** -0.5
    return f"{py(op.out[0])} = attention({q}, {k}, {v}, slots, mask, k_cache, v_cache, {heads}{scale})"


def render_silu_mul(op: Op) -> str:
    return f"{py(op.out[0])} = F.silu({py(op.inputs[0])}) * {py(op.inputs[1])}"


def render_gelu_mul(op: Op) -> str:
    return f'{py(op.out[0])} = F.gelu({py(op.inputs[0])}, approximate="tanh") * {py(op.inputs[1])}'


def render_add(op: Op) -> str:
    return f"{py(op.out[0])} = {py(op.inputs[0])} + {py(op.inputs[1])}"


def render_logits(op: Op) -> str:
    return f"{py(op.out[0])} = linear({py(op.inputs[0])}, self.{attr(op.weights[0])})"


def render_logits_int8(op: Op) -> str:
    w = f"self.{attr(op.weights[0])}"
    return f"{py(op.out[0])} = linear_int8({py(op.inputs[0])}, {w}, {w}_scales)"


def render_embed_int8(op: Op) -> str:
    w = f"self.{attr(op.weights[0])}"
    return f"{py(op.out[0])} = embedding_int8({py(op.inputs[0])}, {w}, {w}_scales){embed_scale(op)}"


def render_argmax(op: Op) -> str:
    assert op.attrs.get("at") == "last", op.attrs  # the epilogue sees only the last position (Decoder.forward)
    return f"{py(op.out[0])} = {py(op.inputs[0])}[:, -1].argmax(-1)"


RENDER = {
    "embed": render_embed,
    "rms_norm": render_rms_norm,
    "head_norm": render_head_norm,
    "linear": render_linear,
    "rope": render_rope,
    "attention": render_attention,
    "silu_mul": render_silu_mul,
    "gelu_mul": render_gelu_mul,
    "add": render_add,
    "logits": render_logits,
    "argmax": render_argmax,
}
# Op kinds whose weight may be int8 (CompileOptions.quant): what they render as when it is.
RENDER_INT8 = {"linear": render_linear_int8, "logits": render_logits_int8, "embed": render_embed_int8}


def quantized_weights(ops: list[Op]) -> set[str]:
    """The weights weight-only quantization applies to: the matrices of linear layers and of the head (a tied head's
    is the embedding table, whose lookups then read it as int8 too)."""
    return {op.weights[0] for op in ops if op.kind in ("linear", "logits")}


def section(ops: list[Op], shapes: dict[str, tuple[int, ...]], fused: dict[str, list[str]], tied: str | None,
            int8: set[str] = frozenset()) -> Section:  # fmt: skip
    """A class's init (one attribute per weight it reads, with its shape) and forward body (a line per op).
    int8: the weights stored as int8 with per-channel scales (quantized_weights), when compiled with quant "int8"."""
    init, seen = [], set()
    for op in ops:
        for w in op.weights:
            if w in seen:
                continue
            seen.add(w)
            note = f": {', '.join(p.split('.')[0] for p in fused[w])} fused" if w in fused else ""
            note += ": the token embedding's (tied head)" if w == tied and op.kind == "logits" else ""
            shape = list(fused_shape(w, shapes, fused))
            if "offset" in op.attrs:  # Gemma's norms scale by (1 + w)
                note += f": ({op.attrs['offset']!r} + w), as the norm scales by it"
                init.append(f'self.{attr(w)} = {op.attrs["offset"]!r} + weights["{w}"]  # {shape}{note}')
            else:
                init.append(f'self.{attr(w)} = weights["{w}"]  # {shape}{" int8" if w in int8 else ""}{note}')
            if w in int8:
                init.append(f'self.{attr(w)}_scales = weights["{w}_scales"]  # [{shape[0]}]: per output channel')
            if op.kind in ("rms_norm", "head_norm"):  # what rms_norm's single-kernel form needs (see there)
                init.append(f"self.{attr(w)}_doubled = torch.cat((self.{attr(w)}, self.{attr(w)}))")
    body = []
    for op in ops:
        rendered = (RENDER_INT8 if op.weights and op.weights[0] in int8 else RENDER)[op.kind](op)
        *before, line = [rendered] if isinstance(rendered, str) else rendered
        body += before
        if len(line) + len(op.shape) > 100:  # a long statement gets its shape comment on the line above
            body += [f"# {op.shape}", line]
        else:
            body.append(f"{line}  # {op.shape}" if op.shape else line)
    return Section(init, body)


def fused_shape(name: str, shapes: dict[str, tuple[int, ...]], fused: dict[str, list[str]]) -> tuple[int, ...]:
    """A weight's shape; a fused weight's parts stack along dim 0."""
    if name not in fused:
        return shapes[name]
    parts = [shapes[p] for p in fused[name]]
    return (sum(p[0] for p in parts), *parts[0][1:])


def render_module(decoder: Decoder, checkpoint: Path, options: CompileOptions) -> str:
    """The generated module's source."""
    c = decoder.config
    block_shapes = {name: w.shape for name, w in decoder.weights_of_layer(0).items()}
    global_shapes = {w.name: w.shape for w in decoder.global_weights}
    block_ops, block_fused = fuse_linears(decoder.block, block_shapes)
    block_ops = residual_linears(joint_rope(block_ops))
    kinds = [residual_linears(joint_rope(fuse_linears(ops, block_shapes)[0])) for ops in decoder.blocks()]  # a Block class each
    prologue_ops, prologue_fused = fuse_linears(decoder.prologue, global_shapes)
    epilogue_ops, epilogue_fused = fuse_linears(decoder.epilogue, global_shapes)
    global_fused = prologue_fused | epilogue_fused
    hf = decoder.sources()
    layer_prefix, hf_block = "layers.{layer}.", {w.name: w.source for w in decoder.block_weights}

    def sources(name: str, fused: dict[str, list[str]], lookup) -> str:
        """The checkpoint names a weight is read from, as a Python list literal: one line, or one per name."""
        names = [f'"{lookup(part)}"' for part in fused.get(name, [name])]
        return f"[{names[0]}]" if len(names) == 1 else "[\n" + "".join(f"        {n},\n" for n in names) + "    ]"

    block_names = [w for op in block_ops for w in op.weights]
    global_names = [w for op in (*prologue_ops, *epilogue_ops) for w in op.weights]
    argmax = epilogue_ops[-1]
    assert argmax.kind == "argmax", argmax
    ropes = [next(op for op in ops if op.kind == "rope") for ops in kinds]
    for rope in ropes:
        check_positions(rope.attrs, options.max_positions)
    windows = [next(op for op in ops if op.kind == "attention").attrs.get("window") for ops in kinds]
    constants = [
        ("VOCAB", c.vocab_size, "token ids"),
        ("HIDDEN", c.hidden_size, "width of the residual stream"),
        ("LAYERS", c.num_hidden_layers, "decoder blocks"),
        ("HEADS", c.num_attention_heads, "query heads"),
        ("KV_HEADS", c.num_key_value_heads, "key/value heads (grouped-query attention)"),
        ("HEAD_DIM", c.head_dim, "width of one head"),
        ("MAX_POSITION_EMBEDDINGS", c.max_position_embeddings, "longest sequence the model supports"),
        ("MAX_POSITIONS", options.max_positions, "default KV cache positions per row"),
        ("DTYPE", f"torch.{dtypes.long_name(options.dtype)}", "default compute dtype"),
    ]
    compiled_config = {
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "model_type": json.dumps(c.model_type),
    }  # fmt: skip

    def block_doc(rope: Op, window: int | None) -> str:
        scaling, rotary = rope.attrs["scaling"], rope.attrs.get("rotary_dim")
        scaled = f", {scaling['rope_type']} scaling" + (f" x{scaling['factor']:g}" if "factor" in scaling else "") if scaling else ""
        return (f"RoPE base {rope.attrs['theta']:g}" + scaled + (f" on the first {rotary} dims of a head" if rotary else "")
                + (f", attending over the last {window} positions" if window else ""))  # fmt: skip

    def inv_freq_literal(rope: Op) -> str:
        values = rotation(rope.attrs)[0]
        return textwrap.fill(", ".join(repr(float(f)) for f in values), width=108, initial_indent="        ",
                             subsequent_indent="        ")  # fmt: skip

    names = ["Block"] if len(kinds) == 1 else [f"Block{n}" for n in range(len(kinds))]
    tied = decoder.head_weight if c.tie_word_embeddings else None
    if options.quant not in (None, "int8"):
        raise UserError(f"the torch target offers weight-only int8 (--quant int8), not {options.quant}")
    int8 = quantized_weights([*block_ops, *prologue_ops, *epilogue_ops]) if options.quant == "int8" else set()
    embed_weight = decoder.prologue[0].weights[0]
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("linnet_core", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("torch_module.py.j2").render(
        title=f"A {c.architecture.HF_CLASS.removesuffix('ForCausalLM')} decoder of {c.num_parameters / 1e6:.1f}M parameters",
        inv_freqs=[(inv_freq_literal(rope), block_doc(rope, w)) for rope, w in zip(ropes, windows)],
        rope_scales=repr([rotation(rope.attrs)[1] for rope in ropes]),
        rotary_dim=2 * len(rotation(ropes[0].attrs)[0]),
        windows=repr(windows),
        block_names=", ".join(names),
        block_of_layer=repr(list(decoder.variant_of_layer())),
        summary=textwrap.fill(
            f"{c.num_hidden_layers} layers of width {c.hidden_size}; {c.num_attention_heads} query heads and "
            f"{c.num_key_value_heads} key/value heads of {c.head_dim}; MLP width {c.intermediate_size}; "
            f"vocabulary {c.vocab_size}; output head {'tied to the token embedding' if tied else 'untied'}"
            + ("; weights of the linear layers and the head int8, one scale per output channel." if int8 else "."),
            width=116,
        ),
        constants=[(n, f"{v!r}  # {doc}" if not isinstance(v, str) else f"{v}  # {doc}") for n, v, doc in constants],
        global_weights=[(n, sources(n, global_fused, hf.__getitem__)) for n in dict.fromkeys(global_names)],
        block_weights=[
            (layer_prefix + n, sources(n, block_fused, lambda p: hf_block[layer_prefix + p]))
            for n in dict.fromkeys(block_names)
        ],
        compiled_config=list(compiled_config.items()),
        prologue=section(prologue_ops, global_shapes, global_fused, tied, int8),
        blocks=[(name, section(ops, block_shapes, block_fused, tied, int8), block_doc(rope, w))
                for name, ops, rope, w in zip(names, kinds, ropes, windows)],  # fmt: skip
        epilogue=section(epilogue_ops, global_shapes, global_fused, tied, int8),
        epilogue_returns=f"{py(argmax.inputs[0])}[:, -1], {py(argmax.out[0])}",
        quantized=[n for n in dict.fromkeys(global_names) if n in int8]
        + [layer_prefix + n for n in dict.fromkeys(block_names) if n in int8],
        float_weight=f"{embed_weight}_scales" if embed_weight in int8 else embed_weight,
        hidden=c.hidden_size,
        vocab=c.vocab_size,
        layers=c.num_hidden_layers,
        kv_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        rows=options.batch,
        max_positions=options.max_positions,
        checkpoint=json.dumps(str(checkpoint)),
    )


def write(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions) -> list[Path]:
    """The `torch` target: writes OUT/linnet_torch_model.py, after checking the checkpoint holds the decoder's
    tensors (a one-line UserError otherwise). Returns [the module's path]."""
    checkpoint = Path(checkpoint).resolve()
    check_weights(checkpoint, decoder.config, header_shapes(checkpoint))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{MODULE_NAME}.py"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render_module(decoder, checkpoint, options))
    tmp.replace(path)
    return [path]


def import_generated(path: Path) -> ModuleType:
    """Imports a generated module from its file, under a name of its own (several may be loaded at once)."""
    path = Path(path).resolve()
    name = f"{MODULE_NAME}_{abs(hash(str(path))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def load_engine(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions, device: str = "cpu",
                mode: str = "eager"):  # fmt: skip
    """Emits the module into OUT, imports it and returns its Engine over the checkpoint, with options.batch
    rows of options.max_positions positions in options.dtype. mode: "eager" | "inductor" | "cudagraphs"."""
    [path] = write(decoder, checkpoint, out, options)
    module = import_generated(path)
    return module.Engine(checkpoint, rows=options.batch, max_positions=options.max_positions, device=device,
                         dtype=options.dtype, mode=mode)  # fmt: skip
