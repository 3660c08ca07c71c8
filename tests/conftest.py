"""Shared fixtures: a private cache for synthetic weights, the tiny model's checkpoint, and the GPU suite's dry run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
def untrained(monkeypatch):
    """Synthetic checkpoints written in this test keep their starting weights: for a test of a checkpoint's layout,
    dtype or cache key, which the twins' training (seconds each) does not change."""
    from linnet_core import checkpoint

    monkeypatch.setattr(checkpoint, "train_on_corpus", lambda tensors, *_: tensors)


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


def plotly_blocked(directory: Path) -> dict:
    """An environment in which `import plotly` fails, in a process's children and theirs (PYTHONPATH), as on the GPU
    image."""
    (directory / "plotly").mkdir(parents=True)
    (directory / "plotly" / "__init__.py").write_text("raise ImportError('plotly is not on the GPU image')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture
def without_plotly(tmp_path) -> dict:
    return plotly_blocked(tmp_path / "blocked")


@pytest.fixture(scope="session")
def suite_dry_run(tmp_path_factory, private_cache):
    """What `make gpu` runs on the device, run once here: scripts/gpu-suite.sh --dry-run (every row of the suite on the
    tiny model, f32, on this CPU, the quick profile, through `linnet-bench run`) with plotly unimportable. Returns the
    finished process, its out folder and its result file (None if it wrote none). Its own test judges the suite; the
    tests of the rows it measured (transformers, transformers compiled, the generated-PyTorch rows) read their rows
    from its file rather than measuring them again."""
    from harness.results import load_result

    base = tmp_path_factory.mktemp("suite-dry-run")
    env = {**plotly_blocked(base / "blocked"), "OUT": str(base / "out"), "PYTHON": sys.executable}
    done = subprocess.run(["bash", "scripts/gpu-suite.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)  # fmt: skip
    files = list((base / "out").glob("*.json"))  # copied beside the log, for the device tool to bring back
    return done, base / "out", load_result(files[0]) if len(files) == 1 else None


@pytest.fixture(scope="session")
def suite_run(suite_dry_run):
    """The dry run's result file, for the tests of the rows it measured (its own test says why it is missing)."""
    result = suite_dry_run[2]
    assert result is not None and result.complete, "the GPU suite's dry run wrote no whole result file"
    return result

