"""The Hugging Face export: transformers reads it with the source's exact logits, the tied head is stored once,
greedy decoding stays greedy, tokenizer files travel, and bad output paths are one-line errors."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open

from linnet_core import checkpoint, hf
from linnet_core.errors import UserError
from runners.transformers_eager import Runner as Eager
from tests.exports_helpers import run_spec


def reference_scores(entry, ckpt, work, dtype="f32") -> tuple[np.ndarray, list[int]]:
    """transformers eager through the cache path on ckpt: (probe logits, greedy tokens of the quick prompt)."""
    spec = run_spec(entry, "transformers", ckpt, work, dtype)
    runner = Eager(spec)
    runner.load()
    tokens = [runner.prefill(spec.prompt), *runner.decode(spec.new_tokens - 1)]
    return runner.score(spec.probe, spec.probe_prefill), tokens


@pytest.fixture(scope="module")
def exported(tiny_checkpoint, tmp_path_factory):
    return hf.export(tiny_checkpoint, tmp_path_factory.mktemp("hf") / "export")


def test_transformers_reads_the_export_with_identical_logits(tiny, tiny_checkpoint, exported, tmp_path):
    source_logits, source_tokens = reference_scores(tiny, tiny_checkpoint, tmp_path / "a")
    export_logits, export_tokens = reference_scores(tiny, exported, tmp_path / "b")
    assert np.max(np.abs(export_logits - source_logits)) == 0.0
    assert export_tokens == source_tokens


def test_the_tied_head_is_stored_once(tiny, exported):
    with safe_open(exported / "model.safetensors", framework="pt") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert names == set(checkpoint.tensor_shapes(tiny.config))
    config = json.loads((exported / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["architectures"] == ["Qwen2ForCausalLM"]


def test_an_untied_head_is_kept(tiny, tmp_path, untrained):
    untied = dataclasses.replace(tiny.config, tie_word_embeddings=False)
    source = checkpoint.synthetic_checkpoint("untied", untied, "float32", cache=tmp_path / "cache")
    out = hf.export(source, tmp_path / "out")
    with safe_open(out / "model.safetensors", framework="pt") as f, safe_open(source / "model.safetensors", framework="pt") as g:
        assert torch.equal(f.get_tensor("lm_head.weight"), g.get_tensor("lm_head.weight"))


def test_a_head_stored_although_tied_is_dropped(tiny, tiny_checkpoint, tmp_path):
    """Some checkpoints store the tied head anyway; the export stores it once."""
    from safetensors.torch import save_file

    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint, source)
    tensors = checkpoint.load_weights(tiny_checkpoint, framework="pt")
    save_file({**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"].clone()}, str(source / "model.safetensors"))
    out = hf.export(source, tmp_path / "out")
    with safe_open(out / "model.safetensors", framework="pt") as f:
        assert "lm_head.weight" not in f.keys()


def test_generation_config_keeps_greedy_decoding_greedy(tiny, tiny_checkpoint, tmp_path):
    """A source asking for sampling (as Qwen2.5's does) exports as greedy: generate() with the file's defaults
    gives the greedy loop's tokens."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint, source)
    sampling = {"bos_token_id": 1000, "eos_token_id": [1001, 1000], "do_sample": True, "temperature": 0.7,
                "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}  # fmt: skip
    (source / "generation_config.json").write_text(json.dumps(sampling))
    out = hf.export(source, tmp_path / "out")
    written = json.loads((out / "generation_config.json").read_text())
    assert written == {"bos_token_id": 1000, "eos_token_id": [1001, 1000], "do_sample": False}
    config = GenerationConfig.from_pretrained(out)
    assert config.do_sample is False and config.repetition_penalty in (None, 1.0)

    _, greedy = reference_scores(tiny, out, tmp_path / "work")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    spec = run_spec(tiny, "transformers", out, tmp_path / "work")
    generated = model.generate(torch.tensor([spec.prompt]), max_new_tokens=spec.new_tokens, min_new_tokens=spec.new_tokens)
    assert generated[0, len(spec.prompt):].tolist() == greedy


def test_bf16_weights_stay_bf16_and_bit_identical(tiny, tmp_path, untrained):
    source = checkpoint.synthetic_checkpoint(tiny.id, tiny.config, "bfloat16", cache=tmp_path / "cache")
    out = hf.export(source, tmp_path / "out")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    a, b = checkpoint.load_weights(source, "pt"), checkpoint.load_weights(out, "pt")
    assert a.keys() == b.keys() and all(b[k].dtype == torch.bfloat16 and torch.equal(a[k], b[k]) for k in a)


def test_tokenizer_files_travel(tiny_tokenizer_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    out = hf.export(tiny_tokenizer_checkpoint, tmp_path / "out")
    assert (out / "tokenizer.json").read_bytes() == (tiny_tokenizer_checkpoint / "tokenizer.json").read_bytes()
    text = "def f(x):\n    return x <|im_end|>"
    assert AutoTokenizer.from_pretrained(out).encode(text) == AutoTokenizer.from_pretrained(tiny_tokenizer_checkpoint).encode(text)


def test_synthetic_weights_export_with_their_tokenizer_and_chat_template(exported):
    from transformers import AutoTokenizer

    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                           "tokenizer.json", "tokenizer_config.json"]  # fmt: skip
    assert AutoTokenizer.from_pretrained(exported).chat_template


def test_bad_output_paths_are_one_line_errors(tiny_checkpoint, exported, tmp_path):
    with pytest.raises(UserError, match="is not empty; export into a new or empty directory"):
        hf.export(tiny_checkpoint, exported)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        hf.export(tiny_checkpoint, tmp_path / "file")
    with pytest.raises(UserError, match="cannot write the export"):
        hf.export(tiny_checkpoint, tmp_path / "file" / "out")  # unwritable, even for root
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left behind


def test_an_empty_directory_is_filled(tiny_checkpoint, tmp_path):
    (tmp_path / "out").mkdir()
    assert (hf.export(tiny_checkpoint, tmp_path / "out") / "model.safetensors").is_file()

