"""The GGUF export: a checkpoint as one GGUF file that llama.cpp loads, written with the `gguf` package.

The architecture's llama.cpp name (its module's GGUF_ARCH: qwen2, llama, qwen3) with the hyperparameters llama.cpp
requires, the tokenizer (`gpt2` BPE; a synthetic byte-level vocabulary when the checkpoint has none), and the
tensors under llama.cpp's names. Qwen2 and Qwen3 use NEOX-style RoPE (rotate halves), as Hugging Face stores q/k;
llama.cpp's `llama` rotates adjacent pairs, so its q/k rows are permuted as llama.cpp's own converter does, and
Llama 3's frequency scaling travels as the `rope_freqs` tensor of per-pair divisors.
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

Q = gguf.GGMLQuantizationType
PRE_TOKENIZERS = {"LLAMA": "llama-bpe"}  # llama.cpp's pre-tokenizer for a synthetic vocabulary; else "qwen2"
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
        writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[arch_of(config)])
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


# Architectures whose GGUF this llama.cpp does not compute as transformers does, and what was measured.
LLAMA_CPP_MISMATCH = {
    "GEMMA3": "llama.cpp's Gemma 3 is not within the f32 bound of transformers: on gemma3-tiny its logits are "
              "2.5e-2 from transformers' with an f32 GGUF and KV cache (its Llama and Qwen rows: under 1e-4), and it "
              "ignores query_pre_attn_scalar and sliding-window patterns other than 5:1; the GGUF export is written",
}  # fmt: skip


def llama_cpp_mismatch(config: ModelConfig) -> str | None:
    """Why llama.cpp's row cannot stand for this architecture, or None."""
    return LLAMA_CPP_MISMATCH.get(config.architecture.GGUF_ARCH)


def arch_of(config: ModelConfig) -> gguf.MODEL_ARCH:
    return getattr(gguf.MODEL_ARCH, config.architecture.GGUF_ARCH)


def write_hyperparameters(writer: gguf.GGUFWriter, config: ModelConfig, dtype: str, name: str) -> None:
    """The keys llama.cpp's loaders read (the RoPE type follows from the arch)."""
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
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_vocab_size(config.vocab_size)
    if config.layer_types is not None:  # Gemma 3: which layers slide, over how many positions, turning how fast
        writer.add_sliding_window(config.sliding_window)
        writer.add_sliding_window_pattern([t == "sliding_attention" for t in config.layer_types])
        writer.add_rope_freq_base_swa(config.rope_local_base_freq)
    if config.query_pre_attn_scalar is not None:
        writer.add_attention_scale(config.query_pre_attn_scalar**-0.5)


def gguf_tensors(tensors: dict, config: ModelConfig, dtype: str):
    """(llama.cpp name, array, storage type) per tensor. Arrays keep Hugging Face's [out, in] layout: the
    writer reverses the dimensions into GGUF's order. 1-D tensors (norms, biases) stay f32."""
    arch = arch_of(config)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    weight_type = DTYPES[dtype][0]
    if arch == gguf.MODEL_ARCH.LLAMA and config.rope_scaling:
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", rope_divisors(config), Q.F32
    for hf_name, tensor in tensors.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: llama.cpp falls back to token_embd.weight
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, f"no llama.cpp name for {hf_name}"
        data = tensor.float().numpy()
        if arch == gguf.MODEL_ARCH.GEMMA3 and hf_name.endswith("norm.weight"):
            data = data + 1.0  # llama.cpp's Gemma norms scale by the stored weight, Hugging Face's by (1 + w)
        if arch == gguf.MODEL_ARCH.LLAMA and ".self_attn.q_proj." in hf_name:
            data = interleave_rope_rows(data, config.num_attention_heads)
        elif arch == gguf.MODEL_ARCH.LLAMA and ".self_attn.k_proj." in hf_name:
            data = interleave_rope_rows(data, config.num_key_value_heads)
        qtype = weight_type if data.ndim == 2 else Q.F32
        if qtype == Q.Q8_0 and data.shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0]:
            qtype = Q.F16  # rows not a whole number of 32-value blocks: what llama.cpp's converter does
        yield gguf_name, gguf.quants.quantize(data, qtype), qtype


def interleave_rope_rows(data, heads: int):
    """q or k projection rows (weight [heads * D, in] or bias [heads * D]) reordered per head from Hugging Face's
    halves (dim i pairs with i + D/2) to llama.cpp's adjacent pairs (2i with 2i + 1): llama.cpp's converter's
    permute."""
    return data.reshape(heads, 2, data.shape[0] // heads // 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape)


def rope_divisors(config: ModelConfig):
    """llama.cpp's rope_freqs: per pair of dims, what its plain RoPE frequency is divided by (Llama 3 scaling)."""
    import numpy as np

    from linnet_core.rope import inverse_frequencies

    plain = inverse_frequencies(config.head_dim, config.rope_theta)
    return (plain / inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)).astype(np.float32)


def read_vocabulary(source: Path, config: ModelConfig) -> Vocabulary:
    if any((source / f).is_file() for f in TOKENIZER_FILES):
        return tokenizer_vocabulary(source, config)
    return synthetic_vocabulary(config)


def write_vocabulary(writer: gguf.GGUFWriter, vocabulary: Vocabulary, source: Path, config: ModelConfig) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZERS.get(config.architecture.GGUF_ARCH, "qwen2"))
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
    specials = {i for i in (config.bos_token_id, config.eos_token_id) if i is not None}
    # control tokens: bos and eos, and every id from the first of them above the byte tokens up (Qwen's layout)
    first_special = min((i for i in specials if i >= 256 + len(specials)), default=config.vocab_size)
    control = specials | set(range(first_special, config.vocab_size))
    n_normal = config.vocab_size - len(control)
    byte_chars = list(bytes_to_unicode().values())
    assert n_normal >= len(byte_chars), f"no room for the 256 byte tokens among {n_normal} ordinary ids"
    normal, merges = list(byte_chars), []
    left = 0
    while len(normal) < n_normal:  # token = normal[left] + one byte char: distinct, since both parts are
        for char in byte_chars:
            if len(normal) == n_normal:
                break
            normal.append(normal[left] + char)
            merges.append(f"{normal[left]} {char}")
        left += 1
    ordinary = iter(normal)
    tokens = [f"<|special_{i}|>" if i in control else next(ordinary) for i in range(config.vocab_size)]
    types = [gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL for i in range(config.vocab_size)]
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
