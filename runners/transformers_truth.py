"""The float64 truth every row is measured against besides the reference: the checkpoint's transformers model in
float64 on the CPU, one full causal forward over the probe (teacher forcing: every probe token is given, none is
generated), with no cache anywhere. It is never timed and is no row of the page.

Why beside the reference: the reference runs in the run's dtype and on its device, so in 16 bits its own rounding is as
large as any row's, and a reference that is wrong (a cache its transformers release ignores) would make every right
row look wrong. The truth has neither problem; each row's `truth_ratio` is its distance from the truth over the
reference's, so a row that rounds like transformers sits near 1 (harness/bench.py, harness/bounds.py)."""

from __future__ import annotations

import numpy as np
import torch

from runners import base
from runners._transformers import load_model


class Runner(base.Runner):
    def load(self):
        self.model = load_model(self.spec, "eager", dtype=torch.float64, device="cpu")
        self.notes.append("transformers in float64 on the CPU, one full causal forward over the probe")

    def score(self, ids, n_prefill):
        """Float64 logits [len(ids) - n_prefill + 1, vocab]: the positions Runner.score returns, from one forward."""
        logits = self.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]  # [T, vocab]
        return logits[n_prefill - 1 :].numpy().astype(np.float64)
