"""vLLM serving rows: vLLM's asyncio engine (AsyncLLM, the engine behind `vllm serve`) in this process, its
KV-cache pool reserved up front, at most the workload's in-flight bound of sequences at once; greedy, EOS ignored,
each request streamed back as it is made (output kind DELTA) to the harness's client. The engine and sampling
arguments are the single-request vLLM rows' (runners/_vllm.py), sized for many sequences.

`serve-vllm-linnet-export` runs the same on Linnet's `hf` export of the checkpoint. Both skip with the reason
where vllm is not installed (it is not installable on CPU-only machines)."""

from __future__ import annotations

import itertools
from pathlib import Path

from vllm import AsyncEngineArgs, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from runners import _vllm, base


class Runner(base.ServingRunner):
    @classmethod
    def unavailable(cls, spec):
        return None if spec.device == "cuda" else "vLLM serves on a GPU; this run is on the CPU"

    def model_dir(self) -> Path:
        return Path(self.spec.checkpoint)

    def load(self):
        settings = _vllm.Settings.from_options(self.spec.options)
        arguments = _vllm.engine_arguments(self.spec, self.model_dir(), settings)
        arguments.update(max_model_len=self.max_positions, max_num_seqs=self.rows)  # many sequences, not one
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**arguments))
        self.ids = itertools.count()
        self.notes += [f"vLLM's AsyncLLM in process, at most {self.rows} sequences", *_vllm.notes(settings)]

    async def generate(self, prompt, max_tokens):
        params = SamplingParams(**{**_vllm.sampling_arguments(self.spec), "max_tokens": max_tokens},
                                output_kind=RequestOutputKind.DELTA)  # fmt: skip
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt), params, f"req-{next(self.ids)}"):
            new = out.outputs[0].token_ids
            if new:
                yield list(new)

    def close(self):
        self.engine.shutdown()


class LinnetExport(Runner):
    """vLLM on the checkpoint Linnet's `hf` export writes at load (its time is in the load time and the note)."""

    def load(self):
        self.export_dir = _vllm.export_hf_at_load(self)
        super().load()

    def model_dir(self) -> Path:
        return self.export_dir
