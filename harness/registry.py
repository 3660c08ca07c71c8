"""The model registry: every model the bench knows, with its real configuration and its page facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from linnet_core import checkpoint
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError


@dataclass(frozen=True)
class ModelEntry:
    id: str  # the name used on the command line and in results/<id>/
    title: str  # the page title
    description: str  # one line under the title
    config: ModelConfig  # the exact architecture; synthetic weights take these shapes
    family: str  # e.g. "qwen2"
    license: str  # SPDX id
    task: str  # e.g. "text-generation"
    tags: tuple[str, ...]  # architecture tags shown on the page
    links: dict[str, str]  # label -> URL
    first_special_token: int  # prompts draw token ids below this
    checkpoint_dtype: str  # dtype synthetic weights are stored in, as the real checkpoint is
    aliases: tuple[str, ...] = ()  # other accepted names
    hf_id: str | None = None  # the Hugging Face repository of the real weights
    is_tiny: bool = False  # a test-sized model: the default profile runs on a CPU in seconds
    extra: dict = field(default_factory=dict)  # anything else worth showing

    @property
    def parameters(self) -> int:
        return self.config.num_parameters


QWEN25_05B = ModelEntry(
    id="qwen2.5-0.5b-instruct",
    aliases=("qwen2.5-0.5b",),
    title="Qwen2.5 0.5B Instruct",
    description=(
        "A 0.5B-parameter Qwen2 decoder with grouped-query attention, biased query/key/value projections, "
        "and an output head tied to the token embedding, instruction-tuned."
    ),
    config=ModelConfig(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
    ),
    family="qwen2",
    license="Apache-2.0",
    task="text-generation",
    tags=("decoder-only", "grouped-query-attention", "chat"),
    links={
        "Hugging Face": "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct",
        "GitHub": "https://github.com/QwenLM/Qwen2.5",
        "arXiv": "https://arxiv.org/abs/2412.15115",
    },
    first_special_token=151643,
    checkpoint_dtype="bfloat16",
    hf_id="Qwen/Qwen2.5-0.5B-Instruct",
)

QWEN2_TINY = ModelEntry(
    id="qwen2-tiny",
    title="Qwen2 tiny",
    description=(
        "The Qwen2 architecture at test size: grouped-query attention, biased query/key/value projections "
        "and a tied output head, with synthetic weights. The embedded default."
    ),
    config=ModelConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=1000,
        eos_token_id=1001,
    ),
    family="qwen2",
    license="Apache-2.0",
    task="text-generation",
    tags=("decoder-only", "grouped-query-attention", "test-size"),
    links={},
    first_special_token=1000,
    checkpoint_dtype="float32",
    is_tiny=True,
)

MODELS: dict[str, ModelEntry] = {m.id: m for m in (QWEN25_05B, QWEN2_TINY)}
DEFAULT_MODEL = QWEN2_TINY.id


def get_model(name: str) -> ModelEntry:
    """The entry for a model id or alias; a one-line error listing the valid ids otherwise."""
    for entry in MODELS.values():
        if name == entry.id or name in entry.aliases:
            return entry
    names = ", ".join(f"{m.id} (alias {', '.join(m.aliases)})" if m.aliases else m.id for m in MODELS.values())
    raise UserError(f"unknown model {name!r}; known models: {names}")


def checkpoint_for(entry: ModelEntry, weights: Path | None, seed: int = 0) -> tuple[Path, str]:
    """(checkpoint directory, weights label): a checked local directory, or synthetic weights of the exact shape."""
    if weights is None:
        return checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype, seed), "synthetic"
    path = Path(weights).resolve()
    config = checkpoint.read_config(path)
    if config != entry.config:
        diff = [k for k, v in vars(config).items() if getattr(entry.config, k) != v]
        raise UserError(f"{path / checkpoint.CONFIG_FILE}: does not match {entry.id} ({', '.join(diff)} differ)")
    checkpoint.check_weights(path, config, checkpoint.header_shapes(path))
    return path, str(path)
