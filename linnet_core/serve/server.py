"""The HTTP API of `linnet serve`: OpenAI-compatible completions over linnet.serve, with FastAPI and uvicorn.

  POST /v1/completions       a prompt as text or as token ids; max_tokens, temperature, top_p, seed, ignore_eos
                             (as vLLM), stream (server-sent events), stream_options.include_usage
  POST /v1/chat/completions  messages through the checkpoint's chat template; the same fields (and
                             max_completion_tokens), answered as chat.completion / chat.completion.chunk
  GET  /v1/models       the one model served
  GET  /health          200 with the rows in use and the queue, or 503 once the engine has failed

Bad input is a 4xx with an OpenAI-style error body saying what to fix: malformed JSON, an unknown field, a bad
value, a prompt too long for a row (400), another model's name (404). When every row is busy and the queue is
at its bound, 503. A client that disconnects cancels its request, which gives its row back at the next step.

Streams send one token per chunk, the first as soon as the request's prefill has made it; with
stream_options.include_usage every chunk has "usage": null and a last chunk (choices []) has the counts, as
OpenAI's API does."""

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
from typing import Any, AsyncIterator, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from linnet_core.errors import UserError
from linnet_core.serve.backends import EngineSpec, make_engine
from linnet_core.serve.client import AsyncClient, Stream
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import EngineFailed, ServeEngine
from linnet_core.serve.guard import Guard, GuardSettings, bind, settings_for, timed_protocol, url_host
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
    api_key: str | None = None  # when set, a bearer token every route but /health requires (guard.py)
    request_timeout_s: float = 30.0  # the longest wait for a request's headers or the next part of its body
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
    continuous_usage_stats: bool = False  # vLLM's extension: every chunk carries the counts so far


class GenerationFields(BaseModel):
    """The fields both routes honour; any other field is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = None  # must name the served model when given
    max_tokens: int | None = None  # None: completions 16 (OpenAI's default), chat what the row has left
    temperature: float | None = None  # None: the checkpoint's generation_config.json (greedy when do_sample is false)
    top_p: float | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension: generate max_tokens whatever the tokens are
    n: int = 1  # only 1
    stop: str | list[str] | None = None  # only none: stop sequences are not supported (load generators send null)
    # what clients send at their neutral values; any other value is refused (NEUTRAL)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # vLLM's
    logprobs: bool | int | None = None
    echo: bool = False
    user: str | None = None  # accepted and ignored

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


# fields accepted only at the values that change nothing, the first the one to name in an error
NEUTRAL = {"presence_penalty": (0.0,), "frequency_penalty": (0.0,), "repetition_penalty": (1.0,),
           "logprobs": (None, False, 0), "echo": (False,)}  # fmt: skip


class CompletionBody(GenerationFields):
    prompt: str | list[int]  # text (through the checkpoint's tokenizer) or token ids


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]  # a string, or OpenAI's list of text parts (joined)
    name: str | None = None  # accepted and ignored

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatBody(GenerationFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None  # OpenAI's newer name for max_tokens


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
    """The checkpoint's tokenizer (synthetic checkpoints have one too), or None: prompts are then token ids."""
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


def validate(raw: bytes, model: type[GenerationFields], served: Served) -> Any:
    """The request body as `model`, or a 4xx that names the first bad field."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    if isinstance(data.get("prompt"), list) and data["prompt"] and not isinstance(data["prompt"][0], int):
        raise APIError(400, "one prompt per request: send a string or a list of token ids")
    try:
        body = model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("str", "list[", "function", "literal")))
        message = "unknown field (not supported here)" if first["type"] == "extra_forbidden" else first["msg"]
        raise APIError(400, f"{where or 'body'}: {message}") from None
    if body.model is not None and body.model != served.model:
        raise APIError(404, f"model {body.model!r} is not served here; this server serves {served.model!r}", "not_found_error")
    if body.n != 1:
        raise APIError(400, "n: only one completion per request (n = 1)")
    if body.stop:
        raise APIError(400, "stop: stop sequences are not supported here; send null (EOS still stops, unless ignore_eos)")
    for name, neutral in NEUTRAL.items():
        if getattr(body, name) not in neutral:
            raise APIError(400, f"{name}: not supported here; leave it out or send {neutral[0]!r}")
    return body


def sampling(body: GenerationFields, served: Served, max_tokens: int) -> SamplingParams:
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=served.defaults.temperature if body.temperature is None else body.temperature,
            top_p=served.defaults.top_p if body.top_p is None else body.top_p,
            seed=body.seed,
            ignore_eos=body.ignore_eos,
        )
    except UserError as e:
        raise APIError(400, str(e)) from None


def unicode_text(text: str, where: str) -> str:
    """The text, or a 400 when it holds a lone surrogate ("\\ud800" in JSON): valid JSON, but no Unicode text that a
    tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise APIError(400, f"{where}: not valid Unicode text (a lone surrogate {text[e.start]!r} at character {e.start})") from None
    return text


