"""The models Linnet and Linnet Bench know by name, with their real configuration and page facts, and the
resolution of a model argument: a registry id or alias, or a local Hugging Face checkpoint directory of a supported
architecture (its entry then comes from its own config.json). Synthetic weights take a model's exact shapes."""

from __future__ import annotations

import json
import re
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
    local_path: Path | None = None  # a local checkpoint directory the entry was read from (no registry entry)

    @property
    def parameters(self) -> int:
        return self.config.num_parameters

    @property
    def architecture(self) -> str:
        return self.config.model_type


def hf_links(hf_id: str) -> dict[str, str]:
    return {"Hugging Face": f"https://huggingface.co/{hf_id}"}


def real(id, hf_id, title, description, config, license, first_special_token, tags, aliases=(), links=None):
    """An entry for a published model: its config.json's shapes, synthetic weights in its bf16 dtype by default."""
    return ModelEntry(id=id, title=title, description=description, config=config, family=config.model_type,
                      license=license, task="text-generation", tags=("decoder-only", *tags, "chat"),
                      links={**hf_links(hf_id), **(links or {})}, first_special_token=first_special_token,
                      checkpoint_dtype="bfloat16", aliases=aliases, hf_id=hf_id)  # fmt: skip


def tiny(id, title, description, config, tags):
    """A test-size twin: f32 synthetic weights, tokens 1000 and up special."""
    return ModelEntry(id=id, title=title, description=description, config=config, family=config.model_type,
                      license="Apache-2.0", task="text-generation", tags=("decoder-only", *tags, "test-size"), links={},
                      first_special_token=1000, checkpoint_dtype="float32", is_tiny=True)  # fmt: skip


TINY = dict(vocab_size=1024, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=1000, eos_token_id=1001)  # fmt: skip

