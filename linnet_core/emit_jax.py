"""Linnet's JAX emitter: the model description (linnet_core.graph) rendered as a readable, standalone JAX module.

Each op kind is rendered once: a helper function (HELPERS) emitted once into the module, and one call line
per op (render_op) in the block, the prologue or the epilogue. Parallel linears (q, k and v; gate and up: found and
named by linnet_core.fuse) share one call over their weights concatenated at load: one matmul, one kernel,
instead of three. The fixed rest of the module (the jitted
`prefill` and `decode_step` over a donated static KV cache, the safetensors loader, the Engine) is the
template templates/jax_module.py.j2. `compile_jax` is the `jax` target of `linnet compile`."""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import sys
from pathlib import Path

import jinja2

from linnet_core.dtypes import long_name
from linnet_core.fuse import Fused, parallel_linears
from linnet_core.graph import Decoder, Op
from linnet_core.rope import check_positions, rotation
from linnet_core.safetensors_np import read_safetensors
from linnet_core.targets import CompileOptions

MODULE_FILE = "linnet_jax_model.py"  # the generated module's file name

# The Python function each op kind calls; "add" is written inline as "+".
FUNCTIONS = {
    "embed": "embed",
    "rms_norm": "rms_norm",
    "head_norm": "head_norm",
    "linear": "linear",
    "rope": "rope",
    "attention": "attention",
    "silu_mul": "silu_mul",
    "gelu_mul": "gelu_mul",
    "logits": "output_head",
    "argmax": "greedy",
}
# Values of the description whose names would shadow a Python builtin.
IDENTIFIERS = {"next": "next_ids"}
# Kinds that also read and write the layer's cache (and the first cache row of the call).
CACHE_KINDS = {"attention"}

