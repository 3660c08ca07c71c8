"""KerasHub, static batches: the architecture's causal LM (JAX backend) from the same Hugging Face checkpoint, serving by static
batching. Waiting requests are taken up to the workload's in-flight bound at a time; each batch is padded to
that many rows and to the longest possible prompt plus the new tokens, so one compiled generate() serves every
batch, and the whole batch runs to its end before the next starts. KerasHub's generate() does not stream: every
token of a request reaches the client when its batch returns. Greedy, EOS ignored."""

from __future__ import annotations

import asyncio

import numpy as np

from runners import _jax, base  # _jax configures JAX before its first import
from runners.kerashub import load_causal_lm, unavailable  # sets Keras's JAX backend before Keras is imported

import jax  # noqa: E402


class Runner(base.ServingRunner):
    @classmethod
    def unavailable(cls, spec):
        return unavailable(spec)

    def load(self):
        self.device, self.lm = load_causal_lm(self)
        # the compiled function generate() wraps: generate() then concatenates every output key, and Gemma 3's
        # include "images": None, which it cannot (the token ids are the same either way)
        self.generate_batch = self.lm.make_generate_function()
        self.notes.append(f"static batches of {self.rows} rows x {self.max_positions} positions: every batch runs to the "
                          "longest possible prompt plus the new tokens; no streaming (a batch's tokens arrive together)")  # fmt: skip

    async def start(self):
        self.waiting: asyncio.Queue = asyncio.Queue()
        self.batcher = asyncio.create_task(self.serve_batches())

    async def generate(self, prompt, max_tokens):
        done = asyncio.get_running_loop().create_future()
        await self.waiting.put((prompt, max_tokens, done))
        yield await done

    async def serve_batches(self):
        """Takes whatever is waiting (at least one, at most rows), runs it as one padded batch, repeats."""
        while True:
            batch = [await self.waiting.get()]
            while len(batch) < self.rows and not self.waiting.empty():
                batch.append(self.waiting.get_nowait())
            try:
                outputs = await asyncio.to_thread(self.run_batch, [(p, n) for p, n, _ in batch])
            except Exception as e:  # hand the failure to every client of the batch
                for *_, done in batch:
                    done.set_exception(e)
                continue
            for (*_, done), tokens in zip(batch, outputs):
                done.set_result(tokens)

    def run_batch(self, requests: list[tuple[list[int], int]]) -> list[list[int]]:
        """[rows, max_positions] token ids and mask, prompts left-aligned, unused rows a one-token dummy."""
        ids = np.zeros((self.rows, self.max_positions), dtype=np.int32)
        mask = np.zeros((self.rows, self.max_positions), dtype=bool)
        mask[:, 0] = True
        for i, (prompt, _) in enumerate(requests):
            ids[i, : len(prompt)], mask[i, : len(prompt)] = prompt, True
        with jax.default_device(self.device):
            out = np.asarray(self.generate_batch({"token_ids": ids, "padding_mask": mask}, stop_token_ids=None)["token_ids"])
        return [out[i, len(p) : len(p) + n].tolist() for i, (p, n) in enumerate(requests)]

    async def stop(self):
        self.batcher.cancel()

    def close(self):
        _jax.record_allocator_peak(self, self.device)
