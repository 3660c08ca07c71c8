"""A request as the engine sees it: the prompt's token ids, how to sample, how far it has got, and the events
it streams out (new tokens as they are made, then the reason it finished)."""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from linnet_core.errors import UserError


# Temperatures below this are greedy, as in vLLM (its _SAMPLING_EPS): logits / 1e-320 overflow to infinity and the
# softmax samples garbage, while any temperature this small already puts all the mass on the argmax.
MIN_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16  # new tokens to generate, the first included
    temperature: float = 0.0  # below MIN_TEMPERATURE greedy (argmax on the device); else samples softmax(logits / temperature)
    top_p: float = 1.0  # nucleus sampling: keep the smallest set of tokens whose probability reaches top_p
    seed: int | None = None  # seeds this request's sampling; None draws a fresh seed
    ignore_eos: bool = False  # keep generating past the end-of-sequence token (the benchmark does)

    def __post_init__(self):
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise UserError(f"max_tokens must be a positive integer, not {repr(self.max_tokens)[:30]}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise UserError(f"temperature must be a number >= 0, not {self.temperature!r}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise UserError(f"top_p must be in (0, 1], not {self.top_p!r}")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < 2**64):
            raise UserError(f"seed must be an integer in [0, 2**64), not {str(self.seed)[:30]}")

    @property
    def greedy(self) -> bool:
        """Greedy requests take the engine's device argmax; top_p alone (temperature 0) is still greedy."""
        return self.temperature < MIN_TEMPERATURE


class Status(enum.Enum):
    WAITING = "waiting"  # queued for a free row
    PREFILLING = "prefilling"  # holds a row; its prompt is being written, a chunk per step
    DECODING = "decoding"  # its prompt is in the cache; one new token per step
    FINISHED = "finished"


@dataclass(frozen=True)
class Event:
    """What a request streams out after a step: its new tokens, and once it is done, why."""

    request_id: str
    tokens: tuple[int, ...]  # token ids made this step (often one)
    finish_reason: str | None = None  # "length" | "stop" (EOS) | "cancelled" | "error", on the last event
    error: str | None = None  # what went wrong, when finish_reason is "error"


_ids = itertools.count()


@dataclass(eq=False)
class Request:
    prompt: list[int]  # the prompt's token ids
    params: SamplingParams
    id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    status: Status = Status.WAITING
    row: int | None = None  # the cache row it holds, from admission to completion
    prefilled: int = 0  # prompt tokens written to its row so far
    output: list[int] = field(default_factory=list)  # the new token ids so far
    rng: np.random.Generator | None = field(default=None, repr=False)  # this request's sampling stream

    def __post_init__(self):
        if not self.prompt:
            raise UserError("the prompt is empty; send at least one token")
        if not self.params.greedy and self.rng is None:
            self.rng = np.random.default_rng(self.params.seed)

    @property
    def length(self) -> int:
        """Positions this request asks its row for: the prompt plus its new tokens (as OpenAI servers count)."""
        return len(self.prompt) + self.params.max_tokens

    @property
    def done_generating(self) -> bool:
        return len(self.output) >= self.params.max_tokens
