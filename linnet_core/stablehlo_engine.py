"""Running `linnet compile --target stablehlo` artefacts: deserialize the exported prefill and decode steps, read
the weights the manifest names from a checkpoint, and drive them as linnet_core.engine.Engine says.

No model code is imported here: the model is the serialized StableHLO. What this module knows is the calling
convention the manifest spells out (a flat weight list, the cache donated, last tokens and positions on the
device)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from linnet_core.errors import UserError
from linnet_core.safetensors_np import read_safetensors

MANIFEST = "manifest.json"
FUNCTIONS = ("prefill", "decode_step", "decode_steps")  # the manifest's "functions", as the Engine calls them
FORMAT, FORMAT_VERSION = "linnet-stablehlo", 2  # 2: decode_steps


def read_manifest(artefacts: Path) -> dict:
    path = Path(artefacts) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable StableHLO manifest ({e}); run `linnet compile --target stablehlo`") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise UserError(f"{path}: format {manifest.get('format')} v{manifest.get('version')}, this Linnet reads {FORMAT} v{FORMAT_VERSION}")
    return manifest


def load_function(artefacts: Path, entry: dict):
    """The deserialized function, jitted with the manifest's donated arguments (which keeps the in-place cache)."""
    exported = jax.export.deserialize(bytearray((Path(artefacts) / entry["file"]).read_bytes()))
    return jax.jit(exported.call, donate_argnums=tuple(entry["donate_argnums"]))


class Engine:
    """rows x max_positions static KV cache; prefill one row, decode steps over all rows, score through row 0."""

    def __init__(self, manifest: dict, functions: dict, weights: list, device=None):
        self.rows, self.max_positions = manifest["rows"], manifest["max_positions"]
        self.min_prefill = manifest["min_prefill"]
        self.prefill_fn, self.decode_fn, self.decode_steps_fn = (functions[f] for f in FUNCTIONS)
        self.weights = weights
        cache, dtype = manifest["cache"], jnp.dtype(manifest["dtype"])
        self.cache = [
            (jnp.zeros(cache["keys"], dtype, device=device), jnp.zeros(cache["values"], dtype, device=device))
            for _ in range(cache["layers"])
        ]  # per layer (keys, values)
        self.tokens = jnp.zeros((self.rows,), jnp.int32, device=device)  # [R] each row's last token
        self.positions = jnp.zeros((self.rows,), jnp.int32, device=device)  # [R] where its next token goes

    def prefill(self, row, tokens, start=0):
        return int(self.prefill_on_device(row, tokens, start)[0])

    def step(self):
        return np.asarray(self.step_on_device()[0])

    def generate(self, n):
        """n decode steps in one call (the exported while loop): int [n, rows], as n calls of step()."""
        if not 0 <= n <= self.max_positions:
            raise ValueError(f"{n} decode steps do not fit rows of {self.max_positions} positions")
        ids, self.tokens, self.positions, self.cache = self.decode_steps_fn(
            self.weights, self.cache, self.tokens, self.positions, np.int32(n)
        )
        return np.asarray(ids)[:n]

    def score(self, tokens, n_prefill):
        if len(tokens) > self.max_positions:  # the decode step would keep rewriting the last position
            raise ValueError(f"cannot score {len(tokens)} tokens: the cache has {self.max_positions} positions")
        rows = [self.prefill_on_device(0, tokens[:n_prefill])[1]]
        for token in tokens[n_prefill:]:
            self.tokens = self.tokens.at[0].set(token)  # teacher forcing: row 0 consumes the given token
            rows.append(self.step_on_device()[1][0])
        return np.stack([np.asarray(r, dtype=np.float32) for r in rows])

    def prefill_logits(self, row, tokens, start=0):
        """prefill(), returning the last position's f32 logits [V] on the host (for sampling)."""
        return np.asarray(self.prefill_on_device(row, tokens, start)[1], dtype=np.float32)

    def step_logits(self, tokens):
        """step(), except that row r reads tokens[r] (int [R], e.g. a sampled token) instead of its last token;
        returns f32 logits [R, V] on the host."""
        self.tokens = jax.device_put(np.asarray(tokens, dtype=np.int32), self.tokens.sharding)  # [R]: read next
        return np.asarray(self.step_on_device()[1], dtype=np.float32)

    def prefill_on_device(self, row, tokens, start=0):
        n = len(tokens)
        if not 0 <= row < self.rows or n < 1 or start < 0 or start + n > self.max_positions:
            raise ValueError(f"prefill of {n} tokens at {start} in row {row} does not fit {self.rows} x {self.max_positions}")
        # Padded to a power of two (one compile per length), as the generated module does.
        prompt = np.zeros((1, min(max(self.min_prefill, 1 << (n - 1).bit_length()), self.max_positions)), np.int32)
        prompt[0, :n] = tokens
        scalars = (np.int32(row), np.int32(start), np.int32(n))
        next_id, logits, self.tokens, self.positions, self.cache = self.prefill_fn(
            self.weights, self.cache, self.tokens, self.positions, prompt, *scalars
        )
        return next_id, logits

    def step_on_device(self):
        next_ids, logits, self.positions, self.cache = self.decode_fn(self.weights, self.cache, self.tokens, self.positions)
        self.tokens = next_ids
        return next_ids, logits


def load_engine(artefacts: Path, checkpoint: Path, device=None) -> Engine:
    """An Engine over the artefacts in `artefacts` and the weights of a Hugging Face checkpoint directory."""
    manifest = read_manifest(artefacts)
    functions = {f: load_function(artefacts, manifest["functions"][f]) for f in FUNCTIONS}
    dtype = jnp.dtype(manifest["dtype"])
    sources = [w["hf_names"] for w in manifest["weights"]]
    tensors = read_safetensors(checkpoint, [hf for hfs in sources for hf in hfs])
    # each tensor dropped once placed, so its file pages leave the process (read_safetensors)
    weights = [jax.device_put(np.concatenate([tensors.pop(hf) for hf in hfs]).astype(dtype), device) for hfs in sources]
    return Engine(manifest, functions, weights, device)
