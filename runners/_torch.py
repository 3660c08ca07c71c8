"""Small helpers shared by the PyTorch runners: dtype names, devices, and synchronisation."""

from __future__ import annotations

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def cuda_unavailable(spec) -> str | None:
    if spec.device == "cuda" and not torch.cuda.is_available():
        return "CUDA requested but torch sees no GPU"
    return None


def set_threads() -> None:
    """Deterministic CPU threading: one intra-op pool over the cores, as a user would run it."""
    torch.set_grad_enabled(False)
