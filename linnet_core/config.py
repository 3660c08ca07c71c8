"""The model configuration Linnet reads: the dimensions and choices of a decoder-only transformer, to and from a
Hugging Face config.json. Which architecture a config.json describes, and the defaults of the keys it leaves out,
come from its architecture's module (linnet_core/arch/), which follows transformers' own config class."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from linnet_core.arch import architecture, architecture_of, build_decoder, declared
from linnet_core import rope


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int  # rows of the token embedding (and of the output head)
    hidden_size: int  # width of the residual stream
    intermediate_size: int  # width of the gated MLP
    num_hidden_layers: int  # decoder blocks
    num_attention_heads: int  # query heads
    num_key_value_heads: int  # key/value heads (grouped-query attention)
    max_position_embeddings: int  # longest sequence the model supports
    model_type: str = "qwen2"  # the architecture (config.json's model_type): picks the builder in linnet_core/arch/
    head_dim: int | None = None  # width of one head; None: hidden_size // num_attention_heads (set in __post_init__)
    rope_theta: float = 1_000_000.0  # RoPE base
    rope_scaling: dict | None = None  # RoPE frequency scaling, e.g. {"rope_type": "llama3", "factor": 32.0, ...}
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    tie_word_embeddings: bool = True  # output head reads the token embedding
    attention_bias: bool = False  # q/k/v/o projections carry biases (Llama's flag; Qwen2's q/k/v always do)
    mlp_bias: bool = False  # gate/up/down projections carry biases
    hidden_act: str = "silu"  # the MLP gate's activation: "silu" (SwiGLU) or "gelu_pytorch_tanh" (GeGLU, Gemma)
    layer_types: tuple[str, ...] | None = None  # per layer "full_attention" or "sliding_attention"; None: all full
    sliding_window: int | None = None  # a sliding_attention layer's query sees its last sliding_window positions
    rope_local_base_freq: float | None = None  # the RoPE base of sliding_attention layers (Gemma 3)
    query_pre_attn_scalar: float | None = None  # attention scores are scaled by its -1/2 power (None: head_dim's)
    partial_rotary_factor: float | None = None  # RoPE turns the first rotary_dim = head_dim * it dims of a head (Phi-3)
    bos_token_id: int | None = None  # begin-of-sequence token, if any
    eos_token_id: int | None = None  # end-of-sequence token (ignored by the benchmark)

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**31:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}")  # fmt: skip
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                                 f"{self.num_attention_heads}; config.json must give head_dim")  # fmt: skip
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int) or self.head_dim <= 0 or self.head_dim % 2:
            raise ValueError(f"head_dim must be a positive even integer, not {self.head_dim!r}")
        for name, value in self.architecture.FIXED.items():  # e.g. Qwen2's q/k/v are biased whatever is written
            object.__setattr__(self, name, value)
        if not (isinstance(self.rope_theta, (int, float)) and 1.0 < self.rope_theta < float("inf")):
            raise ValueError(f"rope_theta must be a finite number above 1, not {self.rope_theta!r}")
        if self.layer_types is not None:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
            if len(self.layer_types) != self.num_hidden_layers or not set(self.layer_types) <= LAYER_TYPES:
                raise ValueError(f"layer_types must name {self.num_hidden_layers} layers, each one of "
                                 f"{', '.join(sorted(LAYER_TYPES))}")  # fmt: skip
            if "sliding_attention" in self.layer_types and not (
                isinstance(self.sliding_window, int) and not isinstance(self.sliding_window, bool) and self.sliding_window > 0
            ):
                raise ValueError(f"sliding_attention layers need a positive integer sliding_window, not {self.sliding_window!r}")
        if not (isinstance(self.rms_norm_eps, (int, float)) and 0 < self.rms_norm_eps < 1):
            raise ValueError(f"rms_norm_eps must be a number in (0, 1), not {self.rms_norm_eps!r}")
        factor = self.partial_rotary_factor
        if factor is not None and not (isinstance(factor, (int, float)) and 0 < factor <= 1 and self.rotary_dim % 2 == 0
                                       and self.rotary_dim > 0):  # fmt: skip
            raise ValueError(f"partial_rotary_factor must be in (0, 1] and leave an even number of rotated dims of "
                             f"head_dim {self.head_dim}, not {factor!r}")  # fmt: skip
        if self.rope_scaling and self.rope_scaling.get("rope_type") == "longrope":  # its lists' lengths need rotary_dim
            object.__setattr__(self, "rope_scaling", rope.longrope(self.rope_scaling, self.rotary_dim, self.max_position_embeddings))

    @property
    def rotary_dim(self) -> int:
        """The dims of each head RoPE turns (the first ones; the rest pass through): head_dim * partial_rotary_factor,
        rounded down as transformers does."""
        return int(self.head_dim * self.partial_rotary_factor) if self.partial_rotary_factor is not None else self.head_dim

    @property
    def num_parameters(self) -> int:
        """Parameters counted once (a tied head shares the embedding), from the model description's weights."""
        total = 0
        for weight in build_decoder(self).all_weights():
            n = 1
            for d in weight.shape:
                n *= d
            total += n
        return total

    @property
    def architecture(self):
        """The module of linnet_core/arch/ that builds this config's description."""
        return architecture(self.model_type)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Reads a Hugging Face config.json dict of a supported architecture (ValueError otherwise): the dimensions
        are required; other keys default as transformers' config class of that architecture does."""
        if not isinstance(hf, dict):
            raise ValueError(f"config.json holds a {type(hf).__name__}, not an object")
        arch = architecture_of(hf)
        values = {**arch.DEFAULTS, **{k: hf[k] for k in FIELDS if k in hf and hf[k] is not None}}
        values["model_type"] = arch.MODEL_TYPE
        values.setdefault("num_key_value_heads", values.get("num_attention_heads"))
        rope = hf.get("rope_parameters") if isinstance(hf.get("rope_parameters"), dict) else {}
        scaling = hf.get("rope_scaling") or {k: v for k, v in rope.items() if k != "rope_theta"}
        values["rope_theta"] = float(hf.get("rope_theta") or rope.get("rope_theta") or arch.DEFAULTS["rope_theta"])
        values["rope_scaling"] = read_rope_scaling(scaling, hf.get("original_max_position_embeddings"))
        values |= declared(arch, "read")(hf)  # what only this architecture's config.json says
        act = hf.get("hidden_act") or hf.get("hidden_activation") or arch.FIXED["hidden_act"]
        if act != arch.FIXED["hidden_act"]:
            raise ValueError(f"{arch.MODEL_TYPE} with hidden activation {act!r} is not supported ({arch.FIXED['hidden_act']} only)")
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in values]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(missing)}")
        for name in ("bos_token_id", "eos_token_id"):
            if isinstance(values.get(name), list):  # several end tokens: the first is the one we report
                values[name] = values[name][0] if values[name] else None
        return cls(**values)

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        """A config.json that transformers reads as this architecture's *ForCausalLM, in its published layout."""
        hf = {k: v for k, v in dataclasses.asdict(self).items() if k != "rope_scaling" and not (k in ARCH_ONLY and v is None)}
        hf.update(
            architectures=[self.architecture.HF_CLASS],
            attention_dropout=0.0,
            initializer_range=0.02,
            use_cache=True,
            rope_scaling=dict(self.rope_scaling) if self.rope_scaling else None,  # a copy: readers mutate it
            torch_dtype=dtype,
        )
        hf.update(self.architecture.hf_extras(self))
        return hf


