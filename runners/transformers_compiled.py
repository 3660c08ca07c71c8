"""transformers, compiled: Qwen2ForCausalLM under torch.compile over a static cache, as transformers' own
generate does it: the decode step is compiled, the prefill (one call per prompt) runs eagerly."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForCausalLM, StaticCache

from runners import base
from runners._torch import cuda_unavailable, torch_dtype


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        torch.set_grad_enabled(False)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.spec.checkpoint, dtype=torch_dtype(self.spec.dtype), attn_implementation="sdpa"
        ).to(self.spec.device)
        self.model.eval()
        self.cache = StaticCache(config=self.model.config, max_cache_len=self.spec.max_positions)
        # "reduce-overhead" adds CUDA graphs on a GPU; on a CPU inductor's default mode is the fast one.
        mode = "reduce-overhead" if self.spec.device == "cuda" else None
        # dynamic=None, not False: the decode step's shapes are fixed anyway, but a sliding-window layer (Gemma 3)
        # keeps its offset as a Python int that changes every step once the window is full; specialized, that
        # recompiles each step until the recompile limit fails the run, while None makes it symbolic after one
        self.decode_forward = torch.compile(self.model.forward, mode=mode, fullgraph=True, dynamic=None)
        self.notes.append(f"static cache of {self.spec.max_positions} positions; decode step compiled on first call")

    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Logits [1, T, vocab] for ids [1, T] at positions start..start+T-1, written into the static cache."""
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        forward = self.decode_forward if ids.shape[1] == 1 else self.model.forward
        return forward(input_ids=ids, cache=self.cache, cache_position=positions, use_cache=True).logits

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
