"""Duets: two sides of a comparison timed in lock-step turns, so that both see the same machine.

On a small shared machine speed moves in spells of seconds (a 2-core VM here ran the same loop 2x faster for a few
seconds, then slower again, and each core on its own schedule), so two processes timed minutes apart, or even side by
side on two cores, disagree by 20-40%. Taking turns on the same machine, one run each, the two halves of a pair are
tens of milliseconds apart and share the spell: the ratio of a pair holds still where the figures do not. (Bulej et
al. 2020 "duet benchmarking" run the two at once; turns are the same idea for a machine with too few cores.)

A duet of a row: each side is a child process (harness/duet_side.py) that loads the row and warms up; then the driver
lets them run one timed run at a time, A B, B A, A B, ... (who goes first alternates, so neither always follows the
other), for a set time (Turns); a few fresh process pairs per row (run_duet), round robin over the rows. Each
side's samples are {metric: [[runs of process pair 1], [pair 2], ...]}, run i of one side made next to run i of the
other, and the two sides go into two ordinary result files that `check --paired` compares by the ratios of the run
pairs (stats.run_pair_ratio_interval).

The gate (.ci/gate) duets the baseline commit's checkout against the candidate's, row by row; the stopwatch and the
spec are the driver's (the candidate's), the runners and engines each side's own."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import environment
from harness.launch import REPO_ROOT, kill_tree, tail
from harness.registry import checkpoint_for
from harness.results import PeerDuet, ResultFile, Row, write_result
from harness.settings import GIB, BenchSettings, architecture, new_result, run_id_now, spec_fields, trial_spec
from harness.trials import combine_trials
from runners import RunnerInfo

SIDE_SCRIPT = Path(__file__).with_name("duet_side.py")
# Runs the side script by path with the side's checkout first on sys.path (python -c puts the working directory
# there), so the script's own folder (the driver's harness/) shadows nothing of the side's.
BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


@dataclass(frozen=True)
class Side:
    name: str  # "baseline", "candidate": the result file's name
    checkout: Path  # a checkout of this repository whose runners and engines this side runs


class DuetFailed(Exception):
    """A side could not be timed: it crashed, hung or was skipped; the message says why."""

    def __init__(self, side: str, message: str):
        super().__init__(f"the {side} side {message}")
        self.side = side


@dataclass(frozen=True)
class Turns:
    """How long a process pair takes turns: pairs of runs until `seconds` have passed, at least `least` and at most
    `most` of them. Time rather than a count, so a fast row gets many pairs and a slow one no more time than that."""

    seconds: float = 15.0
    least: int = 10
    most: int = 2000


@dataclass
class Child:
    side: Side
    proc: subprocess.Popen
    turn_w: int  # the driver writes G / Q here
    done_r: int  # and reads R / D / S here
    record: Path
    stderr: Path

    def send(self, command: bytes) -> None:
        try:
            os.write(self.turn_w, command)
        except BrokenPipeError:
            pass  # it died: the next wait says so

    def wait_for(self, expected: bytes, timeout: float) -> bytes:
        """The next byte from the side, which must be `expected` or S (a skip); DuetFailed on death or timeout."""
        ready, _, _ = select.select([self.done_r], [], [], timeout)
        if not ready:
            raise DuetFailed(self.side.name, f"did not answer within {timeout:.0f} s")
        got = os.read(self.done_r, 1)
        if got in (expected, b"S"):
            return got
        self.proc.wait(timeout=10)
        raise DuetFailed(self.side.name, f"ended (exit status {self.proc.returncode}): {last_line(self.stderr)}")

    def close(self) -> None:
        for fd in (self.turn_w, self.done_r):
            try:
                os.close(fd)
            except OSError:
                pass


def last_line(stderr: Path) -> str:
    """What a side said last on stderr: for a crash, its exception."""
    lines = [line for line in tail(stderr, 2000).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "nothing on stderr"


def start_side(side: Side, spec_path: Path, work: Path, python: str) -> Child:
    turn_r, turn_w = os.pipe()
    done_r, done_w = os.pipe()
    record, stderr = work / f"{side.name}-record.json", work / f"{side.name}-stderr.log"
    env = {**os.environ, "PYTHONPATH": str(side.checkout)}
    with open(stderr, "w") as err, open(work / f"{side.name}-stdout.log", "w") as out:
        proc = subprocess.Popen([python, "-c", BOOT, str(SIDE_SCRIPT), str(spec_path), str(record), str(turn_r), str(done_w)],
                                cwd=side.checkout, env=env, stdout=out, stderr=err, pass_fds=(turn_r, done_w),
                                start_new_session=True)  # fmt: skip
    os.close(turn_r)
    os.close(done_w)
    return Child(side, proc, turn_w, done_r, record, stderr)


def duet_row(specs: tuple[dict, dict], sides: tuple[Side, Side], work: Path, turns: Turns, timeout: float, first: int = 0,
             python: str = sys.executable) -> tuple[dict, dict]:  # fmt: skip
    """One process pair: side i runs specs[i] (one row in two checkouts, or two rows in one). Both load and warm up
    (within `timeout` seconds), then take turns (as many as `turns` allows; a run that takes `timeout` is hung).
    Returns each side's record ({ttft_ms, decode_tok_s: [run values], tokens, peak_rss_bytes}); DuetFailed if either
    cannot be timed. `first`: which side goes first in the first pair (then it alternates)."""
    children = []
    try:
        for spec, side in zip(specs, sides):
            side_work = work / side.name
            side_work.mkdir(parents=True, exist_ok=True)
            spec_path = side_work / "spec.json"
            spec_path.write_text(json.dumps({**spec, "work_dir": str(side_work)}))
            children.append(start_side(side, spec_path, work, python))
        deadline = time.monotonic() + timeout
        for child in children:  # both load at once: loading is not timed here
            if child.wait_for(b"R", max(1.0, deadline - time.monotonic())) == b"S":
                child.proc.wait(timeout=10)
                raise DuetFailed(child.side.name, f"skipped the row: {json.loads(child.record.read_text())['reason']}")
        start = time.monotonic()
        for i in range(turns.most):
            if i >= turns.least and time.monotonic() - start > turns.seconds:
                break
            order = children if (i + first) % 2 == 0 else children[::-1]
            for child in order:
                child.send(b"G")
                child.wait_for(b"D", timeout)  # a run as long as a whole load: hung
        for child in children:
            child.send(b"Q")
        records = []
        for child in children:
            try:
                child.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise DuetFailed(child.side.name, "did not exit within 60 s of its last run") from None
            if child.proc.returncode != 0 or not child.record.exists():
                raise DuetFailed(child.side.name, f"exited with status {child.proc.returncode}: {last_line(child.stderr)}")
            records.append(json.loads(child.record.read_text()))
        return records[0], records[1]
    finally:
        for child in children:
            if child.proc.poll() is None:
                kill_tree(child.proc)
            child.close()


@dataclass
class RowDuet:
    """A row's process pairs so far: per side, per pair, the figures (trials in harness/trials.py's sense)."""

    info: RunnerInfo
    metrics: dict[str, list[dict]] = field(default_factory=lambda: {"baseline": [], "candidate": []})
    samples: dict[str, list[dict]] = field(default_factory=lambda: {"baseline": [], "candidate": []})
    failure: DuetFailed | None = None  # the process pair that could not be timed, and which side failed
    tokens_differ: str | None = None

    def add(self, name: str, record: dict) -> None:
        self.metrics[name].append({"peak_mem_gib": record["peak_rss_bytes"] / GIB, "mem_kind": "host",
                                   "new_tokens": len(record["tokens"])})  # fmt: skip
        self.samples[name].append({"decode_tok_s": record["decode_tok_s"], "ttft_ms": record["ttft_ms"]})

    def row(self, name: str) -> Row:
        info = self.info
        row = Row(runner=info.id, label=info.label, group=info.group, peer=info.peer, quant=info.quant, status="failed")
        if self.failure:  # the side that failed fails; its partner was not timed (the CLI exits 1 on a candidate's)
            row.reason = str(self.failure)
            if self.failure.side != name:
                row.status, row.reason = "skipped", f"not timed: {self.failure}"
            return row
        row.status = "ok"
        row.metrics, row.samples, row.unstable = combine_trials(self.metrics[name], self.samples[name])
        row.notes = [f"duet: {len(self.samples[name])} process pair(s) taking turns with the other side"]
        if self.tokens_differ:
            row.notes.append(self.tokens_differ)
        return row


# The most process pairs a row gets however quickly it loads.
MAX_PAIRS = 8


def run_duet(settings: BenchSettings, sides: tuple[Side, Side], pairs: int, turns: Turns, scratch: Path,
             out_dir: Path, progress: Callable[[str], None] = lambda s: None,
             row_seconds: float = 0.0) -> tuple[dict[str, Path], list[DuetFailed]]:  # fmt: skip
    """Duets every row of the settings between the two sides, at least `pairs` process pairs each, and more (up to
    MAX_PAIRS) while the row has taken under `row_seconds` in all, loads included (round robin over the rows), taking
    `turns` each. More pairs are what narrows an interval: two processes of the same code differ by a few percent
    (where their memory landed, say) even in turns, and only more of them average that out; a row that loads in
    seconds gets them cheaply, one that compiles for half a minute keeps the minimum. Writes OUT_DIR/<side name>.json;
    returns those paths and the rows' failures. The checkpoint, prompt and workload are the driver's, alike for both
    sides. A row whose process pair fails is failed on the side that failed and skipped (not timed) on the other."""
    ckpt, weights = checkpoint_for(settings.model, settings.weights, settings.seed)
    base_spec = spec_fields(settings, ckpt)
    duets = {info.id: RowDuet(info) for info in settings.runners}
    spent = {info.id: 0.0 for info in settings.runners}  # each row's seconds so far, loads included
    for p in range(MAX_PAIRS):
        for info in settings.runners:
            duet = duets[info.id]
            if duet.failure or (p >= pairs and spent[info.id] >= row_seconds):
                continue
            started = time.monotonic()
            progress(f"{info.id}: process pair {p + 1}")
            spec = trial_spec(settings, info, base_spec, scratch / info.id / f"pair-{p + 1}", mode="time")
            work = spec.work
            work.mkdir(parents=True, exist_ok=True)
            spec_dict = json.loads(spec.to_json())
            try:
                records = duet_row((spec_dict, spec_dict), sides, work, turns, settings.timeout_s or settings.profile.timeout_s,
                                   first=p)  # fmt: skip
            except DuetFailed as e:
                duet.failure = DuetFailed(e.side, f"failed in process pair {p + 1}: {str(e).split(' side ', 1)[1]}")
                continue
            for side, record in zip(sides, records):
                duet.add(side.name, record)
            if records[0]["tokens"] != records[1]["tokens"] and not duet.tokens_differ:
                duet.tokens_differ = "the two sides' greedy tokens differ"
            spent[info.id] += time.monotonic() - started
    created_at, run_id = run_id_now()
    paths = {}
    for side in sides:
        result: ResultFile = new_result(settings, weights, environment.machine(), created_at, run_id)
        result.protocol.update(duet={"pairs": pairs, "row_seconds": row_seconds, "seconds": turns.seconds, "side": side.name,
                                     "checkouts": {s.name: str(s.checkout) for s in sides}})  # fmt: skip
        result.architecture = architecture(settings.model.config)
        result.rows = [duets[info.id].row(side.name) for info in settings.runners]
        result.complete = True
        paths[side.name] = out_dir / f"{side.name}.json"
        write_result(result, paths[side.name])
    return paths, [d.failure for d in duets.values() if d.failure]


def peer_duet(settings: BenchSettings, ours: RunnerInfo, theirs: RunnerInfo, base_spec: dict, scratch: Path, pairs: int,
              turns: Turns) -> PeerDuet:  # fmt: skip
    """A Linnet row and the stack it replaces (its peer), this checkout both, timed in turns: `pairs` process pairs.
    DuetFailed when either cannot be timed."""
    sides = (Side("ours", REPO_ROOT), Side("theirs", REPO_ROOT))
    samples: dict[str, dict[str, list]] = {"ours": {"decode_tok_s": [], "ttft_ms": []}, "theirs": {"decode_tok_s": [], "ttft_ms": []}}
    for p in range(pairs):
        work = scratch / f"duet-{ours.id}" / f"pair-{p + 1}"
        work.mkdir(parents=True, exist_ok=True)
        specs = tuple(json.loads(trial_spec(settings, info, base_spec, work / side.name, mode="time").to_json())
                      for info, side in ((ours, sides[0]), (theirs, sides[1])))  # fmt: skip
        records = duet_row(specs, sides, work, turns, settings.timeout_s or settings.profile.timeout_s, first=p)
        for side, record in zip(("ours", "theirs"), records):
            for metric in samples[side]:
                samples[side][metric].append(record[metric])
    return PeerDuet(peer=theirs.id, seconds=turns.seconds, pairs=pairs, ours=samples["ours"], theirs=samples["theirs"])
