"""The HTTP API of `linnet serve`: OpenAI-compatible completions over linnet.serve, with FastAPI and uvicorn.

  POST /v1/completions  a prompt as text (when the checkpoint has a tokenizer) or as token ids; max_tokens,
                        temperature, top_p, seed, ignore_eos (as vLLM), stream (server-sent events)
  GET  /v1/models       the one model served
  GET  /health          200 with the rows in use and the queue, or 503 once the engine has failed

Bad input is a 4xx with an OpenAI-style error body saying what to fix: malformed JSON, an unknown field, a bad
value, a prompt too long for a row (400), another model's name (404). When every row is busy and the queue is
at its bound, 503. A client that disconnects cancels its request, which gives its row back at the next step."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from linnet_core.errors import UserError
from linnet_core.serve.backends import EngineSpec, make_engine
from linnet_core.serve.client import AsyncClient, Stream
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import EngineFailed, ServeEngine
from linnet_core.serve.request import SamplingParams
from linnet_core.serve.scheduler import QueueFull


@dataclass(frozen=True)
class ServerSettings:
    model: str  # the name /v1/models reports and requests may give
    checkpoint: Path  # the Hugging Face checkpoint directory
    backend: str = "torch"  # "torch" | "xla" | "ort" (or module:function)
    rows: int = 64  # S: cache rows
    positions: int = 640  # L: positions per row
    max_waiting: int = 256  # queued requests beyond the rows; one more is a 503
    dtype: str = "f32"  # "f32" | "f16" | "bf16"
    device: str = "cpu"  # "cpu" | "cuda"
    mode: str | None = None  # the backend's variant (torch: eager | inductor | cudagraphs); None picks per device
    host: str = "127.0.0.1"  # loopback unless asked otherwise
    port: int = 8000
    quant: str | None = None  # weight-only quantization of the engine's linear layers: None | "int8" (torch, ort)


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status == 503 else None
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "code": self.status}}, self.status, headers)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False  # a last chunk with the token counts


class CompletionBody(BaseModel):
    """The fields of an OpenAI completions request that linnet.serve honours; any other field is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    prompt: str | list[int]  # text (needs the checkpoint's tokenizer) or token ids
    model: str | None = None  # must name the served model when given
    max_tokens: int = 16  # OpenAI's default
    temperature: float | None = None  # None: the checkpoint's generation_config.json (greedy when do_sample is false)
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension: generate max_tokens whatever the tokens are
    n: int = 1  # only 1
    user: str | None = None  # accepted and ignored


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float = 1.0  # OpenAI's defaults, unless the checkpoint's generation_config.json says otherwise
    top_p: float = 1.0

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> SamplingDefaults:
        """Greedy when generation_config.json says do_sample: false (as transformers would decode)."""
        file = Path(checkpoint) / "generation_config.json"
        config = json.loads(file.read_text()) if file.exists() else {}
        if config.get("do_sample") is False:
            return cls(temperature=0.0, top_p=1.0)
        return cls(float(config.get("temperature", 1.0)), float(config.get("top_p", 1.0)))


