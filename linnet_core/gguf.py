"""The GGUF export: a checkpoint as one GGUF file that llama.cpp loads, written with the `gguf` package.

The generic writer: the architecture's llama.cpp name with the hyperparameters every llama.cpp loader reads, the
tokenizer (`gpt2` BPE; a synthetic byte-level vocabulary when the checkpoint has none), and the tensors under
llama.cpp's names. What one architecture's llama.cpp loader wants besides (its name, pre-tokenizer, extra keys,
tensor values it stores otherwise than Hugging Face, extra tensors, and how far llama.cpp is from transformers on it)
is declared by its module in linnet_core/arch/ (GGUF_ARCH, GGUF_PRE_TOKENIZER, gguf_hyperparameters, gguf_tensor,
gguf_extra_tensors, LLAMA_CPP_MISMATCH). A tied output head is not stored: llama.cpp reads `token_embd.weight`."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf

from linnet_core import checkpoint
from linnet_core.arch import declared
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError

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
    arch = arch_of(config)
    tmp = temporary_sibling(out)
    try:
        with checkpoint.numpy_on_small_pages():
            tensors = checkpoint.load_weights(source, framework="pt")  # "pt": bf16 checkpoints have no numpy dtype
            vocabulary = read_vocabulary(source, config)
            writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[arch])
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


def llama_cpp_mismatch(config: ModelConfig) -> str | None:
    """Why llama.cpp's row cannot stand for this architecture (no GGUF export, or a measured gap), or None."""
    try:
        arch_of(config)
    except UserError as e:
        return str(e)
    return declared(config.architecture, "LLAMA_CPP_MISMATCH")


def arch_of(config: ModelConfig) -> gguf.MODEL_ARCH:
    """llama.cpp's architecture for the config's (its module's GGUF_ARCH); a one-line error when there is none."""
    name = declared(config.architecture, "GGUF_ARCH")
    if name is None:
        raise UserError(f"Linnet has no GGUF export for the {config.model_type} architecture")
    if not hasattr(gguf.MODEL_ARCH, name):
        raise UserError(f"gguf {gguf.__version__} has no {name} architecture for {config.model_type}; upgrade gguf")
    return getattr(gguf.MODEL_ARCH, name)


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
    for key, value in declared(config.architecture, "gguf_hyperparameters")(config).items():
        getattr(writer, f"add_{key}")(value)


def gguf_tensors(tensors: dict, config: ModelConfig, dtype: str):
    """(llama.cpp name, array, storage type) per tensor: the architecture's extra tensors, then the checkpoint's
    as its gguf_tensor hook gives them. Arrays keep Hugging Face's [out, in] layout: the writer reverses the
    dimensions into GGUF's order. 1-D tensors (norms, biases) stay f32."""
    arch = config.architecture
    names = gguf.get_tensor_name_map(arch_of(config), config.num_hidden_layers)
    for key, data in declared(arch, "gguf_extra_tensors")(config).items():
        yield gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, key)] + ".weight", *stored(data, dtype)
    tensor_hook = declared(arch, "gguf_tensor")
    for hf_name, tensor in tensors.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: llama.cpp falls back to token_embd.weight
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise UserError(f"llama.cpp's {arch.GGUF_ARCH} has no tensor for the checkpoint's {hf_name}")
        yield gguf_name, *stored(tensor_hook(hf_name, tensor.float().numpy(), config), dtype)


def stored(data, dtype: str):
    """(the array as stored, its storage type) for an export in `dtype`: 2-D weights in it, the rest in f32."""
    qtype = DTYPES[dtype][0] if data.ndim == 2 else Q.F32
    if qtype == Q.Q8_0 and data.shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0]:
        qtype = Q.F16  # rows not a whole number of 32-value blocks: what llama.cpp's converter does
    return gguf.quants.quantize(data, qtype), qtype


def read_vocabulary(source: Path, config: ModelConfig) -> Vocabulary:
    if any((source / f).is_file() for f in TOKENIZER_FILES):
        return tokenizer_vocabulary(source, config)
    return synthetic_vocabulary(config)


def write_vocabulary(writer: gguf.GGUFWriter, vocabulary: Vocabulary, source: Path, config: ModelConfig) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(declared(config.architecture, "GGUF_PRE_TOKENIZER"))
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
