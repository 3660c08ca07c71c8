"""The tokenizer every synthetic checkpoint carries (linnet_core/tokenizer.py): it round-trips text, puts its
special tokens at the ids the model config names, inside the vocabulary, and transformers reads it with its chat
template as it reads a real checkpoint's."""

from __future__ import annotations

import json
import unicodedata

import pytest

from harness.registry import MODELS
from linnet_core import tokenizer as linnet_tokenizer

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "linnet serve qwen2-tiny --backend torch --rows 64  # and a tab\there\r\n",
    "héllo wörld, ünïcödé, 日本語, emoji 😀🦜 and a lone combining mark e\u0301",
    "def f(x):\n    return {'a': [1, 2.5e-3, None]}\n\n\n",
    "",
    " leading and trailing spaces ",
    "<|im_start|> written out as plain text is still text",
]


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint)


@pytest.mark.parametrize("text", TEXTS)
def test_text_round_trips(tiny_tokenizer, text):
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids) == unicodedata.normalize("NFC", text)  # Qwen2's tokenizers normalize
    assert all(0 <= i < 1000 for i in ids) or "<|im_start|>" in text  # ordinary text takes ordinary ids


def test_the_trained_vocabulary_fills_the_tiny_model_s_ordinary_ids(tiny_tokenizer, tiny):
    ordinary = [i for i in tiny_tokenizer.get_vocab().values() if i < tiny.first_special_token]
    assert sorted(ordinary) == list(range(tiny.first_special_token))  # every id the bench's prompts draw is a token
    common = "the model and the engine of the serving rows"  # words the corpus uses often: merges were learnt
    assert len(tiny_tokenizer.encode(common, add_special_tokens=False)) <= 12


@pytest.mark.parametrize("model", sorted(MODELS))
def test_special_tokens_take_the_config_s_ids(model):
    config = MODELS[model].config
    ids = linnet_tokenizer.special_ids(config)
    assert ids["<|im_end|>"] == config.eos_token_id
    if config.bos_token_id not in (None, config.eos_token_id):  # else <|endoftext|> takes a free id (OLMo 2 names
        assert ids["<|endoftext|>"] == config.bos_token_id  # no bos; Phi-4-mini's bos is its eos)
    assert len(set(ids.values())) == 3 and all(0 <= i < config.vocab_size for i in ids.values())
    if MODELS[model].first_special_token < config.vocab_size:  # Qwen-style: the specials sit above the ordinary ids
        assert all(MODELS[model].first_special_token <= i for i in ids.values())


@pytest.mark.parametrize("model", ["smollm2-135m-instruct", "gemma-3-270m-it"])
def test_a_vocabulary_with_its_specials_at_the_bottom_gets_its_ordinary_tokens_above_them(model):
    config = MODELS[model].config
    tokenizer = linnet_tokenizer.train(config)
    specials = linnet_tokenizer.special_ids(config)
    text = "Linnet compiles one description of a decoder-only transformer."
    ids = tokenizer.encode(text).ids
    assert ids and min(ids) > max(specials.values()) and max(ids) < config.vocab_size
    assert tokenizer.decode(ids) == text
    assert tokenizer.token_to_id("<|im_end|>") == config.eos_token_id


def test_a_config_without_bos_or_eos_gets_the_top_ids():
    from dataclasses import replace

    config = replace(MODELS["qwen2-tiny"].config, bos_token_id=None, eos_token_id=None)
    assert sorted(linnet_tokenizer.special_ids(config).values()) == [1021, 1022, 1023]
    with pytest.raises(ValueError, match="needs 256"):
        linnet_tokenizer.train(replace(config, vocab_size=200))


def test_the_synthetic_checkpoint_has_it_and_its_chat_template(tiny_checkpoint, tiny_tokenizer, tiny):
    assert (tiny_checkpoint / "tokenizer.json").exists()
    assert tiny_tokenizer.eos_token_id == tiny.config.eos_token_id
    generation = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 😀"}]
    text = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 😀<|im_end|>\n<|im_start|>assistant\n"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert ids[0] == 1002 and ids.count(1001) == 2 and tiny_tokenizer.decode(ids) == text


def test_the_cache_key_follows_the_tokenizer(tiny, tmp_path, monkeypatch, untrained):
    """A checkpoint cached with another tokenizer (or none, as before) is never reused."""
    from linnet_core.checkpoint import synthetic_checkpoint

    first = synthetic_checkpoint(tiny.id, tiny.config, tiny.checkpoint_dtype, cache=tmp_path)
    monkeypatch.setattr(linnet_tokenizer, "VERSION", linnet_tokenizer.VERSION + 1)
    second = synthetic_checkpoint(tiny.id, tiny.config, tiny.checkpoint_dtype, cache=tmp_path)
    assert first != second and (second / "tokenizer.json").exists()
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()  # deterministic
