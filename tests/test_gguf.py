"""The GGUF export, read back with gguf's own reader (and llama.cpp's tokenizer): the keys llama.cpp requires,
llama.cpp's tensor names and types, no separate head when tied, and the tokenizer or a synthetic one."""

from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest

from linnet_core import checkpoint
from linnet_core import gguf as linnet_gguf
from linnet_core.errors import UserError

T = gguf.GGMLQuantizationType


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def tensors(reader: gguf.GGUFReader) -> dict:
    return {t.name: t for t in reader.tensors}


@pytest.fixture(scope="module")
def files(tiny_checkpoint, tmp_path_factory):
    """GGUF files of the tiny checkpoint without its tokenizer files: the export makes up a vocabulary."""
    import shutil

    bare, out = tmp_path_factory.mktemp("no-tokenizer"), tmp_path_factory.mktemp("gguf")
    for f in tiny_checkpoint.iterdir():
        if not f.name.startswith(("tokenizer", "chat_template")):
            shutil.copyfile(f, bare / f.name)
    return {d: gguf.GGUFReader(linnet_gguf.export(bare, out / f"{d}.gguf", d)) for d in linnet_gguf.DTYPES}


@pytest.mark.parametrize("dtype", list(linnet_gguf.DTYPES))
def test_the_keys_llama_cpp_requires(tiny, files, dtype):
    r, c = files[dtype], tiny.config
    assert field(r, "general.architecture") == "qwen2"
    expected = {
        "qwen2.context_length": c.max_position_embeddings,
        "qwen2.embedding_length": c.hidden_size,
        "qwen2.block_count": c.num_hidden_layers,
        "qwen2.feed_forward_length": c.intermediate_size,
        "qwen2.attention.head_count": c.num_attention_heads,
        "qwen2.attention.head_count_kv": c.num_key_value_heads,
        "general.file_type": int(linnet_gguf.DTYPES[dtype][1]),
    }
    assert {k: field(r, k) for k in expected} == expected
    assert field(r, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(c.rms_norm_eps)
    assert field(r, "qwen2.rope.freq_base") == pytest.approx(c.rope_theta)


@pytest.mark.parametrize("dtype, weight_type", [("f32", T.F32), ("f16", T.F16), ("bf16", T.BF16), ("q8_0", T.Q8_0)])
def test_tensors_under_llama_cpp_names_without_a_tied_head(tiny, files, dtype, weight_type):
    found, c = tensors(files[dtype]), tiny.config
    per_block = ["attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight",
                 "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                 "ffn_down.weight"]  # fmt: skip
    names = {"token_embd.weight", "output_norm.weight"} | {f"blk.{i}.{n}" for i in range(c.num_hidden_layers) for n in per_block}
    assert set(found) == names  # no output.weight: tied
    kv = c.num_key_value_heads * c.head_dim
    assert list(found["token_embd.weight"].shape) == [c.hidden_size, c.vocab_size]  # GGUF order: innermost first
    assert list(found["blk.0.attn_k.weight"].shape) == [c.hidden_size, kv]
    assert list(found["blk.1.ffn_down.weight"].shape) == [c.intermediate_size, c.hidden_size]
    for name, t in found.items():
        assert t.tensor_type == (weight_type if len(t.shape) == 2 else T.F32), (name, t.tensor_type)


def test_weights_are_the_checkpoint_s_unpermuted(tiny_checkpoint, files):
    """q and k keep Hugging Face's row order (NEOX RoPE); values round-trip within each dtype's precision."""
    source = checkpoint.load_weights(tiny_checkpoint)
    for dtype, tolerance in (("f32", 0), ("f16", 1e-3), ("bf16", 1e-2), ("q8_0", 2e-2)):
        found = tensors(files[dtype])
        for hf_name, gguf_name in (("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"),
                                   ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"),
                                   ("model.embed_tokens.weight", "token_embd.weight")):  # fmt: skip
            t = found[gguf_name]
            values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(source[hf_name].shape)
            scale = np.abs(source[hf_name]).max()
            assert np.abs(values - source[hf_name]).max() <= tolerance * scale, (dtype, hf_name)


def test_an_untied_head_is_written(tiny, tmp_path, untrained):
    untied = dataclasses.replace(tiny.config, tie_word_embeddings=False)
    source = checkpoint.synthetic_checkpoint("untied", untied, "float32", cache=tmp_path / "cache")
    found = tensors(gguf.GGUFReader(linnet_gguf.export(source, tmp_path / "untied.gguf")))
    assert list(found["output.weight"].shape) == [untied.hidden_size, untied.vocab_size]


def test_a_synthetic_byte_level_vocabulary_of_the_model_s_size(tiny, files):
    r, c = files["f32"], tiny.config
    tokens, types, merges = field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.token_type"), field(r, "tokenizer.ggml.merges")
    assert (field(r, "tokenizer.ggml.model"), field(r, "tokenizer.ggml.pre")) == ("gpt2", "qwen2")
    assert len(tokens) == len(types) == c.vocab_size and len(set(tokens)) == c.vocab_size
    assert set(tokens[:256]) == set(linnet_gguf.bytes_to_unicode().values())
    assert len(merges) == tiny.first_special_token - 256
    vocab = set(tokens)
    for merge in merges:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab, merge
    assert set(types[: tiny.first_special_token]) == {gguf.TokenType.NORMAL}
    assert set(types[tiny.first_special_token :]) == {gguf.TokenType.CONTROL}
    assert field(r, "tokenizer.ggml.bos_token_id") == c.bos_token_id
    assert field(r, "tokenizer.ggml.eos_token_id") == c.eos_token_id
    assert field(r, "tokenizer.ggml.add_bos_token") is False


def test_the_checkpoint_s_tokenizer_is_written(tiny, tiny_tokenizer_checkpoint, tmp_path):
    import json

    from transformers import AutoTokenizer

    r = gguf.GGUFReader(linnet_gguf.export(tiny_tokenizer_checkpoint, tmp_path / "tok.gguf", "f16"))
    tokens, types = field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.token_type")
    by_id = {i: t for t, i in AutoTokenizer.from_pretrained(tiny_tokenizer_checkpoint).get_vocab().items()}
    assert len(tokens) == tiny.config.vocab_size
    assert all(tokens[i] == t for i, t in by_id.items())
    assert tokens[1000:1003] == ["<|endoftext|>", "<|im_end|>", "[PAD1002]"]
    assert types[999] == gguf.TokenType.NORMAL and types[1000] == types[1001] == gguf.TokenType.CONTROL
    assert set(types[1002:]) == {gguf.TokenType.UNUSED}
    merges = json.loads((tiny_tokenizer_checkpoint / "tokenizer.json").read_text())["model"]["merges"]
    assert field(r, "tokenizer.ggml.merges") == [" ".join(m) if isinstance(m, list) else m for m in merges]
    assert field(r, "tokenizer.ggml.eos_token_id") == 1001


def test_llama_cpp_tokenizes_like_the_checkpoint_s_tokenizer(tiny_tokenizer_checkpoint, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from transformers import AutoTokenizer

    path = linnet_gguf.export(tiny_tokenizer_checkpoint, tmp_path / "tok.gguf", "q8_0")
    vocab = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    text = "def dumps(obj, *, skipkeys=False):\n    return 12345 'hello' <|im_end|> naïve café"
    expected = AutoTokenizer.from_pretrained(tiny_tokenizer_checkpoint).encode(text, add_special_tokens=False)
    assert vocab.tokenize(text.encode(), add_bos=False, special=True) == expected


def test_bad_input_is_a_one_line_error(tiny_checkpoint, tmp_path):
    with pytest.raises(UserError, match="unknown GGUF dtype 'q4_0'; use one of f32, f16, bf16, q8_0"):
        linnet_gguf.export(tiny_checkpoint, tmp_path / "x.gguf", "q4_0")
    with pytest.raises(UserError, match="is a directory"):
        linnet_gguf.export(tiny_checkpoint, tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot write the GGUF file"):
        linnet_gguf.export(tiny_checkpoint, tmp_path / "file" / "x.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing half-written