def needs_tokenizer(served: Served, what: str):
    if served.tokenizer is None:
        raise APIError(400, f"{what}: this checkpoint has no tokenizer; send the prompt to /v1/completions as a list of token ids")
    return served.tokenizer


def parse_completion(raw: bytes, served: Served) -> tuple[CompletionBody, list[int], SamplingParams]:
    body = validate(raw, CompletionBody, served)
    if isinstance(body.prompt, str):
        prompt = needs_tokenizer(served, "prompt").encode(unicode_text(body.prompt, "prompt"), add_special_tokens=False)
    else:
        prompt = body.prompt
        bad = next((t for t in prompt if not 0 <= t < served.vocab_size), None)
        if bad is not None:
            raise APIError(400, f"prompt: token id {bad} is outside the vocabulary [0, {served.vocab_size})")
    return body, prompt, sampling(body, served, 16 if body.max_tokens is None else body.max_tokens)


def parse_chat(raw: bytes, served: Served) -> tuple[ChatBody, list[int], SamplingParams]:
    """Messages through the checkpoint's chat template, with the assistant's turn opened."""
    body = validate(raw, ChatBody, served)
    tokenizer = needs_tokenizer(served, "messages")
    if not body.messages:
        raise APIError(400, "messages: send at least one message")
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, "messages: this checkpoint's tokenizer has no chat template; use /v1/completions")
    messages = [{"role": m.role, "content": unicode_text(m.text, f"messages.{i}.content")} for i, m in enumerate(body.messages)]
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # the template's own error (jinja2's TemplateError, or one it raises on purpose)
        raise APIError(400, f"messages: the chat template refused them ({str(e)[:200]})") from None
    prompt = tokenizer.encode(text, add_special_tokens=False)
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        raise APIError(400, "max_tokens, max_completion_tokens: send one of them")
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if max_tokens is None:  # as OpenAI: as many as fit (here, the rest of a row)
        max_tokens = max(1, served.engine.config.max_positions - len(prompt))
    return body, prompt, sampling(body, served, max_tokens)


def submit(served: Served, prompt: list[int], params: SamplingParams) -> Stream:
    try:
        return served.client.submit(prompt, params)
    except UserError as e:
        raise APIError(400, str(e)) from None
    except QueueFull as e:
        raise APIError(503, str(e), "overloaded_error") from None
    except EngineFailed as e:
        raise APIError(503, str(e), "server_error") from None


@dataclass(frozen=True)
class Shape:
    """How one route words its answers: OpenAI's text completion or its chat completion."""

    prefix: str  # of the response id
    whole: str  # the object of a whole answer
    chunk: str  # the object of a streamed chunk

    def choice(self, text: str, tokens: list[int], finish_reason: str | None, streamed: bool, first: bool = False) -> dict:
        if self is COMPLETION:
            return {"index": 0, "text": text, "token_ids": tokens, "logprobs": None, "finish_reason": finish_reason}
        if streamed:  # the first chunk names the role, as OpenAI's first chunk does
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            return {"index": 0, "delta": delta, "token_ids": tokens, "logprobs": None, "finish_reason": finish_reason}
        message = {"role": "assistant", "content": text}
        return {"index": 0, "message": message, "token_ids": tokens, "logprobs": None, "finish_reason": finish_reason}


COMPLETION = Shape("cmpl", "text_completion", "text_completion")
CHAT = Shape("chatcmpl", "chat.completion", "chat.completion.chunk")


def response_object(cid: str, kind: str, served: Served, choices: list[dict], **usage: Any) -> dict:
    """One answer or chunk; `usage` (when given, even None) is added under its key."""
    return {"id": cid, "object": kind, "created": int(time.time()), "model": served.model, "choices": choices, **usage}


