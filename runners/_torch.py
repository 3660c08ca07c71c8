"""Small helpers shared by the PyTorch runners: dtype names, devices, and synchronisation."""

from __future__ import annotations

import torch

from linnet_core.dtypes import long_name


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, long_name(name))


def cuda_unavailable(spec) -> str | None:
    if spec.device == "cuda" and not torch.cuda.is_available():
        return "CUDA requested but torch sees no GPU"
    return None


def set_threads() -> None:
    """Deterministic CPU threading: one intra-op pool over the cores, as a user would run it."""
    torch.set_grad_enabled(False)
