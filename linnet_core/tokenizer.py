"""The tokenizer of a synthetic checkpoint, built where the checkpoint is written: a byte-level BPE (the kind
Qwen2 uses) trained with the `tokenizers` library on text this project ships (linnet_core/data/, a frozen copy of
the README), with ChatML's special tokens and chat template, as Qwen2.5-Instruct's tokenizer has them.

Ordinary tokens take the ids below the model's first special id (at most MAX_ORDINARY of them: a few pages of text
train no more); the specials take the ids the model config names (bos -> <|endoftext|>, eos -> <|im_end|>) and
the next free one (<|im_start|>), all inside the model's vocabulary. Ids in between decode to nothing. Saved as
tokenizer.json + tokenizer_config.json, so transformers' AutoTokenizer and apply_chat_template read it as they
would a real checkpoint's (a real checkpoint keeps its own tokenizer)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from linnet_core.config import ModelConfig

CORPUS = Path(__file__).parent / "data" / "tokenizer_corpus.txt"
MAX_ORDINARY = 4096  # ids for ordinary tokens; the corpus runs out of merges well before more
VERSION = 3  # bump when the recipe changes: synthetic checkpoints are cached by fingerprint()
END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# Qwen2's pre-tokenizer split (its tokenizer.json), which llama.cpp's "qwen2" pre-tokenizer implements: the GGUF
# export of a synthetic checkpoint then tokenizes as transformers does
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML, as Qwen2.5-Instruct's template without its tool-calling branches
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def special_ids(config: ModelConfig) -> dict[str, int]:
    """Special token -> id: the config's bos and eos where it names them, <|im_start|> the lowest free id above
    the first special; without bos / eos, the top ids of the vocabulary."""
    v = config.vocab_size
    named = {END_OF_TEXT: config.bos_token_id, IM_END: config.eos_token_id}
    if named[END_OF_TEXT] == named[IM_END]:  # one id for both (some configs): <|endoftext|> moves to a free one
        named[END_OF_TEXT] = None
    taken = {i for i in named.values() if i is not None}
    first = min(taken) if taken else v - 3
    free = (i for i in range(first, v) if i not in taken)
    ids = {token: i if i is not None else next(free) for token, i in named.items()}
    taken |= set(ids.values())
    ids[IM_START] = next(i for i in range(first, v) if i not in taken)
    assert all(0 <= i < v for i in ids.values()), (ids, v)
    return ids


def fingerprint() -> str:
    """Changes whenever the tokenizer a checkpoint would get changes (the corpus, the recipe, the template)."""
    digest = hashlib.sha256(CORPUS.read_bytes() + f"{VERSION}{QWEN2_SPLIT}{CHAT_TEMPLATE}".encode())
    return digest.hexdigest()[:8]


def train(config: ModelConfig):
    """The tokenizers.Tokenizer of this config: the BPE trained on the corpus, the specials at their ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = special_ids(config)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # Qwen-style vocabularies keep their specials at the top: the ordinary tokens take the ids below them. Llama- and
    # Gemma-style ones keep them at the bottom (bos 1, eos 2): the ordinary tokens then take the ids above them.
    offset = max(specials.values()) + 1 if min(specials.values()) < len(alphabet) else 0
    ordinary = min(min(specials.values()) if offset == 0 else config.vocab_size - offset, MAX_ORDINARY)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()  # as Qwen2's (transformers' Qwen2Tokenizer applies it anyway)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tokenizer.decoder = decoders.ByteLevel()
    if ordinary < len(alphabet):
        raise ValueError(f"a vocabulary of {config.vocab_size} leaves {ordinary} ids below the specials: a byte-level BPE needs {len(alphabet)}")
    trainer = trainers.BpeTrainer(vocab_size=ordinary, initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(keepends=True), trainer)
    # The specials go into the model's vocabulary at their ids (gaps allowed), then are marked special: the
    # `tokenizers` library would otherwise number added tokens right after the trained ones.
    data = json.loads(tokenizer.to_str())
    data["model"]["vocab"] = {token: i + offset for token, i in data["model"]["vocab"].items()}  # merges name tokens, not ids
    data["model"]["vocab"].update(specials)
    data["added_tokens"] = [
        {"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for token, i in sorted(specials.items(), key=lambda kv: kv[1])
    ]
    return Tokenizer.from_str(json.dumps(data))


def write_tokenizer(config: ModelConfig, directory: Path) -> None:
    """tokenizer.json, tokenizer_config.json (and the chat template) into a checkpoint directory."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train(config),
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START],
        model_max_length=config.max_position_embeddings,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    # the template inside tokenizer_config.json, as Qwen2.5-Instruct ships it (tools that copy a checkpoint's
    # tokenizer files copy it with them)
    tokenizer.save_pretrained(directory, save_jinja_files=False)