LAYER_TYPES = {"full_attention", "sliding_attention"}
# Keys read from config.json as they are; the rest are computed (rope) or only one architecture's to read (its read()).
ARCH_ONLY = ("hidden_act", "layer_types", "sliding_window", "rope_local_base_freq", "query_pre_attn_scalar",
             "partial_rotary_factor")  # fmt: skip
FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in ("model_type", "rope_theta", "rope_scaling", *ARCH_ONLY)]
ROPE_TYPES = {
    "default": (),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": (),  # lists of factors, checked with the config's rotary dims by rope.longrope
}


def read_rope_scaling(scaling: Any, original_max_position_embeddings: Any = None) -> dict | None:
    """None for plain RoPE, else the scaling dict with its type under "rope_type"; a ValueError for a type Linnet
    does not compute (it would otherwise be ignored, and every logit past the first positions would be wrong).
    original_max_position_embeddings: config.json's top-level key, where a LongRoPE scaling (Phi-3) keeps it."""
    if not scaling:
        return None
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_scaling must be an object, not {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_scaling of type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return None
    if kind == "longrope":
        return {"original_max_position_embeddings": original_max_position_embeddings, **scaling, "rope_type": kind}
    out = {"rope_type": kind}
    for key in ROPE_TYPES[kind]:
        value = scaling.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"rope_scaling {kind} needs a positive number {key}, not {value!r}")
        out[key] = value
    if out.get("low_freq_factor", 0) >= out.get("high_freq_factor", 1):
        raise ValueError("rope_scaling llama3 needs low_freq_factor < high_freq_factor")
    return out
