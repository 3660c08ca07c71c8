"""The model configuration Linnet reads: the dimensions of a Qwen2-style decoder, to and from HF config.json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # rows of the token embedding (and of the tied output head)
    hidden_size: int  # width of the residual stream
    intermediate_size: int  # width of the SwiGLU MLP
    num_hidden_layers: int  # decoder blocks
    num_attention_heads: int  # query heads
    num_key_value_heads: int  # key/value heads (grouped-query attention)
    max_position_embeddings: int  # longest sequence the model supports
    rope_theta: float = 1_000_000.0  # RoPE base
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    tie_word_embeddings: bool = True  # output head reads the token embedding
    bos_token_id: int | None = None  # begin-of-sequence token, if any
    eos_token_id: int | None = None  # end-of-sequence token (ignored by the benchmark)

    def __post_init__(self):
        assert self.hidden_size % self.num_attention_heads == 0, (self.hidden_size, self.num_attention_heads)
        assert self.num_attention_heads % self.num_key_value_heads == 0, (
            self.num_attention_heads,
            self.num_key_value_heads,
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_parameters(self) -> int:
        """Parameters counted once (a tied head shares the embedding)."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads * self.head_dim
        attention = h * h + h + 2 * (h * kv + kv) + h * h  # q (with bias), k and v (with bias), o
        block = attention + 3 * h * i + 2 * h  # gate, up, down; two norms
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * block + h + head

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Reads a Hugging Face Qwen2 config.json dict; unknown keys are ignored, missing ones are errors."""
        if hf.get("model_type") not in ("qwen2", None):
            raise ValueError(f"model_type {hf.get('model_type')!r} is not a Qwen2 decoder")
        rope = hf.get("rope_parameters") or {}
        theta = hf.get("rope_theta", rope.get("rope_theta", 1_000_000.0))
        names = [f.name for f in dataclasses.fields(cls)]
        values = {k: hf[k] for k in names if k in hf and k != "rope_theta"}
        values.setdefault("num_key_value_heads", hf.get("num_attention_heads"))
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in values]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(missing)}")
        eos = values.get("eos_token_id")
        if isinstance(eos, list):
            values["eos_token_id"] = eos[0]
        return cls(rope_theta=float(theta), **values)

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        """A config.json that transformers reads as Qwen2ForCausalLM."""
        hf = dataclasses.asdict(self)
        hf.update(
            architectures=["Qwen2ForCausalLM"],
            model_type="qwen2",
            hidden_act="silu",
            attention_dropout=0.0,
            initializer_range=0.02,
            use_cache=True,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=self.num_hidden_layers,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            torch_dtype=dtype,
        )
        return hf
