"""The architectures Linnet compiles, one module each, looked up by config.json's `model_type` (or, without one,
its `architectures` class name), as vLLM keys its model registry and llama.cpp registers one converter per
architecture. Adding an architecture is one module here, one line in ARCHITECTURES, and its tests: everything
Linnet knows of an architecture is in its module.

Each module holds:
    MODEL_TYPE      config.json's model_type ("llama")
    HF_CLASS        transformers' causal-LM class ("LlamaForCausalLM"), written into exported config.json files
    DEFAULTS        what transformers' config class assumes for the keys a config.json leaves out
    FIXED           ModelConfig fields the architecture fixes whatever config.json says (Qwen2's q/k/v biases)
    check(hf)       a ValueError for a feature of the config.json that Linnet does not compute
    hf_extras(c)    architecture-specific keys of an exported config.json
    build(c)        the model description (linnet_core.graph.Decoder)

and may hold (read through `declared(module, name)`, which gives OPTIONAL's default for what a module leaves out):
    read(hf)                  ModelConfig fields only this architecture's config.json says (default: none)
    GGUF_ARCH                 llama.cpp's name for it, a gguf.MODEL_ARCH member ("LLAMA"); None: no GGUF export,
                              and the llama.cpp row says so
    GGUF_PRE_TOKENIZER        llama.cpp's pre-tokenizer written with the vocabulary (default "qwen2")
    gguf_hyperparameters(c)   {GGUFWriter add_* method name without "add_": value} beyond the generic keys
    gguf_tensor(name, a, c)   a checkpoint tensor (numpy, Hugging Face's name) as llama.cpp wants its values
                              (Llama's q/k row permutation, Gemma's norm offset); default: unchanged
    gguf_extra_tensors(c)     {gguf.MODEL_TENSOR member name: array} written before the checkpoint's (Llama 3's
                              ROPE_FREQS); default: none
    LLAMA_CPP_MISMATCH        why llama.cpp's row cannot stand for the architecture (measured), or None
    KERAS_HUB                 (backbone class, causal-LM class) names in keras_hub.models; None: no KerasHub row
    KERAS_HUB_CACHE_ARGS      the positional arguments of the causal LM's _build_cache: "token_ids",
                              "padding_mask" (all true) or None (default: ("token_ids",))

None of these imports the package of the engine it describes: the module that writes a GGUF or loads KerasHub does."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

# model_type -> module
ARCHITECTURES = {
    "qwen2": "linnet_core.arch.qwen2",
    "llama": "linnet_core.arch.llama",
    "qwen3": "linnet_core.arch.qwen3",
    "gemma3_text": "linnet_core.arch.gemma3",
    "olmo2": "linnet_core.arch.olmo2",
    "phi3": "linnet_core.arch.phi3",
}

# What a module may leave out, and what that means.
OPTIONAL: dict[str, Any] = {
    "read": lambda hf: {},
    "GGUF_ARCH": None,
    "GGUF_PRE_TOKENIZER": "qwen2",  # the byte-level BPE split Linnet's synthetic vocabularies are made for
    "gguf_hyperparameters": lambda config: {},
    "gguf_tensor": lambda name, array, config: array,
    "gguf_extra_tensors": lambda config: {},
    "LLAMA_CPP_MISMATCH": None,
    "KERAS_HUB": None,
    "KERAS_HUB_CACHE_ARGS": ("token_ids",),
}


def declared(module: ModuleType, name: str) -> Any:
    """An optional attribute of an architecture's module, or its default (OPTIONAL)."""
    return getattr(module, name, OPTIONAL[name])


def supported() -> str:
    return ", ".join(ARCHITECTURES)


def architecture(model_type: str) -> ModuleType:
    """The module of a model_type; a ValueError naming the supported ones otherwise."""
    if model_type not in ARCHITECTURES:
        raise ValueError(f"architecture {model_type!r} is not supported; Linnet supports {supported()}")
    return importlib.import_module(ARCHITECTURES[model_type])


def architecture_of(hf: dict[str, Any]) -> ModuleType:
    """The module for a config.json dict: by model_type, else by its architectures' class name."""
    model_type = hf.get("model_type")
    if model_type is None:
        classes = hf.get("architectures") or []
        by_class = {architecture(t).HF_CLASS: t for t in ARCHITECTURES}
        model_type = next((by_class[c] for c in classes if isinstance(c, str) and c in by_class), None)
        if model_type is None:
            raise ValueError(f"config.json names no model_type and no known architecture ({classes!r}); "
                             f"Linnet supports {supported()}")  # fmt: skip
    if not isinstance(model_type, str):
        raise ValueError(f"model_type must be a string, not {model_type!r}")
    module = architecture(model_type)
    module.check(hf)
    return module


def build_decoder(config):
    """The model description of a ModelConfig, from its architecture's builder."""
    return architecture(config.model_type).build(config)