HELPERS = {
    "embed": '''
def embed(tokens, table, scale=None):
    """Token embedding: ids [B, T] -> [B, T, H], times `scale` if given (Gemma: sqrt(H))."""
    x = jnp.take(table, tokens, axis=0)
    return x if scale is None else x * jnp.asarray(scale, x.dtype)''',
    "rms_norm": '''
def rms_norm(x, weight, eps, offset=None):
    """RMSNorm over the last axis, computed in float32 and cast back as the checkpoint's model does; the scale is
    offset + weight when an offset is given (Gemma: 1 + w)."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    if offset is not None:
        weight = weight + offset
    return weight * x32.astype(x.dtype)''',
    "head_norm": '''
def head_norm(x, weight, eps, head_dim, offset=None):
    """RMSNorm over each head's values: x [B, T, N * head_dim] -> the same shape."""
    heads = x.reshape(*x.shape[:2], -1, head_dim)  # [B, T, N, D]
    return rms_norm(heads, weight, eps, offset).reshape(x.shape)''',
    "linear": '''
def linear(x, weight, bias=None):
    """x [B, T, in] times weight [out, in] (the checkpoint's layout, not transposed), plus bias [out]."""
    y = jnp.einsum("bti,oi->bto", x, weight, precision=PRECISION)
    return y if bias is None else y + bias''',
    "rope": '''
def rope(q, k, positions, heads, kv_heads, head_dim, inv_freq, scale=1.0):
    """Rotate-half rotary embedding at each row's own positions [B, T]: q [B, T, heads * D], k [B, T, kv_heads * D];
    inv_freq [R / 2] is how fast each pair of the first R dims of a head turns per position (the other D - R dims
    pass unturned: partial rotary); cos and sin are multiplied by `scale` (LongRoPE's attention factor)."""
    angles = positions[:, :, None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)  # [B, T, R / 2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, T, 1, R]
    cos, sin = (jnp.cos(angles) * scale).astype(q.dtype), (jnp.sin(angles) * scale).astype(q.dtype)
    R = angles.shape[-1]

    def rotate(x, n):
        x = x.reshape(*x.shape[:2], n, head_dim)  # [B, T, n, D]
        turned, passed = x[..., :R], x[..., R:]
        x1, x2 = jnp.split(turned, 2, axis=-1)
        turned = turned * cos + jnp.concatenate([-x2, x1], axis=-1) * sin
        return jnp.concatenate([turned, passed], axis=-1).reshape(*x.shape[:2], n * head_dim)

    return rotate(q, heads), rotate(k, kv_heads)''',
    "attention": '''
def attention(q, k, v, positions, cache, row, heads, kv_heads, head_dim, scale=None, window=None):
    """Writes k, v [B, T, kv_heads * D] into cache rows row..row+B-1 at positions [B, T], then attends causally:
    each query sees its row's cache up to its own position. q [B, T, heads * D] -> [B, T, heads * D].
    `row` may instead be int [B], the cache row of each of the B (a batch of chunks in any rows); a row past R,
    like a position past S, is a padding one: its writes are dropped. Or, for B = 1 row of tokens laid out in blocks
    of T from several chunks and then one token per row (see batch_layout), the tuple (rows [K], at [K, T], single
    rows [R], single at [R, 1]): each block's cache row and its tokens' cache positions, and each lone token's.
    Grouped-query attention: each key/value head serves heads // kv_heads query heads. Scores are scaled by
    `scale` (None: head_dim^-1/2); with a `window`, a query sees only its last `window` positions.

    The cache keeps keys as [R, kv, D, S] and values as [R, kv, S, D]: the layouts the two matmuls read, so
    XLA neither copies nor transposes the cache to attend."""
    if isinstance(row, tuple):  # chunks in blocks, then lone tokens: each a batch [K, T] / [R, 1] of their rows
        outs, first = [], 0
        for rows, at in (row[:2], row[2:]):
            n = at.size
            group = (x[0, first : first + n].reshape(*at.shape, x.shape[-1]) for x in (q, k, v))
            out, cache = attention(*group, at, cache, rows, heads, kv_heads, head_dim, scale, window)
            outs.append(out.reshape(n, -1))
            first += n
        return jnp.concatenate(outs)[None], cache  # [1, N, heads * D]
    B, T = positions.shape
    cache_k, cache_v = cache  # [R, kv, D, S], [R, kv, S, D]
    S = cache_v.shape[2]
    k = k.reshape(B, T, kv_heads, head_dim)
    v = v.reshape(B, T, kv_heads, head_dim)
    # Scatter into the donated cache, in place, through its [R * kv, ...] view: row r's head h is r * kv + h.
    # (On the 4-d array itself, XLA's CPU backend turns a one-row write into a dynamic-update-slice that it
    # duplicates into the attention's matmul, copying the cache.) Positions past S are dropped.
    rows = row if jnp.ndim(row) == 1 else row + jnp.arange(B, dtype=jnp.int32)  # [B]
    heads_of = (rows[:, None] * kv_heads + jnp.arange(kv_heads))[:, None, :]  # [B, 1, kv]
    at = positions[:, :, None]  # [B, T, 1]
    write = {"mode": "drop", "unique_indices": True}
    cache_k = cache_k.reshape(-1, head_dim, S).at[heads_of, :, at].set(k, **write).reshape(cache_k.shape)
    cache_v = cache_v.reshape(-1, S, head_dim).at[heads_of, at].set(v, **write).reshape(cache_v.shape)
    if jnp.ndim(row) == 1:  # gathered rows (a padding row reads the last one: its output is ignored)
        keys, values = jnp.take(cache_k, row, axis=0, mode="clip"), jnp.take(cache_v, row, axis=0, mode="clip")
    else:
        keys = jax.lax.dynamic_slice_in_dim(cache_k, row, B, axis=0)  # [B, kv, D, S]
        values = jax.lax.dynamic_slice_in_dim(cache_v, row, B, axis=0)  # [B, kv, S, D]
    q = q.reshape(B, T, kv_heads, heads // kv_heads, head_dim).transpose(0, 2, 1, 3, 4)  # [B, kv, T, G, D]
    scale = head_dim**-0.5 if scale is None else scale
    scores = jnp.einsum("bktgd,bkds->bktgs", q, keys, precision=PRECISION) * scale  # [B, kv, T, G, S]
    key_positions, query_positions = jnp.arange(S, dtype=jnp.int32), positions[:, None, :, None, None]
    visible = key_positions <= query_positions  # [B, 1, T, 1, S]
    if window is not None:
        visible &= key_positions > query_positions - window
    scores = jnp.where(visible, scores.astype(jnp.float32), -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)  # softmax in float32, as the reference does
    out = jnp.einsum("bktgs,bksd->bktgd", weights, values, precision=PRECISION)  # [B, kv, T, G, D]
    return out.transpose(0, 2, 1, 3, 4).reshape(B, T, heads * head_dim), (cache_k, cache_v)''',
    "silu_mul": '''
def silu_mul(gate, up):
    """SwiGLU: silu(gate) * up, [B, T, I]."""
    return jax.nn.silu(gate) * up''',
    "gelu_mul": '''
def gelu_mul(gate, up):
    """GeGLU: gelu(gate) (tanh approximation) * up, [B, T, I]."""
    return jax.nn.gelu(gate, approximate=True) * up''',
    "logits": '''
def output_head(x, head):
    """Logits: x [B, T, H] times the head [V, H] (the token embedding when tied) -> [B, T, V]."""
    return jnp.einsum("bth,vh->btv", x, head, precision=PRECISION)''',
    "argmax": '''
def greedy(logits):
    """Greedy next ids from the last position's logits [B, T, V] -> [B], on the device."""
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)''',
}

