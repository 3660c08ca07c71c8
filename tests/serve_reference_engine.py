"""A reference Engine for linnet.serve's tests only: transformers' Qwen2 run on each row's whole sequence at every
call (no cache), so it is slow and obviously right. It keeps the contract of linnet_core/engine.py, including
the optional logits methods, without being a Linnet engine: production backends are in linnet_core/serve/backends.py."""

from __future__ import annotations

import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from linnet_core.serve.backends import Built, EngineSpec


class ReferenceEngine:
    def __init__(self, checkpoint, rows: int, max_positions: int):
        torch.set_grad_enabled(False)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager").eval()
        self.rows, self.max_positions = rows, max_positions
        self.sequences: list[list[int]] = [[] for _ in range(rows)]  # the tokens at positions 0.. of each row
        self.last = np.zeros(rows, dtype=np.int64)  # each row's last token
        self.calls = {"prefill": 0, "step": 0}

    @torch.no_grad()  # grad mode is per thread, and linnet.serve calls from its loop thread
    def _logits(self, tokens: list[int]) -> np.ndarray:
        return self.model(input_ids=torch.tensor([tokens])).logits[0, -1].float().numpy()

    def prefill_logits(self, row, tokens, start=0):
        assert 0 <= start <= len(self.sequences[row]) and start + len(tokens) <= self.max_positions, (start, len(tokens))
        self.calls["prefill"] += 1
        self.sequences[row] = self.sequences[row][:start] + list(tokens)
        logits = self._logits(self.sequences[row])
        self.last[row] = int(logits.argmax())
        return logits

    def prefill(self, row, tokens, start=0):
        return int(self.prefill_logits(row, tokens, start).argmax())

    def step_logits(self, tokens):
        self.calls["step"] += 1
        out = np.zeros((self.rows, self.model.config.vocab_size), dtype=np.float32)
        for row in range(self.rows):
            if self.sequences[row]:  # a row never prefilled stays empty: its output is ignored anyway
                assert len(self.sequences[row]) < self.max_positions, f"row {row} would write past its positions"
                self.sequences[row].append(int(tokens[row]))
                out[row] = self._logits(self.sequences[row])
        self.last = out.argmax(axis=-1)
        return out

    def step(self):
        return self.step_logits(self.last).argmax(axis=-1)

    def score(self, tokens, n_prefill):
        """Logits after each prefix tokens[:n_prefill], tokens[:n_prefill + 1], ...: what the cache path computes."""
        return np.stack([self._logits(list(tokens[:n])) for n in range(n_prefill, len(tokens) + 1)])


class SlowEngine(ReferenceEngine):
    """At least STEP_S per decode step, however fast the machine: rows stay busy long enough to test the load paths."""

    STEP_S = 0.01

    def step_logits(self, tokens):
        time.sleep(self.STEP_S)
        return super().step_logits(tokens)


def make_engine(spec: EngineSpec) -> Built:
    """The backend function: `--backend tests.serve_reference_engine:make_engine`."""
    return Built(ReferenceEngine(spec.checkpoint, spec.rows, spec.max_positions), notes=["reference engine (tests only)"])


def make_slow_engine(spec: EngineSpec) -> Built:
    """`--backend tests.serve_reference_engine:make_slow_engine`: a request of n tokens takes at least n x 10 ms."""
    return Built(SlowEngine(spec.checkpoint, spec.rows, spec.max_positions), notes=["slow reference engine (tests only)"])
