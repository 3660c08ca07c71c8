"""The scheduler: a bounded queue of waiting requests and the requests holding rows. Each step it admits waiting
requests into free rows (first come, first served), hands out this step's prompt chunks within the prefill
budget (oldest admission first, so a long prompt is finished before a newer one starts), and names the rows
that decode. It holds no locks and touches no device: the engine loop calls it from one thread."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from linnet_core.errors import UserError
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.request import Request, Status
from linnet_core.serve.rows import RowPool


class QueueFull(Exception):
    """Every row is busy and the waiting queue is at its bound: the request is refused, not queued (HTTP 503)."""


@dataclass(frozen=True)
class PrefillChunk:
    request: Request
    start: int  # the first prompt position this chunk writes
    tokens: list[int]  # prompt[start : start + len(tokens)]

    @property
    def is_last(self) -> bool:
        """The chunk that completes the prompt: its greedy token (or logits) is the request's first new token."""
        return self.start + len(self.tokens) == len(self.request.prompt)


class Scheduler:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.pool = RowPool(config.rows)
        self.waiting: deque[Request] = deque()
        self.running: dict[str, Request] = {}  # by id, in admission order (dicts keep insertion order)

    def check(self, request: Request) -> None:
        """Refuses a request that can never run here (a user error), or that the queue cannot take now."""
        if request.length > self.config.max_positions:
            raise UserError(
                f"the prompt ({len(request.prompt)} tokens) plus max_tokens ({request.params.max_tokens}) needs "
                f"{request.length} positions; a row holds {self.config.max_positions}"
            )
        # rows free now are taken by the waiting queue's head at the next step; beyond them, max_waiting may wait
        if len(self.waiting) >= self.pool.num_free + self.config.max_waiting:
            raise QueueFull(
                f"{len(self.waiting)} requests are already waiting for {self.config.rows} rows (at most "
                f"{self.config.max_waiting} wait beyond the free rows); retry later"
            )

    def add(self, request: Request) -> None:
        self.check(request)
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self) -> list[Request]:
        """Moves waiting requests into free rows; returns the admitted ones."""
        admitted = []
        while self.waiting and self.pool.can_allocate():
            request = self.waiting.popleft()
            request.row = self.pool.allocate()
            request.status = Status.PREFILLING
            self.running[request.id] = request
            admitted.append(request)
        return admitted

    def prefill_chunks(self) -> list[PrefillChunk]:
        """This step's prompt pieces: at most prefill_chunk tokens each, prefill_budget tokens in all (each chunk's
        counted in whole units of the backend's prefill_granule)."""
        budget, chunks = self.config.prefill_budget, []
        for request in self.running.values():
            if request.status is not Status.PREFILLING:
                continue
            start = request.prefilled
            take = self.config.chunk_length(len(request.prompt) - start, budget)
            if take <= 0:
                break
            chunks.append(PrefillChunk(request, start, request.prompt[start : start + take]))
            budget -= self.config.chunk_cost(take)
        return chunks

    def decoding(self) -> list[Request]:
        return [r for r in self.running.values() if r.status is Status.DECODING]

    def finish(self, request: Request) -> None:
        """Gives the request's row back; the request leaves the scheduler."""
        if request.row is not None:
            self.pool.free(request.row)
        self.running.pop(request.id, None)
        request.status = Status.FINISHED

    def remove_waiting(self, request_id: str) -> Request | None:
        for request in self.waiting:
            if request.id == request_id:
                self.waiting.remove(request)
                request.status = Status.FINISHED
                return request
        return None