TEMPLATE = "jax_module.py.j2"


def name(value: str) -> str:
    return IDENTIFIERS.get(value, value)


def params_of(item: Op | Fused) -> list[tuple[str, tuple[str, ...]]]:
    """(parameter name, the weights it concatenates) for each weight argument of the item's call."""
    return list(item.weights.items()) if isinstance(item, Fused) else [(w, (w,)) for w in item.weights]


def render_op(op: Op, weight_ref: str, shape: str | None = None) -> str:
    """One op as one line of Python: `out = function(inputs, weights, attrs)  # shape`.

    weight_ref formats a parameter's name into an expression, e.g. 'p["{}"]' inside the block."""
    outs = [name(v) for v in op.out]
    ins = [name(v) for v in op.inputs]
    comment = f"  # {shape or op.shape}" if (shape or op.shape) else ""
    if op.kind == "add":
        return f"{outs[0]} = {ins[0]} + {ins[1]}{comment}"
    if op.kind == "argmax":
        assert op.attrs.get("at") == "last", op  # forward() runs the head on the last position only
        attrs = {}
    elif op.kind == "rope":  # its base, scaling and rotated dims became a table of the module's INV_FREQ
        attrs = {k: v for k, v in op.attrs.items() if k not in ("theta", "scaling", "table", "rotary_dim")}
        scale = rotation(op.attrs)[1]  # LongRoPE's factor on cos and sin
        attrs |= {"scale": scale} if scale != 1.0 else {}
    else:
        attrs = op.attrs
    if op.kind in CACHE_KINDS:
        ins, outs = [*ins, "cache", "row"], [*outs, "cache"]
    args = [*ins, *(weight_ref.format(w) for w in op.weights), *(f"{k}={v!r}" for k, v in attrs.items())]
    if op.kind == "rope":
        args.append(f"inv_freq=INV_FREQ[{op.attrs.get('table', 0)}]")
    return f"{', '.join(outs)} = {FUNCTIONS[op.kind]}({', '.join(args)}){comment}"


def render_group(item: Op | Fused, weight_ref: str, widths: dict[str, int]) -> str:
    """A lone op as render_op does; parallel linears as one call split into their outputs."""
    if not isinstance(item, Fused):
        return render_op(item, weight_ref)
    merged = Op("linear", ("_",), item.ops[0].inputs, tuple(item.weights))
    call = render_op(merged, weight_ref).split(" = ", 1)[1]
    ends = list(itertools.accumulate(widths[op.weights[0]] for op in item.ops))[:-1]
    outs = ", ".join(name(op.out[0]) for op in item.ops)
    return f"{outs} = jnp.split({call}, {ends}, axis=-1)  # {', '.join(op.shape for op in item.ops)}"


