"""Memory sampled from outside the child: per-process GPU memory through NVML, and host RSS through psutil; and
the peak a child reports of itself (own_peak_rss_bytes)."""

from __future__ import annotations

import re
import resource
import sys
import threading
import time
from pathlib import Path

import psutil

SAMPLE_EVERY_S = 0.005
# Listing a process's descendants scans /proc; reading one RSS does not. The tree is re-listed this often.
TREE_EVERY_S = 0.5


def own_peak_rss_bytes() -> int:
    """The calling process's peak resident memory, from its own program's start. On Linux that is VmHWM in
    /proc/self/status; not ru_maxrss, which Linux carries across exec: a child started by a parent holding 0.45 GiB
    reports at least 0.45 GiB, whatever it used itself. Without VmHWM, ru_maxrss (bytes on macOS, kilobytes on Linux)."""
    try:
        high_water = re.search(r"^VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        high_water = None
    if high_water:
        return int(high_water.group(1)) * 1024
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


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
