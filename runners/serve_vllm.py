"""vLLM serving rows: vLLM's asyncio engine (AsyncLLM, the engine behind `vllm serve`) in this process, its
KV-cache pool reserved up front, at most the workload's in-flight bound of sequences at once; greedy, EOS ignored,
each request streamed back token by token (output kind DELTA) to the harness's client.

`serve-vllm-linnet-export` runs the same on Linnet's `hf` export of the checkpoint. Both skip with the reason
where vllm is not installed (it is not installable on CPU-only machines)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from vllm import AsyncEngineArgs, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from runners import base

GPU_MEMORY_UTILIZATION = 0.85  # the fraction of GPU memory vLLM reserves (weights, activations, KV-cache pool)
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


class Runner(base.ServingRunner):
    @classmethod
    def unavailable(cls, spec):
        return None if spec.device == "cuda" else "vLLM serves on a GPU; this run is on the CPU"

    def checkpoint(self) -> Path:
        return Path(self.spec.checkpoint)

    def load(self):
        args = AsyncEngineArgs(
            model=str(self.checkpoint()),
            dtype=DTYPES[self.spec.dtype],
            max_model_len=self.max_positions,
            max_num_seqs=self.rows,
            gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
            enable_prefix_caching=False,  # the prompts share no prefixes; linnet.serve has no prefix cache
            skip_tokenizer_init=True,  # prompts and outputs are token ids
            seed=0,
        )
        self.engine = AsyncLLM.from_engine_args(args)
        self.ids = itertools.count()
        self.notes.append(f"vLLM AsyncLLM in process; KV-cache pool at gpu_memory_utilization {GPU_MEMORY_UTILIZATION}, "
                          f"at most {self.rows} sequences")  # fmt: skip

    async def generate(self, prompt, max_tokens):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False,
                                output_kind=RequestOutputKind.DELTA)  # fmt: skip
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=prompt), params, f"req-{next(self.ids)}"):
            new = out.outputs[0].token_ids
            if new:
                yield list(new)

    def close(self):
        self.engine.shutdown()


class LinnetExport(Runner):
    """vLLM on the checkpoint Linnet's `hf` export writes (its time is in the row's note)."""

    def checkpoint(self) -> Path:
        from linnet_core.hf import export

        out = self.spec.work / "hf-export"
        start = time.perf_counter()
        export(Path(self.spec.checkpoint), out)
        self.notes.append(f"linnet.hf.export ({time.perf_counter() - start:.0f} s), then vLLM on the exported checkpoint")
        return out
