"""The Hugging Face export: a checkpoint directory that transformers, vLLM, SGLang and TGI load as the architecture's
*ForCausalLM (Qwen2ForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM).

config.json is written from Linnet's ModelConfig, the weights as one safetensors file in the source's dtype
(a tied output head is stored once, as the embedding), generation_config.json keeps greedy decoding greedy,
and the source's tokenizer files are copied when it has them. The directory appears whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from linnet_core import checkpoint
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError

GENERATION_FILE = "generation_config.json"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
    "added_tokens.json", "chat_template.jinja", "chat_template.json",
)  # fmt: skip
# Token ids a generation config may carry; its sampling settings (do_sample, temperature, top_p, top_k,
# repetition_penalty, ...) are dropped, because engines that read the file (transformers' generate, vLLM's
# default sampling parameters) would otherwise turn a greedy request into a sampled or penalised one.
GENERATION_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def export(source: Path, out: Path) -> Path:
    """Writes the checkpoint directory `source` as a Hugging Face checkpoint in the new or empty directory
    `out`; returns `out`."""
    source, out = Path(source), Path(out)
    config = checkpoint.read_config(source)
    tmp = temporary_directory_beside(out)
    try:
        tensors = checkpoint.load_weights(source, framework="pt")
        if config.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)  # the head reads model.embed_tokens.weight
        dtype = str(tensors["model.embed_tokens.weight"].dtype).removeprefix("torch.")
        save_file(tensors, str(tmp / checkpoint.WEIGHTS_FILE), metadata=source_metadata(source))
        write_json(tmp / checkpoint.CONFIG_FILE, config.to_hf(dtype))
        write_json(tmp / GENERATION_FILE, greedy_generation_config(source, config))
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, tmp / name)
        if out.exists():
            out.rmdir()  # empty, checked above: the rename needs it gone
        os.rename(tmp, out)
    except OSError as e:
        raise UserError(f"{out}: cannot write the export ({e.strerror or e})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def temporary_directory_beside(out: Path) -> Path:
    """A fresh directory next to `out` (same file system, so the final rename is atomic)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is a file; the hf export writes a directory")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"{out}: is not empty; export into a new or empty directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    except OSError as e:
        raise UserError(f"{out}: cannot write the export ({e.strerror or e})") from None


def source_metadata(source: Path) -> dict[str, str]:
    """The source's safetensors metadata, kept: it says where the weights came from, and an unchanged header
    keeps the tensors at the same offsets, so memory-mapped weights have the same alignment and CPU kernels
    the same summation order (a header 24 bytes shorter changed logits by 2e-5)."""
    from safetensors import safe_open

    metadata = {}
    for file in checkpoint.weight_files(source):
        with safe_open(file, framework="pt") as f:
            metadata |= f.metadata() or {}
    return {**metadata, "format": "pt"}


def greedy_generation_config(source: Path, config: ModelConfig) -> dict:
    """The source's token ids (its generation_config.json's, else config.json's) with do_sample false."""
    try:
        found = json.loads((source / GENERATION_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        found = {}
    ids = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    ids |= {k: found[k] for k in GENERATION_IDS if found.get(k) is not None}
    return {**{k: v for k, v in ids.items() if v is not None}, "do_sample": False}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