def usage_of(prompt: list[int], completion: int) -> dict:
    return {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def stream_events(stream: Stream, served: Served, body: GenerationFields, prompt: list[int], shape: Shape) -> AsyncIterator[str]:
    """Server-sent events: a chunk per token (the last one with the finish reason), the usage, then [DONE]."""
    cid, text, count = f"{shape.prefix}-{uuid.uuid4().hex}", TextStream(served.tokenizer), 0
    usage = {"usage": None} if body.include_usage else {}
    continuous = body.stream_options is not None and body.stream_options.continuous_usage_stats
    try:
        async for event in stream:
            if event.finish_reason == "error":
                yield sse({"error": {"message": event.error, "type": "server_error", "code": 500}})
                break
            if event.finish_reason == "cancelled":  # the server is stopping under this request
                yield sse({"error": {"message": "the server stopped before the request finished", "type": "server_error", "code": 503}})
                break
            tokens = list(event.tokens) or [None]  # a finish without a token still gets its chunk
            for i, token in enumerate(tokens):
                ids = [] if token is None else [token]
                finish = event.finish_reason if i == len(tokens) - 1 else None
                choice = shape.choice(text.push(ids), ids, finish, streamed=True, first=count == 0)
                count += len(ids)
                if continuous:
                    usage = {"usage": usage_of(prompt, count)}
                yield sse(response_object(cid, shape.chunk, served, [choice], **usage))
        if body.include_usage:
            yield sse(response_object(cid, shape.chunk, served, [], usage=usage_of(prompt, count)))
        yield sse("[DONE]")
    finally:
        stream.cancel()  # a disconnect cancels this generator: the row is given back (no-op once finished)


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body has been read, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def complete(stream: Stream, served: Served, prompt: list[int], request: Request, shape: Shape) -> JSONResponse:
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
    choice = shape.choice(TextStream(served.tokenizer).push(tokens), tokens, stream.finish_reason, streamed=False)
    cid = f"{shape.prefix}-{uuid.uuid4().hex}"
    return JSONResponse(response_object(cid, shape.whole, served, [choice], usage=usage_of(prompt, len(tokens))))


def create_app(served: Served, guard: GuardSettings = GuardSettings()) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        served.client = AsyncClient(served.engine)  # starts the engine loop, delivering to this event loop
        try:
            yield
        finally:
            served.client.close()

    app = FastAPI(title="linnet.serve", lifespan=lifespan)
    app.add_exception_handler(APIError, lambda request, e: e.response())
    app.add_middleware(Guard, settings=guard)  # host, key, content type, body size and time: before any route

    async def answer(request: Request, body: GenerationFields, prompt: list[int], params: SamplingParams, shape: Shape):
        stream = submit(served, prompt, params)
        if body.stream:
            return StreamingResponse(stream_events(stream, served, body, prompt, shape), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})  # fmt: skip
        return await complete(stream, served, prompt, request, shape)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body, prompt, params = parse_completion(await request.body(), served)
        return await answer(request, body, prompt, params, COMPLETION)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body, prompt, params = parse_chat(await request.body(), served)
        return await answer(request, body, prompt, params, CHAT)

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
    check_cache_fits(settings, config)
    work = tempfile.TemporaryDirectory(prefix="linnet-serve-")
    spec = EngineSpec(settings.checkpoint, settings.rows, settings.positions, settings.dtype, settings.device,
                      Path(work.name), settings.mode, quant=settings.quant)  # fmt: skip
    try:
        built = make_engine(settings.backend, spec)
    except BaseException:  # a failed build, Ctrl-C or SIGTERM: no artefacts left behind
        work.cleanup()
        raise
    serve_config = dataclasses.replace(serve_config, **built.serve_options)
    engine = ServeEngine(built.engine, serve_config, config.eos_token_id, name=settings.backend)
    return Served(engine, settings.model, config.vocab_size, load_tokenizer(settings.checkpoint),
                  SamplingDefaults.of_checkpoint(settings.checkpoint), tuple(built.notes), work)  # fmt: skip


DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def check_cache_fits(settings: ServerSettings, config) -> None:
    """A one-line error, before any allocation, when the KV cache of --rows x --positions alone is larger than the
    device's free memory: the allocator's traceback (or the OOM killer) would say it later and worse."""
    per_row = (settings.positions * config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim
               * DTYPE_BYTES.get(settings.dtype, 4))  # fmt: skip
    free = free_memory(settings.device)
    if free is None or settings.rows * per_row <= free:
        return
    raise UserError(f"--rows {settings.rows} x --positions {settings.positions}: the KV cache alone needs "
                    f"{settings.rows * per_row / 2**30:.1f} GiB, and {settings.device} memory has {free / 2**30:.1f} GiB "
                    f"free; at most {free // per_row} rows of {settings.positions} positions fit (fewer beside the "
                    "weights)")  # fmt: skip


def free_memory(device: str) -> int | None:
    """Bytes free for the cache: available host memory on a CPU, the GPU's free memory on CUDA (None: unknown)."""
    if device != "cuda":
        import psutil

        return psutil.virtual_memory().available
    try:
        import torch

        return torch.cuda.mem_get_info()[0]
    except Exception:  # no torch, no CUDA build, no device: the backend says so itself
        return None


def run_server(settings: ServerSettings, on_ready=print) -> None:
    """Binds the port (a port in use is a one-line error before the slow build), builds the engine, says so once the
    port is bound, then serves until Ctrl-C or SIGTERM (in-flight requests end first; the artefacts are removed)."""
    import uvicorn

    sock = bind(settings.host, settings.port)
    served = None
    try:
        served = build(settings)
        port = sock.getsockname()[1]
        on_ready(
            f"linnet.serve: {settings.model} on {settings.backend} ({', '.join(served.notes) or 'default'}), "
            f"{settings.rows} rows x {settings.positions} positions, http://{url_host(settings.host)}:{port}"
        )
        app = create_app(served, settings_for(settings.host, settings.api_key, settings.request_timeout_s))
        config = uvicorn.Config(app, log_level="warning", access_log=False, http=timed_protocol(settings.request_timeout_s),
                                timeout_keep_alive=min(5, settings.request_timeout_s))  # fmt: skip
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # a stop asked for (uvicorn re-raises the SIGTERM or Ctrl-C it handled): the cleanup below, exit 0
    finally:
        sock.close()
        if served is not None and served.work is not None:
            served.work.cleanup()

