"""`linnet serve` as a user runs it: a subprocess on a free loopback port, spoken to over real HTTP with httpx.
Completions (whole and streamed) carry the engine's tokens; bad input is a 4xx that says what is wrong; a full
queue is a 503; a client that goes away gives its row back. Every client call has a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from linnet_core.serve.server import load_tokenizer
from tests.test_serve_engine import single_request_tokens

ROOT = Path(__file__).resolve().parent.parent
# the load tests need rows that stay busy for seconds: the tests' reference engine, at least 10 ms a step
BACKEND = "tests.serve_reference_engine:make_slow_engine"
ROWS, POSITIONS, MAX_WAITING = 2, 512, 2
REAL_BACKEND = "torch"  # a Linnet engine, the default of `linnet serve`
TIMEOUT = httpx.Timeout(30.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Base(str):
    """A server's base URL, with its process and what it has logged so far."""

    child: subprocess.Popen
    log_file: object

    def log(self) -> str:
        self.log_file.seek(0)
        return self.log_file.read()


@contextlib.contextmanager
def serving(backend: str, rows: int, positions: int, max_waiting: int, *more: str, env: dict | None = None):
    """`linnet serve qwen2-tiny` on a free loopback port until the block ends; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", "--backend", backend, "--rows", str(rows),
               "--positions", str(positions), "--max-waiting", str(max_waiting), "--port", str(port), *more]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a pipe nobody reads could fill and stall the server
    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = Base(f"http://127.0.0.1:{port}")
    base.child, base.log_file = child, log

    def healthy():
        if child.poll() is not None:
            log.seek(0)
            raise AssertionError(f"the server exited with {child.returncode}: {log.read()[-3000:]}")
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, 180, "the server's /health")
        yield base
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with serving(BACKEND, ROWS, POSITIONS, MAX_WAITING) as base:
        yield base


@pytest.fixture(scope="module")
def real_server(tiny_checkpoint):
    with serving(REAL_BACKEND, 8, 256, 16) as base:
        yield base


def test_a_linnet_engine_serves_streamed_completions(real_server, tiny_checkpoint):
    prompts = [list(range(200 + 7 * i, 230 + 11 * i)) for i in range(12)]

    async def main():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            jobs = (read_stream(client, real_server, p, 16) for p in prompts)
            return await asyncio.wait_for(asyncio.gather(*jobs), timeout=120)

    streams = asyncio.run(main())
    tokens = [[t for c in chunks[:-1] for t in c["choices"][0]["token_ids"]] for chunks in streams]
    assert all(len(t) == 16 for t in tokens)
    assert tokens[0] == single_request_tokens(tiny_checkpoint, prompts[0], 16)
    h = health(real_server)
    assert h["backend"] == REAL_BACKEND and h["rows_busy"] == 0 and h["steps"] >= 16


def post(base: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{base}/v1/completions", content=content, headers={"Content-Type": "application/json"},
                      timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)  # fmt: skip


def health(base: str) -> dict:
    return httpx.get(f"{base}/health", timeout=TIMEOUT).json()


def test_health_and_models(server):
    h = health(server)
    assert h["status"] == "ok" and h["rows"] == ROWS and h["rows_busy"] == 0 and h["waiting"] == 0
    models = httpx.get(f"{server}/v1/models", timeout=TIMEOUT).json()
    assert [m["id"] for m in models["data"]] == ["qwen2-tiny"] and models["data"][0]["max_model_len"] == POSITIONS


def test_a_completion_carries_the_single_request_tokens(server, tiny_checkpoint):
    prompt = list(range(100, 124))
    r = post(server, {"model": "qwen2-tiny", "prompt": prompt, "max_tokens": 6, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["token_ids"] == single_request_tokens(tiny_checkpoint, prompt, 6)
    assert choice["finish_reason"] == "length" and choice["text"] == load_tokenizer(tiny_checkpoint).decode(choice["token_ids"])
    assert body["object"] == "text_completion" and body["usage"] == {"prompt_tokens": 24, "completion_tokens": 6, "total_tokens": 30}


async def read_stream(client: httpx.AsyncClient, base: str, prompt: list[int], max_tokens: int) -> list[dict]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks = []
    async with client.stream("POST", f"{base}/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                chunks.append(line[len("data: ") :])
    assert chunks[-1] == "[DONE]", chunks[-3:]
    return [json.loads(c) for c in chunks[:-1]]


def test_concurrent_streams_all_complete_with_their_counts(server):
    lengths = [5, 9, 3, 7]  # two take the rows, two wait for them

    async def main():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            jobs = (read_stream(client, server, list(range(10 + i, 30 + i)), n) for i, n in enumerate(lengths))
            return await asyncio.wait_for(asyncio.gather(*jobs), timeout=120)

    for chunks, n in zip(asyncio.run(main()), lengths):
        *token_chunks, usage = chunks
        assert sum(len(c["choices"][0]["token_ids"]) for c in token_chunks) == n
        assert [c["choices"][0]["finish_reason"] for c in token_chunks][-1] == "length"
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == n
    assert health(server)["rows_busy"] == 0


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "the request body is not valid JSON"),
        (b"[1, 2]", 400, "the request body must be a JSON object"),
        ({"max_tokens": 4}, 400, "prompt: Field required"),
        ({"prompt": [1, 2], "max_tokens": 0}, 400, "max_tokens must be a positive integer"),
        ({"prompt": [1, 2], "max_tokens": "4"}, 400, "max_tokens: Input should be a valid integer"),
        ({"prompt": [1, 2], "temperature": -1}, 400, "temperature must be a number >= 0"),
        ({"prompt": [1, 2], "top_p": 2}, 400, "top_p must be in (0, 1]"),
        ({"prompt": [1, 2], "stop": ["\n"]}, 400, "stop: stop sequences are not supported here"),
        ({"prompt": [1, 2], "stop": 5}, 400, "stop: Input should be"),
        ({"prompt": [1, 2], "best_of": 2}, 400, "best_of: unknown field"),
        ({"prompt": [1, 2], "logprobs": 5}, 400, "logprobs: not supported here; leave it out or send None"),
        ({"prompt": [1, 2], "presence_penalty": 0.5}, 400, "presence_penalty: not supported here"),
        ({"prompt": [1, 2], "echo": True}, 400, "echo: not supported here"),
        ({"prompt": [1, 2], "n": 2}, 400, "n: only one completion per request"),
        ({"prompt": [[1, 2], [3]]}, 400, "one prompt per request"),
        ({"prompt": [1, 5000]}, 400, "token id 5000 is outside the vocabulary [0, 1024)"),
        ({"prompt": [1] * 500, "max_tokens": 20}, 400, "needs 520 positions; a row holds 512"),
        ({"prompt": [], "max_tokens": 2}, 400, "the prompt is empty"),
        ({"prompt": [1, 2], "model": "gpt-4"}, 404, "model 'gpt-4' is not served here"),
    ],
)
def test_bad_requests_are_4xx_with_a_message(server, body, status, message):
    r = post(server, body)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"], r.json()


def test_unknown_routes_and_methods(server):
    assert httpx.get(f"{server}/v1/completions", timeout=TIMEOUT).status_code == 405
    assert httpx.get(f"{server}/v1/chat", timeout=TIMEOUT).status_code == 404


def test_a_full_queue_is_503_and_disconnected_clients_free_their_rows(server):
    long = {"prompt": [7, 8, 9], "max_tokens": POSITIONS - 3, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=TIMEOUT) as client, contextlib.ExitStack() as open_streams:
        for _ in range(ROWS + MAX_WAITING):  # every row and every queue place taken
            r = open_streams.enter_context(client.stream("POST", f"{server}/v1/completions", json=long))
            assert r.status_code == 200
        wait_until(lambda: health(server)["rows_busy"] == ROWS, 30, "both rows busy")
        refused = post(server, {"prompt": [1, 2], "max_tokens": 2})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "requests are already waiting for 2 rows" in refused.json()["error"]["message"]
    # the streams are closed long before their 509 tokens: every row and queue place comes back
    wait_until(lambda: health(server)["rows_busy"] == 0 and health(server)["waiting"] == 0, 30, "the rows to be freed")
    assert post(server, {"prompt": [1, 2], "max_tokens": 2}).status_code == 200


def test_a_client_that_stops_waiting_for_a_whole_completion_frees_its_row(server):
    before = health(server)["steps"]
    with pytest.raises(httpx.ReadTimeout):
        post(server, {"prompt": [3, 4], "max_tokens": POSITIONS - 2, "ignore_eos": True}, timeout=httpx.Timeout(30.0, read=1.0))
    wait_until(lambda: health(server)["rows_busy"] == 0, 30, "the row to be freed")
    assert health(server)["steps"] - before < POSITIONS - 2  # cancelled, not run to its end


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "0"], "rows must be at least 1, not 0"),
        (["--backend", "tensorflow"], "unknown backend 'tensorflow'; use one of torch, xla, ort"),
        (["--positions", "5000"], "--positions 5000 is more than the model's 4096"),
        (["--dtype", "f8"], "unknown dtype 'f8'"),
    ],
)
def test_bad_server_options_are_one_line_errors(args, message, tiny_checkpoint):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", *args, "--port", str(free_port())],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and message in out.stdout and "Traceback" not in out.stderr, (out.stdout, out.stderr[-500:])


# ---- hostile requests and exposure ----------------------------------------------------------------------------------


def raw_exchange(base: str, data: bytes, wait_s: float = 10.0) -> bytes:
    """Sends raw bytes on a new connection and returns what the server answers before it closes (or wait_s)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return answer