def python_list(names: list[str]) -> str:
    """A list literal of strings: on one line for one name, else one name per line (indented for a dict entry)."""
    if len(names) == 1:
        return json.dumps(names)
    return "[\n" + "".join(f"        {json.dumps(n)},\n" for n in names) + "    ]"


def emit_module(decoder: Decoder, options: CompileOptions = CompileOptions(), title: str = "Linnet") -> str:
    """The generated module's source text."""
    config = decoder.config
    kinds = [op.kind for op in (*decoder.prologue, *decoder.block, *decoder.epilogue)]
    helpers = "\n\n\n".join(HELPERS[k].strip("\n") for k in dict.fromkeys(kinds) if k in HELPERS)
    layer = decoder.weights_of_layer(0)
    hf_of = {w.name.removeprefix("layers.{layer}."): w.source for w in decoder.block_weights}
    block = parallel_linears(decoder.block)
    layer_params = dict(p for group in block for p in params_of(group))  # first use order
    assert sorted(w for ws in layer_params.values() for w in ws) == sorted(layer), "every layer weight once"
    f32 = options.dtype == "f32"
    ropes = [next(op for op in ops if op.kind == "rope") for ops in decoder.blocks()]
    for r in ropes:
        check_positions(r.attrs, options.max_positions)
    inv_freqs = [rotation(r.attrs)[0] for r in ropes]

    def numbered(ops: tuple[Op, ...], n: int) -> tuple[Op, ...]:
        """The block's ops with its rope reading INV_FREQ[n]."""
        return tuple(Op(o.kind, o.out, o.inputs, o.weights, o.shape, {**o.attrs, "table": n}) if o.kind == "rope" else o
                     for o in ops)  # fmt: skip

    widths = {n: w.shape[0] for n, w in layer.items()}
    blocks = [[render_group(g, 'p["{}"]', widths) for g in parallel_linears(numbered(ops, n))]
              for n, ops in enumerate(decoder.blocks())]  # fmt: skip
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template(TEMPLATE).render(
        title=title,
        c=config,
        dtype_name=long_name(options.dtype),
        precision="HIGHEST" if f32 else "DEFAULT",
        precision_why="float32 matmuls in full float32 (no TF32 or bf16 passes on a GPU)"
        if f32
        else "the dtype's own matmuls, accumulating in float32",
        helpers=helpers,
        architecture=config.architecture.HF_CLASS.removesuffix("ForCausalLM"),
        inv_freqs=[", ".join(repr(float(f)) for f in values) for values in inv_freqs],
        block_of_layer=repr(list(decoder.variant_of_layer())),
        prologue_lines=[render_op(op, 'params["{}"]') for op in decoder.prologue],
        blocks=blocks,
        # the epilogue runs on the last position: T is 1 there
        epilogue_lines=[render_op(op, 'params["{}"]', op.shape.replace("T", "1")) for op in decoder.epilogue],
        global_params=[(w.name, python_list([w.source])) for w in decoder.global_weights],
        layer_params=[(p, python_list([hf_of[w] for w in ws])) for p, ws in layer_params.items()],
        reader=inspect.getsource(read_safetensors),
    )


def write_module(decoder: Decoder, out: Path, options: CompileOptions = CompileOptions(), title: str = "Linnet") -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / MODULE_FILE
    path.write_text(emit_module(decoder, options, title))
    return path


def import_module(path: Path, module_name: str = "linnet_jax_model"):
    """Imports a generated module from its file (a fresh module object each time)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def load_engine(decoder: Decoder, checkpoint: Path, work: Path, options: CompileOptions = CompileOptions(), device=None):
    """Emits the module into `work`, imports it and returns its Engine over the checkpoint's weights: options.batch
    rows of options.max_positions positions, on `device` (a jax.Device; JAX's default if None)."""
    module = import_module(write_module(decoder, work, options))
    return module.load_engine(checkpoint, options.batch, options.max_positions, device)


def compile_jax(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions) -> list[Path]:
    """The `jax` target: the generated module (it reads the checkpoint itself when it loads)."""
    return [write_module(decoder, out, options)]
