"""The one table of devices: the names Linnet and Linnet Bench take (--device, RunSpec.device), what each is called
by the libraries that pick one, the dtype a run on it defaults to, and how JAX finds one (torch's check is
runners/_torch.py's, NVML's harness/memory.py's: each library sees a GPU its own way)."""

from __future__ import annotations

from dataclasses import dataclass

from linnet_core.errors import UserError


@dataclass(frozen=True)
class Device:
    name: str  # "cpu" | "cuda": the command lines' and the specs' name
    gpu: bool  # a GPU: what NVML, torch.cuda and JAX's "gpu" platform look for
    jax_platform: str  # JAX's name for it
    default_dtype: str  # a run's dtype when none is given: f32 on a CPU, bf16 on a GPU


DEVICES = {d.name: d for d in (Device("cpu", False, "cpu", "f32"), Device("cuda", True, "gpu", "bf16"))}
NAMES = tuple(DEVICES)


def check(name: str) -> Device:
    """The device, or a one-line error naming the valid ones."""
    if name not in DEVICES:
        raise UserError(f"unknown device {name!r}; use {' or '.join(NAMES)}")
    return DEVICES[name]


def jax_devices(name: str) -> list:
    """JAX's devices of this kind; none when JAX has no backend for it (a GPU without jax[cuda12])."""
    import jax  # only where JAX runs: the other engines' processes never import it

    try:
        return jax.devices(check(name).jax_platform)
    except RuntimeError:  # JAX raises when it has no backend for the platform
        return []


def jax_missing(name: str) -> str | None:
    """Why a JAX row cannot run on this device here, or None."""
    return None if jax_devices(name) else f"{'CUDA' if check(name).gpu else name} requested but JAX sees no GPU"


def jax_device(name: str):
    """The first JAX device of this kind; a one-line error when JAX sees none."""
    if missing := jax_missing(name):
        raise UserError(f"{missing} (install jax[cuda12])")
    return jax_devices(name)[0]
