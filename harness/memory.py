"""Memory sampled from outside the child: per-process GPU memory through NVML, and host RSS through psutil; the peak
a child reports of itself (own_peak_rss_bytes); and the share of the machine's CPU that other processes used while
the child ran (MemorySampler.other_cpu_share, busy_note)."""

from __future__ import annotations

import re
import resource
import sys
import threading
import time
from pathlib import Path

import psutil

from runners.base import BUILD_ENV

SAMPLE_EVERY_S = 0.005
# Above this share of the machine's cores used by other processes while a row ran, its figures are said to have been
# measured on a busy machine (a demo run beside a server at 100% of one of 2 cores measured 189 tok/s, quiet ~2,500).
BUSY_SHARE = 0.10
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


def busy_note(metrics: dict) -> str | None:
    """"measured while other processes used 37% of the cores" for a row whose other_cpu_share is above BUSY_SHARE."""
    share = metrics.get("other_cpu_share")
    if isinstance(share, (int, float)) and not isinstance(share, bool) and BUSY_SHARE < share <= 1:
        return f"measured while other processes used {share:.0%} of the cores"
    return None


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (/proc/stat; guest time is within user)."""
    t = psutil.cpu_times()
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of its children it has waited for (with the children they waited for)."""
    t = psutil.Process().cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class MemorySampler:
    """Samples a process tree every few ms on a thread; keeps the peaks. A build step's process (runners.base.run_build:
    an export the engine then loads) is kept apart: its peak is peak_build_rss, and it is in neither peak_rss nor
    peak_gpu. Between entering and leaving (the child having been waited for by then), it also measures what share of
    the machine's cores processes other than this one, the child and the child's descendants used: other_cpu_share,
    None when too short to tell."""

    def __init__(self, pid: int):
        self.process = psutil.Process(pid)
        self.handles = nvml_handles()
        self.peak_rss = 0
        self.peak_build_rss = 0
        self.peak_gpu = 0
        self.gpu_unread: str | None = None  # why the GPU's memory was not read, where NVML refused
        self.other_cpu_share: float | None = None
        self._descendants_cpu: dict[int, float] = {}  # pid -> CPU seconds last seen, below the child
        self._builds: set[int] = set()  # the pids of build steps' processes
        self._not_builds: set[int] = set()  # pids known not to be, until the tree is listed again (is_build)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._cpu_start = (time.monotonic(), machine_busy_seconds(), own_cpu_seconds())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        start, busy, own = self._cpu_start
        wall = time.monotonic() - start
        if wall > 0.1:  # /proc/stat counts in ticks of 10 ms: a shorter window says nothing
            # the descendants the child waited for are in its own times too: counted twice, they only make the
            # share of others too low, never a quiet machine look busy
            others = (machine_busy_seconds() - busy) - (own_cpu_seconds() - own) - sum(self._descendants_cpu.values())
            self.other_cpu_share = min(1.0, max(0.0, others / (wall * (psutil.cpu_count() or 1))))

    def _note_descendants_cpu(self, descendants: list) -> None:
        """The CPU seconds each of the child's descendants has used so far: one that exits without the child waiting
        for it (a pool worker reparented to init) is then still counted as the run's own, not as another process's."""
        for p in descendants:
            try:
                t = p.cpu_times()
                self._descendants_cpu[p.pid] = t.user + t.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def is_build(self, process: psutil.Process) -> bool:
        """Whether a process of the tree is a build step's (its environment carries BUILD_ENV). A process forked but not
        yet exec'd still has its parent's environment, so a "no" is only kept until the tree is listed again."""
        if process.pid in self._builds:
            return True
        if process.pid in self._not_builds:
            return False
        try:
            build = BUILD_ENV in process.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False  # gone, or not ours to read: asked again at the next sample
        (self._builds if build else self._not_builds).add(process.pid)
        return build

    def _sample(self, tree: list) -> None:
        engine = build = 0
        engine_pids = set()
        for p in tree:
            try:
                rss = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # a process that just exited
            if self.is_build(p):
                build += rss
            else:
                engine += rss
                engine_pids.add(p.pid)
        self.peak_rss = max(self.peak_rss, engine)
        self.peak_build_rss = max(self.peak_build_rss, build)
        if self.handles and self.gpu_unread is None:
            import pynvml

            try:
                self.peak_gpu = max(self.peak_gpu, gpu_bytes(self.handles, engine_pids))
            except pynvml.NVMLError as e:  # a sandbox or a virtual GPU may refuse the process list: host RSS goes on
                self.gpu_unread = f"NVML did not list the GPU's processes ({e})"

    def _loop(self) -> None:
        tree, listed_at = [self.process], 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() - listed_at > TREE_EVERY_S:
                    tree, listed_at = [self.process, *self.process.children(recursive=True)], time.monotonic()
                    self._not_builds.clear()
                    self._note_descendants_cpu(tree[1:])
                self._sample(tree)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass  # the child itself just exited: its last sample stands
            time.sleep(SAMPLE_EVERY_S)
