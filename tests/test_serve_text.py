"""Text prompts: with a tokenizer in the checkpoint (`linnet serve --weights DIR`), /v1/completions takes text and
answers text, streamed or not, that is the tokenizer's reading of the token ids."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from linnet_core.serve.server import TextStream, load_tokenizer
from tests.test_serve_server import TIMEOUT, serving

CORPUS = "the quick brown fox jumps over the lazy dog while a linnet sings in the hedge at dawn"


@pytest.fixture(scope="module")
def checkpoint_with_tokenizer(tiny_checkpoint, tmp_path_factory):
    """The synthetic checkpoint plus a small byte-level BPE tokenizer, Qwen's kind (its 400 ids are well inside the
    model's vocabulary); transformers reads it as the Qwen2 tokenizer, as it would a real checkpoint's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("with-tokenizer")
    for f in tiny_checkpoint.iterdir():
        shutil.copy2(f, directory / f.name)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([CORPUS] * 10, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def client(checkpoint_with_tokenizer):
    with serving("torch", 2, 64, 2, "--weights", str(checkpoint_with_tokenizer)) as base:
        with httpx.Client(base_url=base, timeout=TIMEOUT) as c:
            yield c, load_tokenizer(checkpoint_with_tokenizer)


def test_a_text_prompt_gets_text_back(client):
    c, tokenizer = client
    r = c.post("/v1/completions", json={"prompt": "the quick brown fox", "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200, r.text
    choice, usage = r.json()["choices"][0], r.json()["usage"]
    assert usage["prompt_tokens"] == len(tokenizer.encode("the quick brown fox")) == 4  # a word each, as trained
    assert choice["text"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)


def test_streamed_text_adds_up_to_the_whole(client):
    c, tokenizer = client
    body = {"prompt": "a linnet sings", "max_tokens": 6, "ignore_eos": True, "stream": True}
    with c.stream("POST", "/v1/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    ids = [t for ch in chunks for t in ch["choices"][0]["token_ids"]]
    assert len(ids) == 6
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == tokenizer.decode(ids, skip_special_tokens=True)


def test_text_stream_holds_back_an_unfinished_character():
    class Bytes:  # decodes ids as UTF-8 bytes, as byte-level tokenizers do
        def decode(self, ids, skip_special_tokens=True):
            return bytes(ids).decode("utf-8", errors="replace")

    stream, e_acute = TextStream(Bytes()), list("é".encode())
    assert stream.push([ord("a"), e_acute[0]]) == "a"  # half a character: held back
    assert stream.push([e_acute[1], ord("b")]) == "éb"