HUGE = "9" * 5000


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b'{"prompt": [1], "temperature": 1, "seed": -1}', 400, "seed must be an integer"),
        (b'{"prompt": [1], "temperature": 1, "seed": ' + HUGE[:100].encode() + b"}", 400, "seed must be an integer"),
        (b'{"prompt": [' + HUGE.encode() + b"]}", 400, "not valid JSON"),
        (b'{"prompt": [1], "max_tokens": ' + HUGE.encode() + b"}", 400, "not valid JSON"),
        (b'{"prompt": [1], "max_tokens": ' + HUGE[:4000].encode() + b"}", 400, "positions"),
        (b'{"prompt": [1], "temperature": ' + HUGE[:4000].encode() + b"}", 400, "temperature"),
        (b'{"prompt": [1], "temperature": NaN}', 400, "temperature"),
        (b'{"prompt": [1], "top_p": Infinity}', 400, "top_p"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deep"),
        (b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deep"),
        (b'{"prompt": [1], "user": "\\ud800"}', 200, ""),
        (b"", 400, "not valid JSON"),
        (b"\xff\xfe{}", 400, "not valid JSON"),
    ],
)
def test_hostile_bodies_are_4xx_with_a_message(server, body, status, message):
    r = post(server, body)
    assert r.status_code == status, r.text[:500]
    if message:
        assert message in r.json()["error"]["message"], r.json()


