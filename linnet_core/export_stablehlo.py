"""The `stablehlo` target of `linnet compile`: the generated JAX module's jitted `prefill`, `decode_step` and
`decode_steps` (n steps as one while loop),
exported with jax.export (StableHLO, for CPU and CUDA) and serialized to files, with a manifest that says how
to call them. linnet_core.stablehlo_engine runs them with a checkpoint's weights, without any model code.

Both take the weights as a flat list (the manifest's order) and the cache as (keys, values) per layer, so the
runtime needs no pytree of the model. The cache keeps its donation: the exported module marks each cache
array as aliased to its output (tf.aliasing_output), and the runtime calls it under jax.jit with that argument
donated, so XLA updates the cache in place. The prompt length is symbolic: one prefill artefact serves every
padded length."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from linnet_core.dtypes import long_name
from linnet_core.emit_jax import import_module, write_module
from linnet_core.graph import Decoder
from linnet_core.stablehlo_engine import FORMAT, FORMAT_VERSION, MANIFEST
from linnet_core.targets import CompileOptions

PLATFORMS = ("cpu", "cuda")
CACHE_ARG = 1  # both functions: (weights, cache, ...); the cache is the argument donated
FILES = {name: f"{name}.jaxexport" for name in ("prefill", "decode_step", "decode_steps")}


def export_functions(decoder: Decoder, options: CompileOptions):
    """(the jax.export.Exported of each function in FILES, the generated module they come from)."""
    import jax
    import jax.numpy as jnp

    with tempfile.TemporaryDirectory() as tmp:
        module = import_module(write_module(decoder, Path(tmp), options), "linnet_jax_export")
    if options.dtype == "f32":
        jax.config.update("jax_default_matmul_precision", "highest")
    dtype = jnp.dtype(long_name(options.dtype))
    shape_of = {w.source: w.shape for w in decoder.all_weights()}
    weights = [jax.ShapeDtypeStruct(concatenated(shape_of, hfs), dtype) for _, hfs in module.param_sources()]
    cache = jax.eval_shape(lambda: module.init_cache(options.batch, options.max_positions))  # shapes only
    rows = jax.ShapeDtypeStruct((options.batch,), jnp.int32)  # tokens and positions: one per row
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    prompt = jax.ShapeDtypeStruct((1, *jax.export.symbolic_shape("T")), jnp.int32)  # any padded length

    def export(fn, *args):
        return jax.export.export(fn, platforms=PLATFORMS)(*args)

    exported = {
        "prefill": export(module.prefill, weights, cache, rows, rows, prompt, scalar, scalar, scalar),
        "decode_step": export(module.decode_step, weights, cache, rows, rows),
        "decode_steps": export(module.decode_steps, weights, cache, rows, rows, scalar),
    }
    return exported, module


def concatenated(shape_of: dict, sources: list[str]) -> tuple[int, ...]:
    """A parameter's shape: its checkpoint tensors' (or their rows') shapes, concatenated along the first axis."""
    parts = [shape_of[hf] for hf in sources]
    return (sum(p[0] for p in parts), *parts[0][1:])


def compile_stablehlo(decoder: Decoder, checkpoint: Path, out: Path, options: CompileOptions) -> list[Path]:
    """Writes the functions' .jaxexport files and manifest.json into `out`; returns their paths."""
    import jax

    exported, module = export_functions(decoder, options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fn, exp in exported.items():
        path = out / FILES[fn]
        path.write_bytes(exp.serialize())
        written.append(path)
    keys, values = jax.eval_shape(lambda: module.init_cache(options.batch, options.max_positions))[0]
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "jax": jax.__version__,
        "platforms": list(PLATFORMS),
        "dtype": long_name(options.dtype),
        "rows": options.batch,
        "max_positions": options.max_positions,
        "min_prefill": module.MIN_PREFILL,
        "vocab_size": decoder.config.vocab_size,
        # in argument order; a parameter concatenates its checkpoint tensors along the first axis (a name
        # "tensor[start:stop]" reads those rows of a fused tensor)
        "weights": [{"name": name, "hf_names": hfs} for name, hfs in module.param_sources()],
        "cache": {"layers": decoder.config.num_hidden_layers, "keys": list(keys.shape), "values": list(values.shape)},
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
            "decode_steps": {
                "file": FILES["decode_steps"],
                "args": ["weights", "cache", "tokens", "positions", "n"],
                "returns": ["ids", "tokens", "positions", "cache"],
                "donate_argnums": [CACHE_ARG],
            },
        },
    }
    path = out / MANIFEST
    path.write_text(json.dumps(manifest, indent=2))
    return [*written, path]
