"""The `stablehlo` target of `linnet compile`: the generated JAX module's jitted `prefill` and `decode_step`,
exported with jax.export (StableHLO, for CPU and CUDA) and serialized to files, with a manifest that says how
to call them. linnet_core.stablehlo_engine runs them with a checkpoint's weights, without any model code.

Both functions take flat lists (weights in the manifest's order, then the cache's arrays), so the runtime
needs no pytree of the model. The cache argument keeps its donation: the exported module marks each cache
array as aliased to its output (tf.aliasing_output), and the runtime calls it under jax.jit with that argument
donated, so XLA updates the cache in place. The prompt length is symbolic: one prefill artefact serves every
padded length."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from linnet_core.emit_jax import DTYPE_NAMES, import_module, write_module
from linnet_core.graph import Decoder
from linnet_core.stablehlo_engine import FORMAT, FORMAT_VERSION, MANIFEST
from linnet_core.targets import CompileOptions

PLATFORMS = ("cpu", "cuda")
CACHE_ARG = 1  # both functions: (weights, cache, ...); the cache is the argument donated
FILES = {"prefill": "prefill.jaxexport", "decode_step": "decode_step.jaxexport"}


def export_functions(decoder: Decoder, options: CompileOptions):
    """(the jax.export.Exported of prefill and decode_step, the weights' names in argument order)."""
    import jax
    import jax.numpy as jnp

    with tempfile.TemporaryDirectory() as tmp:
        module = import_module(write_module(decoder, Path(tmp), options), "linnet_qwen2_jax_export")
    if options.dtype == "f32":
        jax.config.update("jax_default_matmul_precision", "highest")
    dtype = jnp.dtype(DTYPE_NAMES[options.dtype])
    rows, c = options.batch, decoder.config

    def spec(shape, dt=dtype):
        return jax.ShapeDtypeStruct(tuple(shape), dt)

    # The params pytree with (Linnet name, HF name) at its leaves gives the flat order and the tree together.
    named = {w.name: (w.name, w.hf_name) for w in decoder.global_weights}
    named["layers"] = [{k: (w.name, w.hf_name) for k, w in decoder.weights_of_layer(n).items()} for n in range(c.num_hidden_layers)]
    names, params_tree = jax.tree_util.tree_flatten(named, is_leaf=lambda x: isinstance(x, tuple))
    shapes = {w.name: w.shape for w in decoder.all_weights()}
    weights = [spec(shapes[name]) for name, _ in names]
    cache_shape = (rows, c.num_key_value_heads, options.max_positions, c.head_dim)
    cache_tree = jax.tree_util.tree_structure(module.init_cache(1, 1))
    cache = [spec(cache_shape)] * cache_tree.num_leaves
    i32 = jnp.int32
    tokens, positions, scalar = spec([rows], i32), spec([rows], i32), spec([], i32)
    (length,) = jax.export.symbolic_shape("T")
    prompt = spec([1, length], i32)

    def prefill(weights, cache, tokens, positions, prompt, row, start, n):
        params, cache = params_tree.unflatten(weights), cache_tree.unflatten(cache)
        *out, cache = module.prefill(params, cache, tokens, positions, prompt, row, start, n)
        return (*out, jax.tree_util.tree_leaves(cache))

    def decode_step(weights, cache, tokens, positions):
        params, cache = params_tree.unflatten(weights), cache_tree.unflatten(cache)
        *out, cache = module.decode_step(params, cache, tokens, positions)
        return (*out, jax.tree_util.tree_leaves(cache))

    def export(fn, *args):
        return jax.export.export(jax.jit(fn, donate_argnums=CACHE_ARG), platforms=PLATFORMS)(*args)

    exported = {
        "prefill": export(prefill, weights, cache, tokens, positions, prompt, scalar, scalar, scalar),
        "decode_step": export(decode_step, weights, cache, tokens, positions),
    }
    return exported, names, module


def compile_stablehlo(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions) -> list[Path]:
    """Writes prefill.jaxexport, decode_step.jaxexport and manifest.json into `out`; returns their paths."""
    import jax

    exported, names, module = export_functions(decoder, options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fn, exp in exported.items():
        path = out / FILES[fn]
        path.write_bytes(exp.serialize())
        written.append(path)
    c = decoder.config
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "jax": jax.__version__,
        "platforms": list(PLATFORMS),
        "dtype": DTYPE_NAMES[options.dtype],
        "rows": options.batch,
        "max_positions": options.max_positions,
        "min_prefill": module.MIN_PREFILL,
        "vocab_size": c.vocab_size,
        "weights": [{"name": name, "hf_name": hf_name} for name, hf_name in names],
        "cache": {"arrays": 2 * c.num_hidden_layers, "shape": [options.batch, c.num_key_value_heads, options.max_positions, c.head_dim]},
        "functions": {
            "prefill": {
                "file": FILES["prefill"],
                "args": ["weights", "cache", "tokens", "positions", "prompt", "row", "start", "length"],
                "returns": ["next_id", "logits", "tokens", "positions", "cache"],
                "donate_argnums": [CACHE_ARG],
            },
            "decode_step": {
                "file": FILES["decode_step"],
                "args": ["weights", "cache", "tokens", "positions"],
                "returns": ["next_ids", "logits", "positions", "cache"],
                "donate_argnums": [CACHE_ARG],
            },
        },
    }
    path = out / MANIFEST
    path.write_text(json.dumps(manifest, indent=2))
    return [*written, path]