def test_a_body_over_the_limit_is_413_before_it_is_read_and_health_stays_quick(server):
    from linnet_core.serve.guard import MAX_BODY_BYTES

    big = b'{"prompt": [' + b"1, " * (20 << 20) + b"1]}"  # 60 MB
    r = post(server, big)
    assert r.status_code == 413 and f"over {MAX_BODY_BYTES} bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"prompt": ['
        for _ in range(64):
            yield b"1, " * (16 << 10)

    r = httpx.post(f"{server}/v1/completions", content=chunks(), headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
    assert r.status_code == 413
    start = time.monotonic()
    assert health(server)["status"] == "ok" and time.monotonic() - start < 1.0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""])
def test_a_body_that_is_not_declared_json_is_415(server, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    r = httpx.post(f"{server}/v1/completions", content=b'{"prompt": [1]}', headers=headers, timeout=TIMEOUT)
    assert r.status_code == 415 and "Content-Type: application/json" in r.json()["error"]["message"]


@pytest.mark.parametrize("host, ok", [("evil.example:8000", False), ("127.0.0.1.nip.io", False), ("localhost:1", True),
                                      ("127.0.0.1", True), ("[::1]:80", True), ("", False),
                                      ("localhost:80@evil.com", False), ("localhost@evil.com", False),
                                      ("localhost:80:81", False), ("localhost:x", False)])  # fmt: skip
def test_a_loopback_server_answers_only_to_its_own_names(server, host, ok):
    for method, path in (("GET", "/health"), ("POST", "/v1/completions")):
        r = httpx.request(method, f"{server}{path}", headers={"Host": host, "Content-Type": "application/json"},
                          content=b'{"prompt": [1], "max_tokens": 1}' if method == "POST" else None, timeout=TIMEOUT)  # fmt: skip
        assert (r.status_code == 200) is ok, (host, path, r.status_code, r.text[:200])
        if not ok:
            assert r.status_code == 400 and "is not this server's name" in r.json()["error"]["message"]


def test_an_aborted_upload_logs_nothing_and_frees_nothing_it_did_not_take(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    for _ in range(3):
        raw_exchange(server, head + b'{"prompt": [1, 2', wait_s=0.3)
    time.sleep(0.5)
    assert post(server, {"prompt": [1, 2], "max_tokens": 2}).status_code == 200
    assert "Traceback" not in server.log() and "ERROR" not in server.log(), server.log()[-3000:]


def test_the_api_key_timeouts_startup_line_and_sigterm(tiny_checkpoint, tmp_path):
    """One server with --api-key and a short --request-timeout: the key is required on every route but /health, a
    stalled request is cut off, the startup line comes once the port listens, and SIGTERM removes its temporary
    files and exits 0."""
    more = ("--api-key", "s3cret", "--request-timeout", "2")
    with serving(BACKEND, 1, 64, 1, *more, env={"TMPDIR": str(tmp_path)}) as base:
        line = next(line for line in base.log().splitlines() if line.startswith("linnet.serve:"))
        assert line.endswith(base)
        assert httpx.get(f"{base}/health", timeout=TIMEOUT).status_code == 200  # open: probes need no key
        body = {"prompt": [1, 2], "max_tokens": 2}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}, {"Authorization": "Basic s3cret"}):
            r = httpx.post(f"{base}/v1/completions", json=body, headers=headers, timeout=TIMEOUT)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (headers, r.text)
        assert httpx.get(f"{base}/v1/models", timeout=TIMEOUT).status_code == 401
        ok = httpx.post(f"{base}/v1/completions", json=body, headers={"Authorization": "Bearer s3cret"}, timeout=TIMEOUT)
        assert ok.status_code == 200, ok.text

        start = time.monotonic()
        assert raw_exchange(base, b"POST /v1/completions HTTP/1.1\r\nHost: 127", wait_s=30) == b""  # headers stall
        assert time.monotonic() - start < 10
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer s3cret\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")  # fmt: skip
        start = time.monotonic()
        answer = raw_exchange(base, head, wait_s=30)  # the body stalls
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 10, answer

        [work] = tmp_path.glob("linnet-serve-*")
        base.child.send_signal(signal.SIGTERM)
        assert base.child.wait(timeout=30) == 0, base.log()[-2000:]
        assert not work.exists() and "Traceback" not in base.log(), base.log()[-2000:]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0 serves beyond this machine: give --api-key"),
        (["--host", "::"], "--host :: serves beyond this machine"),
        (["--request-timeout", "0"], "--request-timeout 0.0: give a number of seconds above 0"),
        (["--request-timeout", "nan"], "--request-timeout nan"),
    ],
)
def test_exposure_options_are_one_line_errors(args, message, tiny_checkpoint):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", *args, "--port", str(free_port())],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "LINNET_API_KEY": ""})  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, (out.stdout, out.stderr[-500:])
    assert len(out.stdout.strip().splitlines()) == 1 and message in out.stdout, out.stdout