ENTRIES = (
    real(
        "qwen2.5-0.5b-instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5 0.5B Instruct",
        "A 0.5B-parameter Qwen2 decoder with grouped-query attention, biased query/key/value projections, "
        "and an output head tied to the token embedding, instruction-tuned.",
        ModelConfig(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                    num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                    max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                    tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
        "Apache-2.0", 151643, ("grouped-query-attention",), aliases=("qwen2.5-0.5b",),
        links={"GitHub": "https://github.com/QwenLM/Qwen2.5", "arXiv": "https://arxiv.org/abs/2412.15115"},
    ),
    real(
        "llama-3.2-1b-instruct", "meta-llama/Llama-3.2-1B-Instruct", "Llama 3.2 1B Instruct",
        "A 1.2B-parameter Llama decoder: grouped-query attention without biases, RoPE with Llama 3 frequency "
        "scaling, and an output head tied to the token embedding, instruction-tuned.",
        ModelConfig(model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                    num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                    max_position_embeddings=131072, rope_theta=500_000.0, rms_norm_eps=1e-5,
                    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                    tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001),
        "Llama-3.2", 128000, ("grouped-query-attention", "rope-scaling"), aliases=("llama-3.2-1b",),
    ),
    real(
        "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2 135M Instruct",
        "A 135M-parameter Llama decoder of 30 narrow layers with grouped-query attention and a tied output head, "
        "instruction-tuned.",
        ModelConfig(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    max_position_embeddings=8192, rope_theta=100_000.0, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        "Apache-2.0", 49152, ("grouped-query-attention",), aliases=("smollm2-135m",),
    ),
    real(
        "qwen3-0.6b", "Qwen/Qwen3-0.6B", "Qwen3 0.6B",
        "A 0.6B-parameter Qwen3 decoder: grouped-query attention with RMS-normalised query and key heads, "
        "heads of 128 over a width of 1024, and a tied output head.",
        ModelConfig(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                    num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                    max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                    tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645),
        "Apache-2.0", 151643, ("grouped-query-attention", "qk-norm"),
    ),
    real(
        "gemma-3-270m-it", "google/gemma-3-270m-it", "Gemma 3 270M IT",
        "A 270M-parameter Gemma 3 text decoder: five sliding-window layers to one global, each with its own RoPE "
        "base, GeGLU, RMSNorms before and after attention and MLP, q/k norms, and a tied head, instruction-tuned.",
        ModelConfig(model_type="gemma3_text", vocab_size=262144, hidden_size=640, intermediate_size=2048,
                    num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                    max_position_embeddings=32768, rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
                    sliding_window=512, query_pre_attn_scalar=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    layer_types=tuple("full_attention" if (n + 1) % 6 == 0 else "sliding_attention" for n in range(18)),
                    bos_token_id=2, eos_token_id=1),
        "Gemma", 262144, ("multi-query-attention", "sliding-window", "qk-norm"),
    ),
    real(
        "olmo-2-1b", "allenai/OLMo-2-0425-1B", "OLMo 2 1B",
        "A 1.5B-parameter OLMo 2 decoder: multi-head attention with queries and keys RMS-normalised over the whole "
        "projection, RMSNorms after attention and after the MLP (none before), and an untied output head.",
        ModelConfig(model_type="olmo2", vocab_size=100352, hidden_size=2048, intermediate_size=8192,
                    num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                    max_position_embeddings=4096, rope_theta=500_000.0, rms_norm_eps=1e-6,
                    tie_word_embeddings=False, bos_token_id=None, eos_token_id=100257),
        "Apache-2.0", 100256, ("multi-head-attention", "qk-norm", "post-norm"),
        links={"GitHub": "https://github.com/allenai/OLMo", "arXiv": "https://arxiv.org/abs/2501.00656"},
    ),
    tiny(
        "qwen2-tiny", "Qwen2 tiny",
        "The Qwen2 architecture at test size: grouped-query attention, biased query/key/value projections "
        "and a tied output head, with synthetic weights. The embedded default.",
        ModelConfig(model_type="qwen2", rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, **TINY),
        ("grouped-query-attention",),
    ),
    tiny(
        "llama-tiny", "Llama tiny",
        "The Llama architecture at test size: grouped-query attention without biases, RoPE with Llama 3 "
        "frequency scaling, and an untied output head, with synthetic weights.",
        ModelConfig(model_type="llama", rope_theta=500_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 256}, **TINY),
        ("grouped-query-attention", "rope-scaling"),
    ),
    tiny(
        "qwen3-tiny", "Qwen3 tiny",
        "The Qwen3 architecture at test size: grouped-query attention with RMS-normalised query and key heads, "
        "heads wider than width / heads (an explicit head_dim), and a tied output head, with synthetic weights.",
        ModelConfig(model_type="qwen3", head_dim=32, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                    tie_word_embeddings=True, **TINY),
        ("grouped-query-attention", "qk-norm"),
    ),
    tiny(
        "olmo2-tiny", "OLMo 2 tiny",
        "The OLMo 2 architecture at test size: grouped-query attention with queries and keys RMS-normalised over "
        "the whole projection, RMSNorms after attention and after the MLP (none before), and an untied output head, "
        "with synthetic weights.",
        ModelConfig(model_type="olmo2", rope_theta=500_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, **TINY),
        ("grouped-query-attention", "qk-norm", "post-norm"),
    ),
)
GEMMA3_TINY = tiny(
    "gemma3-tiny", "Gemma 3 tiny",
    "The Gemma 3 text architecture at test size: five sliding-window layers of 8 positions (their own RoPE base) "
    "then a global one, GeGLU, pre- and post-norms of (1 + w), q/k norms, and embeddings scaled by sqrt(hidden), "
    "with synthetic weights.",
    # six layers in Gemma 3's own 5:1 pattern, query_pre_attn_scalar = head_dim as in Gemma 3 270M: the
    # relationships KerasHub's and llama.cpp's Gemma 3 assume
    ModelConfig(model_type="gemma3_text", **{**TINY, "num_hidden_layers": 6}, head_dim=32, rope_theta=1_000_000.0,
                rope_local_base_freq=10_000.0, sliding_window=8, query_pre_attn_scalar=32, rms_norm_eps=1e-6,
                tie_word_embeddings=True, layer_types=("sliding_attention",) * 5 + ("full_attention",)),
    ("grouped-query-attention", "sliding-window", "qk-norm"),
)
# microsoft/Phi-4-mini-instruct's config.json: LongRoPE over the 48 pairs of the 96 rotated dims of a head
PHI4_MINI_LONG_FACTOR = [
    1.0, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649, 2.446418898,
    2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533, 5.984965424,
    6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651, 14.64173252,
    16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6,
    32.61, 32.64, 32.66, 32.7, 32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77,
]  # fmt: skip
PHI_ENTRIES = (
    real(
        "phi-4-mini-instruct", "microsoft/Phi-4-mini-instruct", "Phi-4-mini Instruct",
        "A 3.8B-parameter Phi-3 decoder: grouped-query attention over fused query/key/value weights, RoPE on the "
        "first 96 of each head's 128 dims with LongRoPE scaling, a 200k vocabulary and a tied output head, "
        "instruction-tuned.",
        ModelConfig(model_type="phi3", vocab_size=200064, hidden_size=3072, intermediate_size=8192,
                    num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                    max_position_embeddings=131072, rope_theta=10_000.0, rms_norm_eps=1e-5, partial_rotary_factor=0.75,
                    rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 48,
                                  "long_factor": PHI4_MINI_LONG_FACTOR, "original_max_position_embeddings": 4096},
                    sliding_window=262144, tie_word_embeddings=True, bos_token_id=199999, eos_token_id=199999),
        "MIT", 199999, ("grouped-query-attention", "partial-rotary", "rope-scaling"), aliases=("phi-4-mini",),
    ),
    tiny(
        "phi3-tiny", "Phi-3 tiny",
        "The Phi-3 architecture at test size: query/key/value and gate/up weights fused in the checkpoint, RoPE on "
        "the first 12 of each head's 16 dims with LongRoPE scaling (its short factors and attention factor), and "
        "a tied output head, with synthetic weights.",
        ModelConfig(model_type="phi3", **TINY, rope_theta=10_000.0, rms_norm_eps=1e-5, partial_rotary_factor=0.75,
                    rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                  "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                                  "original_max_position_embeddings": 1024},
                    tie_word_embeddings=True),
        ("grouped-query-attention", "partial-rotary", "rope-scaling"),
    ),
)
ENTRIES = (*ENTRIES, GEMMA3_TINY, *PHI_ENTRIES)
MODELS: dict[str, ModelEntry] = {m.id: m for m in ENTRIES}
DEFAULT_MODEL = "qwen2-tiny"


