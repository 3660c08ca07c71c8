"""Starts one runner's child process, enforces its timeout, samples its memory, and reads its record back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.memory import MemorySampler
from runners.base import RunSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
STDERR_TAIL_CHARS = 2000


@dataclass
class ChildOutcome:
    record: dict | None  # the child's JSON record, or None if it crashed or timed out
    failure: str | None  # why there is no record: exit status or timeout, with the stderr tail
    seconds: float  # the child's whole life
    peak_rss_bytes: int  # host peak: the larger of the sampled RSS and the child's own high-water mark
    peak_gpu_bytes: int  # what NVML reported the child holding at its peak (0 without a GPU)
    gpu_present: bool
    other_cpu_share: float | None = None  # the machine's CPU used by other processes meanwhile (memory.MemorySampler)
    peak_build_rss_bytes: int = 0  # host peak of the row's build steps (runners.base.run_build), kept out of the above


def tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:].strip()


def compile_caches(directory: Path) -> dict[str, str]:
    """Environment for children that share compiled code: inductor's and Triton's kernels and JAX's executables go to
    one directory of the run, so a row's later trials load what its first compiled (a GPU window is minutes long;
    inductor's first call on the 0.5B shape took 104 s on an H200), while the first trial still compiles from
    nothing, as a user's first run does."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(directory / "inductor"), "TRITON_CACHE_DIR": str(directory / "triton"),
            "JAX_COMPILATION_CACHE_DIR": str(directory / "jax")}  # fmt: skip


def run_child(spec: RunSpec, timeout_s: float, on_progress: Callable[[str], None] = lambda s: None,
              env: dict[str, str] | None = None) -> ChildOutcome:  # fmt: skip
    work = spec.work
    work.mkdir(parents=True, exist_ok=True)
    spec_path, record_path, stderr_path = work / "spec.json", work / "record.json", work / "stderr.log"
    spec_path.write_text(spec.to_json())
    record_path.unlink(missing_ok=True)
    # The child imports this checkout's packages, whatever the caller's working directory.
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    start = time.perf_counter()
    with open(stderr_path, "w") as stderr, open(work / "stdout.log", "w") as stdout_log:
        child = subprocess.Popen(
            [sys.executable, "-m", "harness.worker", str(spec_path), str(record_path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, so a timeout kills everything it started
        )
        reader = threading.Thread(target=relay_progress, args=(child.stdout, stdout_log, on_progress), daemon=True)
        reader.start()
        try:
            with MemorySampler(child.pid) as memory:
                try:
                    child.wait(timeout=timeout_s)
                    timed_out = False
                except subprocess.TimeoutExpired:
                    kill_tree(child)
                    timed_out = True
        except BaseException:  # Ctrl-C or SIGTERM (run_cli raises it as Ctrl-C) in the parent: never leave a child behind
            kill_tree(child)
            raise
        reader.join(timeout=5)
    seconds = time.perf_counter() - start

    record, failure = None, None
    if timed_out:
        failure = f"timed out after {timeout_s:.0f} s; stderr tail: {tail(stderr_path)}"
    elif child.returncode < 0:  # ended by a signal: the out-of-memory killer's SIGKILL, someone's SIGTERM
        failure = f"killed by {signal_name(-child.returncode)}; stderr tail: {tail(stderr_path)}"
    elif child.returncode != 0:
        failure = f"exit status {child.returncode}; stderr tail: {tail(stderr_path)}"
    elif not record_path.exists():
        failure = f"the child wrote no record; stderr tail: {tail(stderr_path)}"
    else:
        record = json.loads(record_path.read_text())
    peak_rss = max(memory.peak_rss, (record or {}).get("child_max_rss_bytes", 0))
    if record is not None and record.get("status") == "ok" and memory.handles and not memory.peak_gpu:
        why = memory.gpu_unread or "NVML listed none of the child's processes"
        record.setdefault("notes", []).append(f"no GPU memory figure: {why}")
    return ChildOutcome(record, failure, seconds, peak_rss, memory.peak_gpu, bool(memory.handles), memory.other_cpu_share,
                        memory.peak_build_rss)  # fmt: skip


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def relay_progress(stream, log, on_progress: Callable[[str], None]) -> None:
    """Progress lines go to the display; everything else the child prints goes to its stdout log."""
    for line in stream:
        if line.startswith("@progress "):
            on_progress(line[len("@progress ") :].strip())
        else:
            log.write(line)


def kill_tree(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
