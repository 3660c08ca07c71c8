"""transformers, eager: the reference row. A greedy loop over Qwen2ForCausalLM with its dynamic cache."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from runners import base
from runners._torch import cuda_unavailable, torch_dtype


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        torch.set_grad_enabled(False)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.spec.checkpoint, dtype=torch_dtype(self.spec.dtype), attn_implementation="eager"
        ).to(self.spec.device)
        self.model.eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [1, T, vocab] for ids [1, T], appended to the cache."""
        return self.model(input_ids=ids, cache=self.cache, use_cache=True).logits

    def prefill(self, prompt):
        self.cache = DynamicCache(config=self.model.config)
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
        self.cache = DynamicCache(config=self.model.config)
        ids_t = torch.tensor([ids], device=self.spec.device)
        rows = [self.forward(ids_t[:, :n_prefill])[0, -1]]
        for t in range(n_prefill, len(ids)):
            rows.append(self.forward(ids_t[:, t : t + 1])[0, -1])
        return torch.stack(rows).float().cpu().numpy().astype(np.float32)
