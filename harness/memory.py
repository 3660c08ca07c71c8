"""Memory sampled from outside the child: per-process GPU memory through NVML, and host RSS through psutil."""

from __future__ import annotations

import threading
import time

import psutil

SAMPLE_EVERY_S = 0.005
# Listing a process's descendants scans /proc; reading one RSS does not. The tree is re-listed this often.
TREE_EVERY_S = 0.5


def nvml_handles() -> list:
    """NVML device handles, or [] when there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return []


def gpu_bytes(handles: list, pids: set[int]) -> int:
    """Bytes of GPU memory NVML reports these processes holding, over every device."""
    import pynvml

    total = 0
    for h in handles:
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid in pids and proc.usedGpuMemory:
                total += proc.usedGpuMemory
    return total


class MemorySampler:
    """Samples a process tree every few ms on a thread; keeps the peaks."""

    def __init__(self, pid: int):
        self.process = psutil.Process(pid)
        self.handles = nvml_handles()
        self.peak_rss = 0
        self.peak_gpu = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        tree, listed_at = [self.process], 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() - listed_at > TREE_EVERY_S:
                    tree, listed_at = [self.process, *self.process.children(recursive=True)], time.monotonic()
                rss = sum(p.memory_info().rss for p in tree if p.is_running())
                self.peak_rss = max(self.peak_rss, rss)
                if self.handles:
                    self.peak_gpu = max(self.peak_gpu, gpu_bytes(self.handles, {p.pid for p in tree}))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass  # a child that just exited: its last sample stands
            time.sleep(SAMPLE_EVERY_S)
