"""transformers, eager: the reference row. A greedy loop over the checkpoint's transformers model (AutoModelForCausalLM)
with its dynamic cache. At load it proves its cached decode against its own full forward (runners/_transformers.py)
and refuses to be the reference otherwise."""

from __future__ import annotations

import numpy as np
import torch
from transformers import DynamicCache

from runners import base
from runners._torch import cuda_unavailable
from runners._transformers import cache_check_note, cache_keyword, check_cached_decode, check_tokens, forward, load_model


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        self.model = load_model(self.spec, "eager")
        self.keyword = cache_keyword(self.model)
        checked = check_cached_decode(self.model, check_tokens(self.spec), self.spec.dtype,
                                      lambda ids, start, cache: forward(self.model, self.keyword, ids, cache),
                                      self.new_cache)  # fmt: skip
        self.notes.append(cache_check_note(*checked))

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [1, T, vocab] for ids [1, T], appended to the cache."""
        return forward(self.model, self.keyword, ids, self.cache)

    def prefill(self, prompt):
        self.cache = self.new_cache()
        ids = torch.tensor([prompt], device=self.spec.device)
        self.next_id = self.forward(ids)[:, -1].argmax(-1, keepdim=True)  # [1, 1], stays on the device
        return self.next_id.item()

    def decode(self, n):
        out = []
        for _ in range(n):
            self.next_id = self.forward(self.next_id)[:, -1].argmax(-1, keepdim=True)
            out.append(self.next_id.item())
        return out

    def score(self, ids, n_prefill):
        self.cache = self.new_cache()
        ids_t = torch.tensor([ids], device=self.spec.device)
        rows = [self.forward(ids_t[:, :n_prefill])[0, -1]]
        for t in range(n_prefill, len(ids)):
            rows.append(self.forward(ids_t[:, t : t + 1])[0, -1])
        return torch.stack(rows).float().cpu().numpy().astype(np.float32)
