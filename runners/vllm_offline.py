"""vLLM: its offline engine on the checkpoint, one request at a time, greedy with EOS ignored.

The request is added to vLLM's engine and stepped until its first token exists (time to first token), then
until the rest do, so the protocol's prefill/decode split is vLLM's own scheduling, not two requests."""

from __future__ import annotations

import itertools
from pathlib import Path

from vllm import LLM, SamplingParams

from runners import _vllm, base


class Runner(base.Runner):
    @classmethod
    def unavailable(cls, spec):
        import torch

        if spec.device != "cuda" or not torch.cuda.is_available():
            return "vLLM's rows need a CUDA GPU"
        return None

    def model_dir(self) -> Path:
        """The checkpoint vLLM loads; the export row writes Linnet's export here."""
        return Path(self.spec.checkpoint)

    def load(self):
        settings = _vllm.Settings.from_options(self.spec.options)
        self.llm = LLM(**_vllm.engine_arguments(self.spec, self.model_dir(), settings))
        self.engine = self.llm.llm_engine
        self.sampling = SamplingParams(**_vllm.sampling_arguments(self.spec))
        self.request_ids = (str(i) for i in itertools.count())
        self.notes += _vllm.notes(settings)

    def prefill(self, prompt):
        self.request = next(self.request_ids)
        self.engine.add_request(self.request, {"prompt_token_ids": list(prompt)}, self.sampling)
        self.tokens: list[int] = []
        self.step_until(1)
        return self.tokens[0]

    def decode(self, n):
        start = len(self.tokens)
        self.step_until(start + n)
        return self.tokens[start : start + n]

    def step_until(self, count: int) -> None:
        """Steps the engine until the request has `count` tokens (outputs are cumulative)."""
        while len(self.tokens) < count:
            if not self.engine.has_unfinished_requests():
                raise RuntimeError(f"vLLM finished request {self.request} after {len(self.tokens)} of {count} tokens")
            for output in self.engine.step():
                if output.request_id == self.request:
                    self.tokens = list(output.outputs[0].token_ids)
        self.tokens = [int(t) for t in self.tokens]
