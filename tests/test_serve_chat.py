"""`linnet serve` for OpenAI clients: the stock `openai` Python client chats with the synthetic checkpoint (its
tokenizer and chat template are built with it), streamed and not, and sends text completions; streams carry
one token per chunk, the first as soon as prefill made it, and usage as OpenAI's API sends it."""

from __future__ import annotations

import json

import httpx
import pytest

from linnet_core.serve.server import load_tokenizer
from tests.test_serve_engine import single_request_tokens
from tests.test_serve_server import TIMEOUT, serving

openai = pytest.importorskip("openai", reason="the serve tests speak through the stock openai client")
MESSAGES = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Sing, linnet! 😀"}]


@pytest.fixture(scope="module")
def base(tiny_checkpoint):
    with serving("torch", 2, 128, 4) as url:
        yield url


@pytest.fixture(scope="module")
def client(base):
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=30.0, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return load_tokenizer(tiny_checkpoint)


def chat_prompt(tokenizer) -> list[int]:
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def test_chat_with_the_openai_client(client, tokenizer, tiny_checkpoint):
    r = client.chat.completions.create(model="qwen2-tiny", messages=MESSAGES, max_tokens=6, extra_body={"ignore_eos": True})
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    prompt = chat_prompt(tokenizer)
    assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == 6
    expected = single_request_tokens(tiny_checkpoint, prompt, 6)  # the template's ids through transformers eager
    assert r.choices[0].message.content == tokenizer.decode(expected, skip_special_tokens=True)


def test_streamed_chat_with_the_openai_client(client, tokenizer):
    whole = client.chat.completions.create(messages=MESSAGES, model="qwen2-tiny", max_tokens=8, extra_body={"ignore_eos": True})
    chunks = list(client.chat.completions.create(messages=MESSAGES, model="qwen2-tiny", max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))  # fmt: skip
    *token_chunks, last = chunks
    assert all(c.object == "chat.completion.chunk" and c.usage is None for c in token_chunks)
    assert len(token_chunks) == 8  # one token per chunk
    assert token_chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in token_chunks] == [None] * 7 + ["length"]
    assert "".join(c.choices[0].delta.content for c in token_chunks) == whole.choices[0].message.content
    assert last.choices == [] and last.usage.completion_tokens == 8 and last.usage.prompt_tokens == len(chat_prompt(tokenizer))


def test_text_completions_with_the_openai_client(client, tokenizer):
    r = client.completions.create(model="qwen2-tiny", prompt="The bench times every engine", max_tokens=5, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == len(tokenizer.encode("The bench times every engine")) and r.usage.completion_tokens == 5
    chunks = list(client.completions.create(model="qwen2-tiny", prompt="The bench times every engine", max_tokens=5,
                                            stream=True, extra_body={"ignore_eos": True}))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text and len(chunks) == 5


def test_the_first_chunk_carries_exactly_one_token(base):
    """The prefill's token leaves alone, before the first decode step; each later chunk carries one more."""
    body = {"prompt": list(range(1, 40)), "max_tokens": 5, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", f"{base}/v1/completions", json=body) as r:
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert [len(c["choices"][0]["token_ids"]) for c in chunks[:-1]] == [1, 1, 1, 1, 1]
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["usage"]["completion_tokens"] == 5
    without = {**body, "stream_options": None}
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", f"{base}/v1/completions", json=without) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert len(chunks) == 5 and all("usage" not in c for c in chunks)  # no usage asked for: none sent


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "messages: Field required"),
        ({"messages": []}, "messages: send at least one message"),
        ({"messages": "hello"}, "messages: Input should be a valid list"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role: Input should be"),
        ({"messages": [{"role": "user"}]}, "messages.0.content: Field required"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, "tool_calls: unknown field"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_completion_tokens": 2}, "send one of them"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}, "max_tokens must be a positive integer"),
        ({"messages": [{"role": "user", "content": "x" * 2000}]}, "a row holds 128"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": float("nan")}, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools: unknown field"),
    ],
)
def test_bad_chat_requests_are_400_with_a_message(base, body, message):
    raw = json.dumps(body).encode()  # NaN as JSON's NaN literal, which Python's json reads
    r = httpx.post(f"{base}/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"], r.json()


def test_text_parts_are_joined(client):
    parts = [{"type": "text", "text": "Sing, "}, {"type": "text", "text": "linnet! 😀"}]
    joined = [MESSAGES[0], {"role": "user", "content": parts}]
    a = client.chat.completions.create(model="qwen2-tiny", messages=joined, max_tokens=3, extra_body={"ignore_eos": True})
    b = client.chat.completions.create(model="qwen2-tiny", messages=MESSAGES, max_tokens=3, extra_body={"ignore_eos": True})
    assert a.usage == b.usage and a.choices[0].message.content == b.choices[0].message.content


def test_without_a_tokenizer_text_and_chat_are_400_and_ids_still_work():
    """A checkpoint without a tokenizer (a real one may lack it): token-id prompts only, and the 400 says so."""
    from types import SimpleNamespace

    from linnet_core.serve.server import APIError, SamplingDefaults, parse_chat, parse_completion

    served = SimpleNamespace(model="m", vocab_size=1024, tokenizer=None, defaults=SamplingDefaults())
    assert parse_completion(b'{"prompt": [1, 2]}', served)[1] == [1, 2]
    for parse, body in ((parse_completion, b'{"prompt": "hi"}'), (parse_chat, b'{"messages": [{"role": "user", "content": "hi"}]}')):
        with pytest.raises(APIError, match="this checkpoint has no tokenizer") as e:
            parse(body, served)
        assert e.value.status == 400


def test_what_load_generators_send_is_accepted(base):
    """guidellm's chat body: stop null, ignore_eos, and vLLM's continuous_usage_stats (counts on every chunk); the
    penalties and logprobs other clients send at their neutral values."""
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}], "max_completion_tokens": 3,
            "stop": None, "ignore_eos": True, "stream": True, "presence_penalty": 0, "frequency_penalty": 0.0, "logprobs": False, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    with httpx.Client(timeout=TIMEOUT) as c, c.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3] and chunks[-1]["choices"] == []
