"""One side of a duet (harness/duet.py): a runner of ONE checkout, timed in turns with its partner.

Run by the driver as a script inside the side's own checkout (cwd and PYTHONPATH), so that `runners` and
`linnet_core` are that checkout's code while this stopwatch is the driver's. It therefore imports nothing from
`harness`, only what every checkout has: runners.base.RunSpec and the runner's own module.

    python -c BOOT duet_side.py SPEC.json RECORD.json TURN_FD DONE_FD

Talks to the driver one byte at a time: after loading and warming up it writes R (ready); then for each G (go) it
reads on TURN_FD it does one timed run (prefill, then decode) and writes D (done); Q (quit) ends it. The record holds
every timed value, the last run's tokens and the process's peak RSS; a runner that cannot run here writes S (skip)
and its reason."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import time
from pathlib import Path


def build_spec(spec_fields: dict):
    """The side's own RunSpec from the driver's fields, keeping only the fields this checkout's RunSpec has."""
    from runners.base import RunSpec

    known = {f.name for f in dataclasses.fields(RunSpec)}
    return RunSpec(**{k: v for k, v in spec_fields.items() if k in known})


def load_runner(spec):
    module, _, name = spec.module.partition(":")
    return getattr(importlib.import_module(module), name or "Runner")


def timed_run(runner, spec) -> tuple[float, float, list[int]]:
    """(TTFT ms, decode tok/s, tokens): the same measurement as harness/protocol.py's timed_run."""
    start = time.perf_counter()
    first = runner.prefill(spec.prompt)
    first_at = time.perf_counter()
    rest = runner.decode(spec.new_tokens - 1)
    end = time.perf_counter()
    return (first_at - start) * 1e3, (spec.new_tokens - 1) / (end - first_at), [int(first), *map(int, rest)]


def main(spec_path: str, record_path: str, turn_fd: int, done_fd: int) -> None:
    from harness.memory import own_peak_rss_bytes

    spec = build_spec(json.loads(Path(spec_path).read_text()))
    cls = load_runner(spec)
    reason = cls.unavailable(spec)
    if reason:
        write(record_path, {"status": "skipped", "reason": reason})
        os.write(done_fd, b"S")
        return
    runner = cls(spec)
    runner.load()
    for _ in range(spec.warmups):
        timed_run(runner, spec)
    os.write(done_fd, b"R")
    ttft, decode, tokens = [], [], []
    while (command := os.read(turn_fd, 1)) == b"G":
        to_first, tok_s, tokens = timed_run(runner, spec)
        ttft.append(to_first)
        decode.append(tok_s)
        os.write(done_fd, b"D")
    runner.close()
    peak_rss = own_peak_rss_bytes()
    write(record_path, {"status": "ok", "ttft_ms": ttft, "decode_tok_s": decode, "tokens": tokens,
                        "peak_rss_bytes": peak_rss, "quit": command.decode() or "EOF"})  # fmt: skip


def write(path: str, record: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
