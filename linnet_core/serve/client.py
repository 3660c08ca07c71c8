"""AsyncClient: linnet.serve from asyncio. `submit` queues a request at once (raising UserError or QueueFull
before anything streams) and returns a Stream of its events; the engine thread's events for a whole step
cross to the event loop in one call_soon_threadsafe, so the loop wakes once per step, not once per token."""

from __future__ import annotations

import asyncio
from collections import deque

from linnet_core.serve.engine_loop import ServeEngine
from linnet_core.serve.request import Event, Request, SamplingParams


class Stream:
    """The events of one request, as an async iterator; the last one carries finish_reason."""

    def __init__(self, client: AsyncClient, request: Request):
        self.client, self.request = client, request
        # a deque and one waiter rather than an asyncio.Queue: this runs for every token of every request
        self.pending: deque[Event] = deque()
        self.waiter: asyncio.Future | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None

    @property
    def id(self) -> str:
        return self.request.id

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Event:
        if self.finish_reason is not None:
            raise StopAsyncIteration
        while not self.pending:
            self.waiter = self.client.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        event = self.pending.popleft()
        if event.finish_reason is not None:
            self.finish_reason, self.error = event.finish_reason, event.error
        return event

    def push(self, event: Event) -> None:
        """On the event loop: one more event, waking the reader if it waits."""
        self.pending.append(event)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def cancel(self) -> None:
        """Gives the row back (a client went away); harmless once the request has finished."""
        if self.finish_reason is None:
            self.client.engine.cancel(self.id)

    async def tokens(self) -> list[int]:
        """Every new token id, once the request has finished."""
        out: list[int] = []
        async for event in self:
            out.extend(event.tokens)
        return out


class AsyncClient:
    def __init__(self, engine: ServeEngine):
        """Starts the engine's loop thread, delivering to the running event loop."""
        self.engine = engine
        self.loop = asyncio.get_running_loop()
        self.streams: dict[str, Stream] = {}
        engine.start(self._from_engine_thread)

    def submit(self, prompt: list[int], params: SamplingParams) -> Stream:
        request = Request(list(prompt), params)
        stream = Stream(self, request)
        self.streams[request.id] = stream  # before submit: the first event may come before it returns
        try:
            self.engine.submit(request)
        except BaseException:
            del self.streams[request.id]
            raise
        return stream

    def close(self) -> None:
        """Stops the engine loop; streams still open end with "cancelled"."""
        self.engine.stop()

    def _from_engine_thread(self, events: list[Event]) -> None:
        try:
            self.loop.call_soon_threadsafe(self._deliver, events)
        except RuntimeError:  # the event loop has closed: nobody is listening any more
            pass

    def _deliver(self, events: list[Event]) -> None:
        for event in events:
            stream = self.streams.get(event.request_id)
            if stream is None:
                continue
            stream.push(event)
            if event.finish_reason is not None:
                del self.streams[event.request_id]
