"""Serving runners for the serving protocol's own tests: a steady fake, and one that cuts a request short."""

import asyncio

from runners import base

STARTING_S = 0.5


class Steady(base.ServingRunner):
    """Counts upwards, a token per millisecond or so; records how many requests were ever open at once."""

    def load(self):
        self.open = 0
        self.metrics["most_open"] = 0

    async def start(self):
        await asyncio.sleep(STARTING_S)  # as a server that compiles its steps when it starts

    async def generate(self, prompt, max_tokens):
        self.open += 1
        self.metrics["most_open"] = max(self.metrics["most_open"], self.open)
        try:
            for i in range(max_tokens):
                await asyncio.sleep(0.001)
                yield [len(prompt) + i]
        finally:
            self.open -= 1


class CutShort(Steady):
    async def generate(self, prompt, max_tokens):
        async for new in super().generate(prompt, max_tokens - (len(prompt) % 2)):
            yield new
