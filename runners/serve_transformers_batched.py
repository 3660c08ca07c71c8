"""transformers, batched: transformers' own continuous batching (ContinuousBatchingManager, the engine behind
`model.generate_batch`), its paged cache sized to the workload, streamed to the client through its asyncio
result handlers. Greedy, EOS ignored."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import torch
from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig
from transformers.generation.continuous_batching.utils import WorkloadHints

from linnet_core.serve.backends import serving_cpu_threads
from linnet_core.serve.engine_loop import release_openmp_workers
from runners import base
from runners._torch import cuda_unavailable, torch_dtype


PAGE_SIZE = 256  # tokens per cache page (transformers' default)
MAX_BATCH_TOKENS = 2048  # tokens per forward pass: linnet.serve's prefill budget, so both batch alike
# The page's keyword: 5.17 (the GPU image's) names it block_size, later releases page_size (block_size deprecated)
PAGE_KEYWORD = next(f.name for f in dataclasses.fields(ContinuousBatchingConfig) if f.name in ("page_size", "block_size"))


class Runner(base.ServingRunner):
    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        torch.set_grad_enabled(False)
        if self.spec.device == "cpu":  # as many as linnet.serve's engines get
            torch.set_num_threads(serving_cpu_threads())
            self.notes.append(f"{torch.get_num_threads()} intra-op thread(s), as linnet.serve's rows")
        w = self.spec.serving_workload
        model = AutoModelForCausalLM.from_pretrained(self.spec.checkpoint, dtype=torch_dtype(self.spec.dtype))
        self.model = model.to(self.spec.device).eval()
        generation = GenerationConfig(do_sample=False, max_new_tokens=w.new_tokens, eos_token_id=-1, pad_token_id=0)
        # the paged cache sized to the workload (every in-flight request at its longest), not to the free memory
        batching = ContinuousBatchingConfig(
            max_requests_per_batch=self.rows,
            num_blocks=self.rows * -(-self.max_positions // PAGE_SIZE),
            **{PAGE_KEYWORD: PAGE_SIZE},
            max_batch_tokens=MAX_BATCH_TOKENS,
            allow_block_sharing=False,  # the prompts share no prefixes
        )
        hints = WorkloadHints(max_prompt_length=w.prompt_max, max_generated_length=w.new_tokens, num_requests=w.requests)
        self.manager = self.model.init_continuous_batching(generation, batching, hints)
        self.manager.warmup()
        release_openmp_workers()  # the manager steps the model on its own thread, as linnet.serve's loop does
        self.manager.start()
        self.ids = itertools.count()
        self.notes.append(f"transformers continuous batching: attention {self.model.config._attn_implementation}, "
                          f"at most {self.rows} requests and {MAX_BATCH_TOKENS} tokens per batch, "
                          f"{batching.num_blocks} cache pages of {PAGE_SIZE} tokens")  # fmt: skip

    async def generate(self, prompt, max_tokens):
        outputs: asyncio.Queue = asyncio.Queue()
        request_id = f"req-{next(self.ids)}"
        self.manager.register_result_handler(request_id, outputs.put_nowait)  # before the request can produce
        self.manager.add_request(prompt, request_id=request_id, max_new_tokens=max_tokens, streaming=True, eos_token_id=-1)
        seen = 0
        while True:
            out = await outputs.get()
            if out.error is not None:
                raise RuntimeError(f"transformers continuous batching failed request {request_id}: {out.error}")
            if len(out.generated_tokens) > seen:  # generated_tokens is cumulative
                yield out.generated_tokens[seen:]
                seen = len(out.generated_tokens)
            if out.is_finished():
                return

    def close(self):
        if manager := getattr(self, "manager", None):  # None when load failed before making it
            manager.stop(block=True, timeout=10)