def get_model(name: str) -> ModelEntry:
    """The entry for a model id or alias, or for a local checkpoint directory; a one-line error listing the
    valid ids otherwise."""
    for entry in MODELS.values():
        if name == entry.id or name in entry.aliases:
            return entry
    if looks_like_path(name):
        return local_entry(Path(name))
    names = ", ".join(f"{m.id} (alias {', '.join(m.aliases)})" if m.aliases else m.id for m in MODELS.values())
    raise UserError(f"unknown model {name!r}; known models: {names}; or give a local Hugging Face checkpoint directory")


def looks_like_path(name: str) -> bool:
    return "/" in name or name.startswith(".") or Path(name).is_dir()


def local_entry(path: Path) -> ModelEntry:
    """An entry for a local checkpoint directory from its own files: config.json's architecture and shapes, its
    id from the directory's (or config.json's `_name_or_path`) name, its page from that repository name."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise UserError(f"{path}: no such checkpoint directory (nor a known model id)")
    path = checkpoint.resolved(path, "MODEL")
    config = checkpoint.read_config(path)
    checkpoint.check_weights(path, config, checkpoint.header_shapes(path))
    try:
        raw = json.loads((path / checkpoint.CONFIG_FILE).read_text())
    except (OSError, ValueError):
        raw = {}
    source = raw.get("_name_or_path") if isinstance(raw.get("_name_or_path"), str) else ""
    hf_id = source if re.fullmatch(r"[\w.-]+/[\w.-]+", source or "") else None
    name = (hf_id or path.name).rsplit("/", 1)[-1]
    model_id = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "local-model"
    vocab = config.vocab_size
    specials = [i for i in (config.bos_token_id, config.eos_token_id) if isinstance(i, int) and 256 <= i < vocab]
    return ModelEntry(
        id=model_id, title=name, description=f"A local {config.model_type} checkpoint ({path}).", config=config,
        family=config.model_type, license="unknown", task="text-generation", tags=("decoder-only", "local"),
        links=hf_links(hf_id) if hf_id else {}, first_special_token=min(specials, default=vocab),
        checkpoint_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "unknown"), hf_id=hf_id, local_path=path,
    )  # fmt: skip


def checkpoint_for(entry: ModelEntry, weights: Path | None, seed: int = 0) -> tuple[Path, str]:
    """(checkpoint directory, weights label): a checked local directory, or synthetic weights of the exact shape."""
    if weights is None and entry.local_path is not None:
        return entry.local_path, str(entry.local_path)
    if weights is None:
        return checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype, seed), "synthetic"
    path = checkpoint.resolved(Path(weights), "--weights")
    config = checkpoint.read_config(path)
    if config != entry.config:
        diff = [k for k, v in vars(config).items() if getattr(entry.config, k) != v]
        raise UserError(f"{path / checkpoint.CONFIG_FILE}: does not match {entry.id} ({', '.join(diff)} differ)")
    checkpoint.check_weights(path, config, checkpoint.header_shapes(path))
    return path, str(path)


def resolve(model: str, weights: Path | None = None, seed: int = 0) -> tuple[ModelEntry, Path]:
    """(entry, checkpoint directory) for a model argument and an optional --weights directory."""
    entry = get_model(model)
    return entry, checkpoint_for(entry, weights, seed)[0]