def test_a_port_in_use_is_a_one_line_error(tiny_checkpoint, server):
    port = server.rsplit(":", 1)[1]
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", "--backend", BACKEND, "--port", port],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr and f"cannot listen on 127.0.0.1:{port}" in out.stdout, out


def test_the_api_key_may_come_from_the_environment_and_opens_other_interfaces(tiny_checkpoint):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", "--host", "0.0.0.0",
                          "--rows", "0", "--port", str(free_port())], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "LINNET_API_KEY": "k"})  # fmt: skip
    # past the exposure check (it warns) to the next error: no server is started
    assert "warning: listening on 0.0.0.0, beyond loopback" in out.stdout and "rows must be at least 1" in out.stdout, out


@pytest.fixture(scope="module")
def app_client(tiny_checkpoint):
    """The real ASGI app (guard, routes, engine loop) on the reference engine, in this process."""
    from starlette.testclient import TestClient

    from linnet_core.serve.guard import settings_for
    from linnet_core.serve.server import ServerSettings, build, create_app

    served = build(ServerSettings("qwen2-tiny", tiny_checkpoint, "tests.serve_reference_engine:make_engine", rows=2,
                                  positions=64, max_waiting=4))  # fmt: skip
    with TestClient(create_app(served, settings_for("127.0.0.1", None)), base_url="http://127.0.0.1") as c:
        yield c
    served.work.cleanup()


@pytest.mark.parametrize(
    "route, body, where",
    [("/v1/completions", b'{"prompt": "hi \\ud800 there"}', "prompt"),
     ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "\\udfff"}]}',
      "messages.1.content"),
     ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
      "messages.0.content")],
)  # fmt: skip
def test_a_lone_surrogate_in_a_prompt_or_message_is_400(app_client, route, body, where):
    """Valid JSON, but no text a tokenizer can encode: it was a 500 with a traceback."""
    r = app_client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(f"{where}: not valid Unicode text"), r.text


def test_a_temperature_below_epsilon_is_greedy(app_client):
    """logits / 1e-320 is infinite: the softmax sampled garbage. Below MIN_TEMPERATURE a request is greedy."""
    from linnet_core.serve.request import MIN_TEMPERATURE, SamplingParams

    def tokens(temperature):
        body = {"prompt": [5, 6, 7], "max_tokens": 8, "ignore_eos": True, "temperature": temperature, "seed": 3}
        r = app_client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    greedy = tokens(0.0)
    assert all(tokens(t) == greedy for t in (1e-320, 5e-324, MIN_TEMPERATURE / 2))
    assert SamplingParams(temperature=MIN_TEMPERATURE / 2).greedy and not SamplingParams(temperature=MIN_TEMPERATURE).greedy


def test_rows_beyond_memory_are_a_one_line_error_that_says_what_fits(tiny_checkpoint):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "serve", "qwen2-tiny", "--rows", "1000000",
                          "--port", str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, (out.stdout, out.stderr[-2000:])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "--rows 1000000 x --positions 640: the KV cache alone needs" in lines[0], out.stdout
    assert " rows of 640 positions fit" in lines[0] and "memory has" in lines[0], lines[0]
