"""Shared fixtures: a private cache for synthetic weights, and the tiny model's checkpoint."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Synthetic checkpoints go to a cache of this test session (children inherit the variable)."""
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def tiny():
    from harness.registry import get_model

    return get_model("qwen2-tiny")


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny, private_cache):
    from linnet_core.checkpoint import synthetic_checkpoint

    return synthetic_checkpoint(tiny.id, tiny.config, tiny.checkpoint_dtype)


@pytest.fixture
def bare_architecture(monkeypatch):
    """An architecture module holding only what every module must (Qwen2's), as a new family's may."""
    import sys
    import types

    from linnet_core.arch import ARCHITECTURES, architecture

    qwen2 = architecture("qwen2")
    bare = types.ModuleType("tests.bare_architecture")
    for name in ("HF_CLASS", "DEFAULTS", "FIXED", "check", "build"):
        setattr(bare, name, getattr(qwen2, name))
    bare.MODEL_TYPE = "bare"
    bare.hf_extras = lambda config: {**qwen2.hf_extras(config), "model_type": "bare"}
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    monkeypatch.setitem(ARCHITECTURES, "bare", bare.__name__)
    return bare


# Qwen2's pre-tokenizer split (tokenizer.json of Qwen2/Qwen2.5): what llama.cpp's "qwen2" pre-tokenizer implements.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@pytest.fixture(scope="session")
def tiny_tokenizer_checkpoint(tiny, tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint plus a real byte-level BPE tokenizer, Qwen2-style: 1000 trained tokens, then
    <|endoftext|> (the config's bos, 1000) and <|im_end|> (its eos, 1001); ids 1002..1023 have no token,
    as Qwen2.5's vocabulary is padded beyond its tokenizer."""
    import json
    import shutil
    from pathlib import Path

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    target = tmp_path_factory.mktemp("tokenizer-ckpt")
    for f in tiny_checkpoint.iterdir():
        shutil.copyfile(f, target / f.name)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = [p.read_text() for p in sorted(Path(json.__file__).parent.glob("*.py"))]  # any deterministic text
    tokenizer.train_from_iterator(corpus, trainer)
    assert tokenizer.get_vocab_size() == 1000, tokenizer.get_vocab_size()
    tokenizer.add_special_tokens(["<|endoftext|>", "<|im_end|>"])
    assert tokenizer.token_to_id("<|endoftext|>") == tiny.config.bos_token_id
    assert tokenizer.token_to_id("<|im_end|>") == tiny.config.eos_token_id
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.save_pretrained(target)
    return target
