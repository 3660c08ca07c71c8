"""Small helpers shared by the PyTorch runners: dtype names, whether the requested device is there, and turning
autograd off."""

from __future__ import annotations

import torch

from linnet_core.devices import DEVICES
from linnet_core.dtypes import long_name


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, long_name(name))


def cuda_unavailable(spec) -> str | None:
    if DEVICES[spec.device].gpu and not torch.cuda.is_available():
        return "CUDA requested but torch sees no GPU"
    return None


def inference_only() -> None:
    """No autograd graph for the rest of the process: the rows only run forward. Threads are torch's default (one
    intra-op pool over the cores), as a user would run it; nothing here sets them."""
    torch.set_grad_enabled(False)
