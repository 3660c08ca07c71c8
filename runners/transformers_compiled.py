"""transformers, compiled: the checkpoint's transformers model under torch.compile over a static cache, as
transformers' own generate does it: the decode step is compiled, the prefill (one call per prompt) runs eagerly. At
load its cached decode is proved against its own full forward (runners/_transformers.py), as the reference's is."""

from __future__ import annotations

import numpy as np
import torch
from transformers import StaticCache

from runners import base
from runners._torch import cuda_unavailable
from runners._transformers import cache_check_note, cache_keyword, check_cached_decode, check_tokens, forward, load_model


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        self.model = load_model(self.spec, "sdpa")
        self.keyword = cache_keyword(self.model)
        # checked eagerly: the compiled step takes the same keywords, and compiling here would move its first call's
        # compile into the load time
        checked = check_cached_decode(self.model, check_tokens(self.spec), self.spec.dtype,
                                      lambda ids, start, cache: self.forward(ids, start, cache, self.model.forward),
                                      self.new_cache)  # fmt: skip
        self.cache = self.new_cache()
        # "reduce-overhead" adds CUDA graphs on a GPU; on a CPU inductor's default mode is the fast one.
        mode = "reduce-overhead" if self.spec.device == "cuda" else None
        # dynamic=None, not False: the decode step's shapes are fixed anyway, but a sliding-window layer (Gemma 3)
        # keeps its offset as a Python int that changes every step once the window is full; specialized, that
        # recompiles each step until the recompile limit fails the run, while None makes it symbolic after one
        self.decode_forward = torch.compile(self.model.forward, mode=mode, fullgraph=True, dynamic=None)
        self.notes.append(f"static cache of {self.spec.max_positions} positions; decode step compiled on first call")
        self.notes.append(cache_check_note(*checked))

    def new_cache(self) -> StaticCache:
        return StaticCache(config=self.model.config, max_cache_len=self.spec.max_positions)

    def forward(self, ids: torch.Tensor, start: int, cache=None, step=None) -> torch.Tensor:
        """Logits [1, T, vocab] for ids [1, T] at positions start..start+T-1, written into the static cache (the
        runner's, or `cache`) by `step` (default: the compiled forward for one token, the eager one for a prompt)."""
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        if step is None:
            step = self.decode_forward if ids.shape[1] == 1 else self.model.forward
        return forward(step, self.keyword, ids, self.cache if cache is None else cache, cache_position=positions)

    def prefill(self, prompt):
        self.cache.reset()
        ids = torch.tensor([prompt], device=self.spec.device)
        self.position = len(prompt)
        self.next_id = self.forward(ids, 0)[:, -1].argmax(-1, keepdim=True)
        return self.next_id.item()

    def decode(self, n):
        out = []
        for _ in range(n):
            self.next_id = self.forward(self.next_id, self.position)[:, -1].argmax(-1, keepdim=True).clone()
            self.position += 1
            out.append(self.next_id.item())
        return out

    def score(self, ids, n_prefill):
        self.cache.reset()
        ids_t = torch.tensor([ids], device=self.spec.device)
        rows = [self.forward(ids_t[:, :n_prefill], 0)[0, -1].clone()]
        for t in range(n_prefill, len(ids)):
            rows.append(self.forward(ids_t[:, t : t + 1].clone(), t)[0, -1].clone())  # contiguous, as in decode
        return torch.stack(rows).float().cpu().numpy().astype(np.float32)