def load_tokenizer(checkpoint: Path):
    """The checkpoint's tokenizer, or None when it has none (synthetic weights): prompts are then token ids."""
    if not any((Path(checkpoint) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint)


class TextStream:
    """Incremental detokenisation: text is released only once a multi-byte character is complete."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.sent = tokenizer, [], 0

    def push(self, tokens) -> str:
        if self.tokenizer is None:
            return ""
        self.ids.extend(tokens)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        stable = len(text.rstrip("\ufffd"))
        out, self.sent = text[self.sent : stable], max(self.sent, stable)
        return out


@dataclass
class Served:
    """What the routes share: the engine's client, the model's name and vocabulary, its tokenizer."""

    engine: ServeEngine
    model: str
    vocab_size: int
    tokenizer: Any
    defaults: SamplingDefaults
    notes: tuple[str, ...] = ()
    work: tempfile.TemporaryDirectory | None = None  # the backend's artefacts, removed with the server
    client: AsyncClient | None = None


def parse_body(raw: bytes, served: Served) -> tuple[CompletionBody, list[int], SamplingParams]:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    if isinstance(data.get("prompt"), list) and data["prompt"] and not isinstance(data["prompt"][0], int):
        raise APIError(400, "one prompt per request: send a string or a list of token ids")
    try:
        body = CompletionBody.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("str", "list[", "function")))
        message = "unknown field (not supported here)" if first["type"] == "extra_forbidden" else first["msg"]
        raise APIError(400, f"{where or 'body'}: {message}") from None
    if body.model is not None and body.model != served.model:
        raise APIError(404, f"model {body.model!r} is not served here; this server serves {served.model!r}", "not_found_error")
    if body.n != 1:
        raise APIError(400, "n: only one completion per request (n = 1)")
    if isinstance(body.prompt, str):
        if served.tokenizer is None:
            raise APIError(400, "prompt: this checkpoint has no tokenizer; send the prompt as a list of token ids")
        prompt = served.tokenizer.encode(body.prompt)
    else:
        prompt = body.prompt
        bad = next((t for t in prompt if not 0 <= t < served.vocab_size), None)
        if bad is not None:
            raise APIError(400, f"prompt: token id {bad} is outside the vocabulary [0, {served.vocab_size})")
    try:
        params = SamplingParams(
            max_tokens=body.max_tokens,
            temperature=served.defaults.temperature if body.temperature is None else body.temperature,
            top_p=served.defaults.top_p if body.top_p is None else body.top_p,
            seed=body.seed,
            ignore_eos=body.ignore_eos,
        )
    except UserError as e:
        raise APIError(400, str(e)) from None
    return body, prompt, params


def submit(served: Served, prompt: list[int], params: SamplingParams) -> Stream:
    try:
        return served.client.submit(prompt, params)
    except UserError as e:
        raise APIError(400, str(e)) from None
    except QueueFull as e:
        raise APIError(503, str(e), "overloaded_error") from None
    except EngineFailed as e:
        raise APIError(503, str(e), "server_error") from None


def completion_object(cid: str, served: Served, choices: list[dict], usage: dict | None = None) -> dict:
    out = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": served.model, "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return out


def usage_of(prompt: list[int], completion: int) -> dict:
    return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def stream_events(stream: Stream, served: Served, body: CompletionBody, prompt: list[int]) -> AsyncIterator[str]:
    """Server-sent events: a chunk per engine step that made tokens, the finish reason, then [DONE]."""
    cid, text, count = f"cmpl-{uuid.uuid4().hex}", TextStream(served.tokenizer), 0
    try:
        async for event in stream:
            count += len(event.tokens)
            if event.finish_reason == "error":
                yield sse({"error": {"message": event.error, "type": "server_error", "code": 500}})
                break
            if event.finish_reason == "cancelled":  # the server is stopping under this request
                yield sse({"error": {"message": "the server stopped before the request finished", "type": "server_error", "code": 503}})
                break
            choice = {"index": 0, "text": text.push(event.tokens), "token_ids": list(event.tokens),
                      "logprobs": None, "finish_reason": event.finish_reason}  # fmt: skip
            yield sse(completion_object(cid, served, [choice]))
        if body.stream_options is not None and body.stream_options.include_usage:
            yield sse(completion_object(cid, served, [], usage_of(prompt, count)))
        yield sse("[DONE]")
    finally:
        stream.cancel()  # a disconnect cancels this generator: the row is given back (no-op once finished)


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body has been read, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def complete(stream: Stream, served: Served, prompt: list[int], request: Request) -> JSONResponse:
    """A whole completion in one response; a client gone before the end cancels the request."""
    collect = asyncio.ensure_future(stream.tokens())
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():
            stream.cancel()
            collect.cancel()
    if not collect.done() or collect.cancelled():
        return JSONResponse({}, 499)  # nobody reads this: the client has gone
    tokens = collect.result()
    if stream.finish_reason == "error":
        raise APIError(500, stream.error or "the engine failed", "server_error")
    if stream.finish_reason == "cancelled":
        raise APIError(503, "the server stopped before the request finished", "server_error")
    choice = {"index": 0, "text": TextStream(served.tokenizer).push(tokens), "token_ids": tokens, "logprobs": None,
              "finish_reason": stream.finish_reason}  # fmt: skip
    return JSONResponse(completion_object(f"cmpl-{uuid.uuid4().hex}", served, [choice], usage_of(prompt, len(tokens))))


def create_app(served: Served) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        served.client = AsyncClient(served.engine)  # starts the engine loop, delivering to this event loop
        try:
            yield
        finally:
            served.client.close()

    app = FastAPI(title="linnet.serve", lifespan=lifespan)
    app.add_exception_handler(APIError, lambda request, e: e.response())

    @app.post("/v1/completions")
    async def completions(request: Request):
        body, prompt, params = parse_body(await request.body(), served)
        stream = submit(served, prompt, params)
        if body.stream:
            return StreamingResponse(stream_events(stream, served, body, prompt), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})  # fmt: skip
        return await complete(stream, served, prompt, request)

    @app.get("/v1/models")
    async def models():
        card = {"id": served.model, "object": "model", "created": 0, "owned_by": "linnet",
                "max_model_len": served.engine.config.max_positions}  # fmt: skip
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health():
        if served.engine.failure:
            return JSONResponse({"status": "failed", "reason": served.engine.failure}, 503)
        return {"status": "ok", "model": served.model, "backend": served.engine.name, "steps": served.engine.steps,
                "notes": list(served.notes), **served.engine.load()}  # fmt: skip

    return app


def build(settings: ServerSettings) -> Served:
    """Makes the backend's engine and the serving engine around it (the slow part: weights, compilation)."""
    from linnet_core.checkpoint import read_config

    config = read_config(settings.checkpoint)
    serve_config = ServeConfig(rows=settings.rows, max_positions=settings.positions, max_waiting=settings.max_waiting)
    if settings.positions > config.max_position_embeddings:
        raise UserError(f"--positions {settings.positions} is more than the model's {config.max_position_embeddings}")
    work = tempfile.TemporaryDirectory(prefix="linnet-serve-")
    spec = EngineSpec(settings.checkpoint, settings.rows, settings.positions, settings.dtype, settings.device,
                      Path(work.name), settings.mode, quant=settings.quant)  # fmt: skip
    built = make_engine(settings.backend, spec)
    serve_config = dataclasses.replace(serve_config, **built.serve_options)
    engine = ServeEngine(built.engine, serve_config, config.eos_token_id, name=settings.backend)
    return Served(engine, settings.model, config.vocab_size, load_tokenizer(settings.checkpoint),
                  SamplingDefaults.of_checkpoint(settings.checkpoint), tuple(built.notes), work)  # fmt: skip


def run_server(settings: ServerSettings, on_ready=print) -> None:
    """Builds the engine, then serves until interrupted (Ctrl-C or SIGTERM: in-flight requests end first)."""
    import uvicorn

    served = build(settings)
    on_ready(
        f"linnet.serve: {settings.model} on {settings.backend} ({', '.join(served.notes) or 'default'}), "
        f"{settings.rows} rows x {settings.positions} positions, http://{settings.host}:{settings.port}"
    )
    uvicorn.run(create_app(served), host=settings.host, port=settings.port, log_level="warning", access_log=False)
