"""The machine a run happened on: CPU, GPU, driver, CUDA, versions of every stack package, git commit."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

import psutil

from harness.memory import nvml_handles

# Distributions whose versions a reader needs to reproduce a number; absent ones are left out.
STACK_PACKAGES = (
    "linnet", "torch", "transformers", "jax", "jaxlib", "keras", "keras-hub", "tensorflow", "onnx",
    "onnxruntime", "onnxruntime-gpu", "tensorrt", "vllm", "llama_cpp_python", "gguf", "triton", "numpy",
    "safetensors", "nvidia-ml-py",
)  # fmt: skip


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info() -> dict:
    """Name, memory, driver and CUDA version of the first GPU, from NVML; {} without one."""
    handles = nvml_handles()
    if not handles:
        return {}
    import pynvml

    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    return {
        "gpu": pynvml.nvmlDeviceGetName(handles[0]),
        "gpu_count": len(handles),
        "gpu_memory_gib": pynvml.nvmlDeviceGetMemoryInfo(handles[0]).total / 2**30,
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in STACK_PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict:
    return {
        "cpu": cpu_name(),
        "cpu_cores": psutil.cpu_count(logical=True),
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "os": platform.platform(),
        **gpu_info(),
        "versions": versions(),
        "git_commit": git_commit(),
    }
