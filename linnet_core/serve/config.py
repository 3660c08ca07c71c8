"""The serving engine's settings: one frozen dataclass, validated when made."""

from __future__ import annotations

from dataclasses import dataclass

from linnet_core.errors import UserError


@dataclass(frozen=True)
class ServeConfig:
    rows: int = 64  # S: cache rows, the most requests decoding at once
    max_positions: int = 640  # L: positions per row; a prompt plus its new tokens must fit
    max_waiting: int = 256  # requests queued for a free row beyond the S running; one more is refused (HTTP 503)
    prefill_chunk: int = 512  # the longest prompt piece one prefill call writes; longer prompts take several
    prefill_budget: int = 2048  # prompt tokens prefilled per step, over all rows: bounds the decode stall
    # chunk lengths a backend compiles once each (e.g. XLA: powers of two); None takes any length
    prefill_buckets: tuple[int, ...] | None = None
    # the backend's unit of prefill work (XLA: a block of 32 positions, each chunk starting a block): a chunk spends
    # its tokens rounded up to whole units of the step's budget, so that a full step is the shape the budget names
    prefill_granule: int = 1

    def __post_init__(self):
        for name in ("rows", "max_positions", "prefill_chunk", "prefill_budget", "prefill_granule"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_waiting < 0:
            raise UserError(f"max_waiting must be at least 0, not {self.max_waiting}")
        if self.prefill_budget < self.prefill_chunk:
            raise UserError(f"prefill_budget ({self.prefill_budget}) must hold one chunk ({self.prefill_chunk})")
        if self.prefill_budget < self.prefill_granule:
            raise UserError(f"prefill_budget ({self.prefill_budget}) must hold one of the backend's blocks of "
                            f"{self.prefill_granule} tokens")  # fmt: skip
        if self.prefill_buckets is not None and 1 not in self.prefill_buckets:
            raise UserError(f"prefill_buckets {self.prefill_buckets} must include 1, so every prompt length is a sum of them")

    def chunk_length(self, remaining: int, budget: int) -> int:
        """How many of a prompt's remaining tokens the next chunk takes, within what is left of this step's budget
        (0: none); the chunk then spends chunk_cost() of it."""
        take = min(self.prefill_chunk, budget - budget % self.prefill_granule, remaining)
        if self.prefill_buckets is not None and take > 0:
            take = max(b for b in self.prefill_buckets if b <= take)
        return take

    def chunk_cost(self, take: int) -> int:
        """What a chunk of `take` tokens spends of its step's budget: its tokens in whole units of prefill_granule."""
        return -(-take // self.prefill_granule) * self.prefill_granule
