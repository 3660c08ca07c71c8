"""The GGUF export: a Qwen2 checkpoint as one GGUF file that llama.cpp loads, written with the `gguf` package.

Architecture `qwen2` with the hyperparameters llama.cpp requires, the tokenizer (`gpt2` BPE with the `qwen2`
pre-tokenizer; a synthetic byte-level vocabulary when the checkpoint has none), and the tensors under llama.cpp's
names. Qwen2 uses NEOX-style RoPE (rotate halves), as Hugging Face stores q/k, so nothing is permuted.
A tied output head is not stored: llama.cpp reads `token_embd.weight` for it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf

from linnet_core import checkpoint
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError

ARCH = gguf.MODEL_ARCH.QWEN2
Q = gguf.GGMLQuantizationType
# --dtype -> (storage of 2-D weights, the file type llama.cpp reports). Norms and biases stay f32, as in
# llama.cpp's own converter.
DTYPES = {
    "f32": (Q.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (Q.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (Q.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")  # either one means the checkpoint has a tokenizer


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[str]  # one string per token id, exactly vocab_size of them
    types: list[int]  # a gguf.TokenType per token
    merges: list[str]  # BPE merges "left right", by rank
    source: str  # "tokenizer" (read from the checkpoint) or "synthetic"


def export(source: Path, out: Path, dtype: str = "f32", name: str | None = None) -> Path:
    """Writes the checkpoint directory `source` as the GGUF file `out` (atomically); returns `out`."""
    if dtype not in DTYPES:
        raise UserError(f"unknown GGUF dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    source, out = Path(source), Path(out)
    config = checkpoint.read_config(source)
    tmp = temporary_sibling(out)
    try:
        tensors = checkpoint.load_weights(source, framework="pt")  # "pt": bf16 checkpoints have no numpy dtype
        vocabulary = read_vocabulary(source, config)
        writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[ARCH])
        write_hyperparameters(writer, config, dtype, name or source.name)
        write_vocabulary(writer, vocabulary, source, config)
        for gguf_name, array, qtype in gguf_tensors(tensors, config, dtype):
            writer.add_tensor(gguf_name, array, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    except OSError as e:
        raise UserError(f"{out}: cannot write the GGUF file ({e.strerror or e})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def temporary_sibling(out: Path) -> str:
    """A fresh file beside `out`, so the final rename is atomic; a one-line error if the folder is unusable."""
    if out.is_dir():
        raise UserError(f"{out}: is a directory; give the GGUF file's path (e.g. {out / 'model.gguf'})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as e:
        raise UserError(f"{out}: cannot write the GGUF file ({e.strerror or e})") from None
    os.close(fd)
    return tmp


def write_hyperparameters(writer: gguf.GGUFWriter, config: ModelConfig, dtype: str, name: str) -> None:
    """The keys llama.cpp's qwen2 loader reads (head_dim and the RoPE type follow from these and the arch)."""
    writer.add_name(name)
    writer.add_file_type(DTYPES[dtype][1])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_theta)


def gguf_tensors(tensors: dict, config: ModelConfig, dtype: str):
    """(llama.cpp name, array, storage type) per tensor. Arrays keep Hugging Face's [out, in] layout: the
    writer reverses the dimensions into GGUF's order. 1-D tensors (norms, biases) stay f32."""
    names = gguf.get_tensor_name_map(ARCH, config.num_hidden_layers)
    weight_type = DTYPES[dtype][0]
    for hf_name, tensor in tensors.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: llama.cpp falls back to token_embd.weight
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, f"no llama.cpp name for {hf_name}"
        data = tensor.float().numpy()
        qtype = weight_type if data.ndim == 2 else Q.F32
        if qtype == Q.Q8_0 and data.shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0]:
            qtype = Q.F16  # rows not a whole number of 32-value blocks: what llama.cpp's converter does
        yield gguf_name, gguf.quants.quantize(data, qtype), qtype


def read_vocabulary(source: Path, config: ModelConfig) -> Vocabulary:
    if any((source / f).is_file() for f in TOKENIZER_FILES):
        return tokenizer_vocabulary(source, config)
    return synthetic_vocabulary(config)


def write_vocabulary(writer: gguf.GGUFWriter, vocabulary: Vocabulary, source: Path, config: ModelConfig) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_types(vocabulary.types)
    if vocabulary.source == "tokenizer":
        # merges, bos/eos/pad ids, add_bos and the chat template, read as llama.cpp's converter reads them
        special = gguf.SpecialVocab(source, load_merges=True, n_vocab=config.vocab_size)
        special.add_to_gguf(writer, quiet=True)
        if "bos" not in special.add_special_token:
            writer.add_add_bos_token(False)  # Qwen2 prompts start without a BOS token
        return
    writer.add_token_merges(vocabulary.merges)
    if config.bos_token_id is not None:
        writer.add_bos_token_id(config.bos_token_id)
    if config.eos_token_id is not None:
        writer.add_eos_token_id(config.eos_token_id)
    writer.add_add_bos_token(False)


def tokenizer_vocabulary(source: Path, config: ModelConfig) -> Vocabulary:
    """The checkpoint's tokenizer, one entry per embedding row, as llama.cpp's converter lists a GPT-2 BPE
    vocabulary: ids the tokenizer lacks become unused [PADn] entries, special added tokens are control tokens."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise UserError(f"{source}: unreadable tokenizer ({e})") from None
    by_id = {i: token for token, i in tokenizer.get_vocab().items()}
    if max(by_id) >= config.vocab_size:
        raise UserError(f"{source}: the tokenizer has token id {max(by_id)}, the model only {config.vocab_size} rows")
    added, decoder = tokenizer.get_added_vocab(), tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(config.vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        tokens.append(token)
        if token not in added:
            types.append(gguf.TokenType.NORMAL)
        elif decoder[i].special or (token.startswith("<|") and token.endswith("|>")):
            types.append(gguf.TokenType.CONTROL)
        else:
            types.append(gguf.TokenType.USER_DEFINED)
    return Vocabulary(tokens, types, merges=[], source="tokenizer")


def synthetic_vocabulary(config: ModelConfig) -> Vocabulary:
    """A byte-level BPE vocabulary of exactly vocab_size tokens, for checkpoints without a tokenizer
    (synthetic weights). Ids below the first special id (bos/eos) are ordinary tokens: the 256 GPT-2 byte
    characters, then each earlier token extended by one byte character, each with its merge; ids from the
    first special id up are control tokens <|special_N|>."""
    specials = [i for i in (config.bos_token_id, config.eos_token_id) if i is not None]
    first_special = min(specials, default=config.vocab_size)
    byte_chars = list(bytes_to_unicode().values())
    assert first_special >= len(byte_chars), f"no room for the 256 byte tokens below special id {first_special}"
    tokens, merges = list(byte_chars), []
    left = 0
    while len(tokens) < first_special:  # token = tokens[left] + one byte char: distinct, since both parts are
        for char in byte_chars:
            if len(tokens) == first_special:
                break
            tokens.append(tokens[left] + char)
            merges.append(f"{tokens[left]} {char}")
        left += 1
    types = [gguf.TokenType.NORMAL] * first_special
    tokens += [f"<|special_{i}|>" for i in range(first_special, config.vocab_size)]
    types += [gguf.TokenType.CONTROL] * (config.vocab_size - first_special)
    return Vocabulary(tokens, types, merges, source="synthetic")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE writes every byte as one of these)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(chars.items(), key=lambda kv: (kv[0] not in printable, kv[0])))
