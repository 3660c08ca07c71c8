"""The architectures Linnet compiles, one module each, looked up by config.json's `model_type` (or, without one,
its `architectures` class name), as vLLM keys its model registry and llama.cpp registers one converter per
architecture. Adding an architecture is one module here, one line in ARCHITECTURES, and its tests.

Each module holds:
    MODEL_TYPE      config.json's model_type ("llama")
    HF_CLASS        transformers' causal-LM class ("LlamaForCausalLM"), written into exported config.json files
    DEFAULTS        what transformers' config class assumes for the keys a config.json leaves out
    FIXED           ModelConfig fields the architecture fixes whatever config.json says (Qwen2's q/k/v biases)
    GGUF_ARCH       llama.cpp's name for it (gguf.MODEL_ARCH), or None: Linnet's GGUF export does not write it
    KERAS_HUB       (backbone class, causal-LM class) names in keras_hub.models, or None
    check(hf)       a ValueError for a feature of the config.json that Linnet does not compute
    hf_extras(c)    architecture-specific keys of an exported config.json
    build(c)        the model description (linnet_core.graph.Decoder)"""

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
    "phi3": "linnet_core.arch.phi3",
}


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


def gguf_refusal(config) -> str | None:
    """Why Linnet's GGUF export does not write this config's architecture (its module has no GGUF_ARCH), or None."""
    if config.architecture.GGUF_ARCH is None:
        return f"Linnet's GGUF export does not write the {config.model_type} architecture"
    return None


def build_decoder(config):
    """The model description of a ModelConfig, from its architecture's builder."""
    return architecture(config.model_type).build(config)
