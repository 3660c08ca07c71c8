"""KerasHub: the architecture's causal LM of keras_hub.models (its module's KERAS_HUB in linnet_core/arch/, with
how its cache build is called: KERAS_HUB_CACHE_ARGS) on Keras's JAX backend, loaded from the Hugging Face
checkpoint, greedy.

KerasHub's generate() is one jitted function: `_build_cache` runs the backbone over the whole padded sequence
(prompt + room for the new tokens) to seed its cache, then its sampler's while loop calls `call_with_cache` once
per token, inside XLA. To time the first token apart from the rest, this row runs exactly those pieces as two
jitted functions split at the first token: prefill = the cache build plus the loop's first step; decode = the
sampler's loop for the remaining tokens (still one XLA while loop). The score path is `call_with_cache`."""

from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np

from linnet_core.arch import declared
from linnet_core.checkpoint import read_config
from linnet_core.dtypes import long_name
from runners import _jax, base  # _jax configures JAX before Keras imports it

os.environ["KERAS_BACKEND"] = "jax"  # Keras picks its backend when it is first imported

import jax  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
from keras import ops  # noqa: E402


def keras_classes(spec):
    """(backbone class, causal-LM class) of keras_hub.models for the checkpoint's architecture, or a reason why
    KerasHub has none here."""
    arch = read_config(spec.checkpoint).architecture
    names = declared(arch, "KERAS_HUB")
    if names is None or not all(hasattr(keras_hub.models, n) for n in names):
        return f"KerasHub {keras_hub.__version__} has no causal LM for the {arch.MODEL_TYPE} architecture"
    return tuple(getattr(keras_hub.models, n) for n in names)


def unavailable(spec) -> str | None:
    classes = keras_classes(spec)
    return classes if isinstance(classes, str) else _jax.unavailable(spec)


def load_causal_lm(runner):
    """The row's JAX device and a greedy causal LM on the Hugging Face checkpoint (the KerasHub rows share it)."""
    device = _jax.device(runner)
    backbone_class, lm_class = keras_classes(runner.spec)
    with jax.default_device(device):
        # The backbone alone: a preset without tokenizer.json (synthetic weights) has no preprocessor.
        backbone = backbone_class.from_preset(str(runner.spec.checkpoint), dtype=long_name(runner.spec.dtype))
        lm = lm_class(backbone=backbone, preprocessor=None)
    lm.compile(sampler="greedy")
    return device, lm


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        return unavailable(spec)

    def load(self):
        self.device, self.lm = load_causal_lm(self)
        self.cache_args = declared(read_config(self.spec.checkpoint).architecture, "KERAS_HUB_CACHE_ARGS")
        # Explicit variable state, as KerasHub's own compiled generate passes it.
        self.state = ([v.value for v in self.lm.trainable_variables], [v.value for v in self.lm.non_trainable_variables])
        self.prefill_fn = jax.jit(self.first_token)
        self.decode_fn = jax.jit(self.remaining_tokens)
        self.build_fn = jax.jit(self.build_cache)
        self.step_fn = jax.jit(self.step_logits)
        self.notes.append(
            "KerasHub's generate split at the first token: time to first token = its cache build over prompt + new "
            "positions and its loop's first step; decode = its greedy sampler's XLA while loop for the rest"
        )

    @contextlib.contextmanager
    def stateless(self, state):
        trainable, non_trainable = state
        mapping = itertools.chain(zip(self.lm.trainable_variables, trainable), zip(self.lm.non_trainable_variables, non_trainable))
        with keras.StatelessScope(state_mapping=mapping):
            yield

    def build_lm_cache(self, token_ids):
        """KerasHub's cache build over token_ids [1, L], called with the arguments the architecture declares."""
        values = {"token_ids": token_ids, "padding_mask": ops.ones_like(token_ids, dtype="bool"), None: None}
        return self.lm._build_cache(*(values[a] for a in self.cache_args))

    def next(self, prompt, cache, index):
        """KerasHub's generate_step `next`: logits for the token before `index`, written into the cache."""
        token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
        logits, hidden_states, cache = self.lm.call_with_cache(token, cache, index - 1)
        return ops.squeeze(logits, axis=1), ops.squeeze(hidden_states, axis=1), cache

    def first_token(self, state, token_ids, index):
        """token_ids [1, L] (the prompt, then padding) -> (token_ids with the first new id at `index`, cache)."""
        with self.stateless(state):
            _, cache = self.build_lm_cache(token_ids)
            logits, _, cache = self.next(token_ids, cache, index)
            sampler = self.lm.sampler
            first = ops.cast(sampler.get_next_token(sampler.compute_probabilities(logits)), token_ids.dtype)
            return ops.slice_update(token_ids, [0, index], first[:, None]), cache

    def remaining_tokens(self, state, token_ids, cache, index):
        """The sampler's loop from `index` to the end of token_ids [1, L]."""
        mask = ops.arange(ops.shape(token_ids)[1])[None, :] < index  # [1, L]: ids the loop must not overwrite
        with self.stateless(state):
            return self.lm.sampler(next=self.next, prompt=token_ids, cache=cache, index=index, mask=mask, model=self.lm)

    def build_cache(self, state, token_ids):
        with self.stateless(state):
            return self.build_lm_cache(token_ids)[1]

    def step_logits(self, state, token, cache, index):
        """Logits [1, V] of token [1, 1] at position `index`, and the cache with it written."""
        with self.stateless(state):
            logits, _, cache = self.lm.call_with_cache(token, cache, index)
            return logits[:, 0], cache

    def prefill(self, prompt):
        self.prompt_len = len(prompt)
        token_ids = np.zeros((1, len(prompt) + self.spec.new_tokens), np.int32)  # generate pads to its max length
        token_ids[0, : len(prompt)] = prompt
        self.token_ids, self.cache = self.prefill_fn(self.state, token_ids, np.int32(len(prompt)))
        return int(self.token_ids[0, len(prompt)])

    def decode(self, n):
        first = self.prompt_len + 1
        assert n == self.token_ids.shape[1] - first, f"KerasHub's loop runs to its max length: {n} tokens asked"
        token_ids = self.decode_fn(self.state, self.token_ids, self.cache, np.int32(first))
        return np.asarray(token_ids[0, first:]).tolist()

    def score(self, ids, n_prefill):
        token_ids = np.zeros((1, len(ids)), np.int32)
        token_ids[0, :n_prefill] = ids[:n_prefill]
        cache = self.build_fn(self.state, token_ids)
        rows = []
        for t in range(n_prefill - 1, len(ids)):  # the last prefill token again, as generate's first step does
            logits, cache = self.step_fn(self.state, np.array([[ids[t]]], np.int32), cache, np.int32(t))
            rows.append(logits[0])
        return np.stack([np.asarray(r, dtype=np.float32) for r in rows])

    def close(self):
        _jax.record_allocator_peak(self, self.device)
