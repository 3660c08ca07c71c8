"""The benchmark matrix on a Ray cluster: every trial of every row of every run (model x dtype x device, optionally x
accelerator type) is a Ray task that runs the same child process as a local run on the node Ray picks; the driver
builds the rows with harness.bench's own code and writes one result file per (run, machine).

Scheduling. A trial asks for what its row needs: one GPU for a cuda row; for a cpu row NODE_RESOURCE, of which each
node declares exactly one (`ray start --resources '{"linnet_node": 1}'`), so two timed CPU rows never share a machine;
and, when asked, a kind of accelerator (Ray's `accelerator_type:H100`). A row's first trial goes where Ray places it;
each later trial is pinned to that node and submitted when the one before it returns. So a row's trials all measure
one machine, and on each node the rows take turns trial by trial (A B C A B C), as in a local run, so that a slow spell
of a machine hits its rows alike. Each run's reference goes first and the rows follow it: every row's distance is
taken against its run's reference, and the reference's logits travel back to the driver like every row's.

Faults. A trial whose worker or node dies is retried by Ray (MAX_RETRIES, system failures only); a row that ran and
failed is an ordinary return value, never retried. A trial lost after its retries fails its row with Ray's reason.
Ctrl-C cancels the outstanding trials (each task kills its child) and keeps what finished (complete: false).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import environment, launch
from harness.bench import Reference, RowTrials, make_row
from harness.registry import checkpoint_for
from harness.results import ResultFile, Row, write_result
from harness.settings import BenchSettings, new_result, run_id_now, spec_fields, timeout_for, trial_spec, trials_for
from linnet_core.errors import UserError
from runners import REFERENCE, TRUTH, RunnerInfo, get_runner

LOCAL = "local"  # --cluster local: start a Ray cluster on this machine
NODE_RESOURCE = "linnet_node"  # every node declares one; a CPU row takes it whole
MAX_RETRIES = 3  # Ray's retries of a trial whose worker or node died
CANCEL_WAIT_S = 30  # after Ctrl-C, how long the cancelled trials get to kill their children
INSTALL = "pip install -e '.[cluster]'"


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"--cluster needs Ray, which is not installed here: {INSTALL}") from None
    return ray


@contextlib.contextmanager
def connected(address: str):
    """Joins the Ray cluster at ADDRESS (`local`: starts one on this machine) for the block; yields whether the cluster
    has a GPU. A caller that joined a cluster already (a test) keeps it."""
    ray = import_ray()
    owned = not ray.is_initialized()
    if owned:
        check_reachable(address)
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            if address == LOCAL:
                ray.init(resources={NODE_RESOURCE: 1}, include_dashboard=False, logging_level="warning")
            else:
                ray.init(address=address, logging_level="warning")
        except Exception as e:  # no cluster there, a version mismatch: Ray says which
            raise UserError(f"cannot join the Ray cluster at {address!r}: {str(e).strip().splitlines()[0]}") from None
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)  # ray.init's exits at once; SIGTERM ends a run as Ctrl-C does
    try:
        yield ray.cluster_resources().get("GPU", 0) > 0
    finally:
        if owned:
            ray.shutdown()


def check_reachable(address: str) -> None:
    """A HOST:PORT nobody answers at is a one-line error: Ray itself would retry for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit():
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as e:
            why = f"cannot reach the Ray cluster at {address!r} ({e}); is `ray start --head` running there?"
            raise UserError(why) from None


@dataclass
class TrialResult:
    """What a trial's task sends back to the driver."""

    outcome: launch.ChildOutcome
    logits: np.ndarray | None  # the probe's logits the child saved (logits.npy), for the distance
    machine: dict | None  # environment.machine() on the node that ran it; None when the node was lost
    node: str | None  # the Ray node id, to pin the row's later trials there


def run_trial(settings: BenchSettings, info: RunnerInfo, k: int, mode: str) -> TrialResult:
    """The body of a trial's task, on the node: its checkpoint (synthetic weights are made there), then one child,
    exactly as a local run starts it."""
    import ray

    scratch = Path(tempfile.mkdtemp(prefix="linnet-bench-trial-"))
    logits = None
    try:
        ckpt, _ = checkpoint_for(settings.model, settings.weights, settings.seed)
        spec = trial_spec(settings, info, spec_fields(settings, ckpt), scratch / info.id / f"trial-{k}", mode)
        outcome = launch.run_child(spec, timeout_for(settings, info))
        saved = spec.work / "logits.npy"
        logits = np.load(saved) if k == 1 and saved.exists() else None  # distances are taken on a row's first trial
    except (UserError, OSError) as e:  # this node cannot start the row (no such --weights here, a full disk)
        outcome = launch.ChildOutcome(None, f"on this node: {e}", 0.0, 0, 0, False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TrialResult(outcome, logits, environment.machine(), ray.get_runtime_context().get_node_id())


class ClusterDisplay:
    """What a cluster run tells its user: a file begun, a row done (rows finish in any order, on any machine)."""

    def begin(self, result: ResultFile, path: Path) -> None: ...
    def finish(self, result: ResultFile, row: Row) -> None: ...


@dataclass
class Run:
    """One run of the matrix (a BenchSettings, on an accelerator type or any) as the driver sees it."""

    settings: BenchSettings
    accelerator: str | None
    reference: Reference = field(default_factory=Reference)
    files: dict[str, tuple[ResultFile, Path]] = field(default_factory=dict)  # machine key -> its result file
    rows: dict[str, tuple[RowTrials, ResultFile, Path]] = field(default_factory=dict)  # runner id -> row, its file


def run_cluster(settings: list[BenchSettings], accelerators: tuple[str | None, ...] = (None,),
                display: ClusterDisplay = ClusterDisplay()) -> list[Path]:  # fmt: skip
    """Runs every run's rows on the joined cluster (see `connected`); returns the result files written."""
    ray = import_ray()
    # a --weights path names the same directory on every node: the driver's, made absolute
    settings = [dataclasses.replace(s, weights=Path(s.weights).resolve()) if s.weights else s for s in settings]
    runs = [Run(s, a) for s in settings for a in accelerators]
    offered = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    for run in runs:  # Ray would wait for such a node for ever: say so at once
        need = needs(run)
        if not any(all(node.get(k, 0) >= v for k, v in need.items()) for node in offered):
            wanted = ", ".join(f"{k}: {v:g}" for k, v in need.items())
            raise UserError(f"no node of the cluster offers what a {run.settings.device} row needs ({wanted}): a node "
                            f"declares {NODE_RESOURCE} when it starts (ray start --resources "
                            f"'{{\"{NODE_RESOURCE}\": 1}}'), Ray adds GPU and accelerator_type:<kind> on a GPU node itself")
    return Driver(ray, runs, display).run()


def needs(run: Run) -> dict[str, float]:
    """What one trial of the run asks of a node: a GPU for a cuda row, the whole node for a cpu row, and the kind of
    accelerator when one was asked for."""
    need: dict[str, float] = {"GPU": 1} if run.settings.device == "cuda" else {NODE_RESOURCE: 1}
    if run.accelerator:
        need[f"accelerator_type:{run.accelerator}"] = 0.001  # as Ray's own accelerator_type option asks
    return need


class Driver:
    def __init__(self, ray, runs: list[Run], display: ClusterDisplay):
        self.ray, self.runs, self.display = ray, runs, display
        self.task = ray.remote(run_trial)
        self.pending: dict = {}  # ObjectRef -> (run, runner, trial, mode)
        self.created_at, self.stamp = run_id_now()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"linnet-bench-{self.stamp}-"))  # trials' logits, while read
        self.paths: set[Path] = set()  # the result files' names taken in this run

    def run(self) -> list[Path]:
        try:
            for run in self.runs:  # the float64 truth, then the reference (every row is compared with both), then the rest
                self.submit(run, TRUTH, 1, "truth")
            while self.pending:
                ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=1.0)  # Ctrl-C gets in between
                for ref in ready:
                    run, info, k, mode = self.pending.pop(ref)
                    back = self.fetch(ref)
                    with tempfile.TemporaryDirectory(dir=self.scratch) as work:  # the trial's work dir as bench reads it
                        if back.logits is not None:
                            np.save(Path(work) / "logits.npy", back.logits)
                        self.receive(run, info, k, mode, back, Path(work))
            for result, path in self.files():
                result.complete = True
        except KeyboardInterrupt:
            self.cancel()
            for result, _ in self.files():
                result.interrupted = True  # type: ignore[attr-defined]  # as a local run: the page says so
            raise
        finally:
            for result, path in self.files():
                write_result(result, path)
            shutil.rmtree(self.scratch, ignore_errors=True)
        return [path for _, path in self.files()]

    def files(self) -> list[tuple[ResultFile, Path]]:
        return [f for run in self.runs for f in run.files.values()]

    def submit(self, run: Run, info: RunnerInfo, k: int, mode: str = "measure", node: str | None = None) -> None:
        need = needs(run)
        options: dict = {"num_cpus": 0, "num_gpus": need.pop("GPU", 0), "resources": need,
                         "max_retries": MAX_RETRIES, "retry_exceptions": False}  # fmt: skip
        if node is not None:  # a row's later trials measure the machine its first trial measured
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        ref = self.task.options(**options).remote(run.settings, info, k, mode)
        self.pending[ref] = (run, info, k, mode)

    def fetch(self, ref) -> TrialResult:
        """The trial's result; a trial Ray could not finish (its node lost after the retries, or the task raised) as a
        failed child."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None)  # a RayTaskError carries what the task raised
            if isinstance(cause, Exception):
                why = f"the trial's task raised {type(cause).__name__}: {cause}"
            else:
                first = str(e).strip().splitlines()[0]
                why = f"Ray lost the trial (retried up to {MAX_RETRIES} times): {type(e).__name__}: {first}"
            return TrialResult(launch.ChildOutcome(None, why, 0.0, 0, 0, False), None, None, None)

    def receive(self, run: Run, info: RunnerInfo, k: int, mode: str, back: TrialResult, work: Path) -> None:
        """Turns a trial into its row (bench's code, reading the trial's logits from WORK) and submits what follows."""
        if mode == "truth":
            run.reference.load_truth(back.outcome, work)
            asked = next((r for r in run.settings.runners if r.id == REFERENCE), None)
            self.submit(run, asked or get_runner(REFERENCE), 1, "measure" if asked else "score")
            return
        if info.id == REFERENCE and k == 1:
            run.reference.load(back.outcome, work)
            for other in run.settings.runners:
                if other.id != REFERENCE:
                    self.submit(run, other, 1)
            if mode == "score":
                return
        planned = trials_for(info.kind, run.settings)
        if k == 1:
            done = RowTrials(make_row(info, back.outcome, work, run.reference))
            done.row.node = back.node  # type: ignore[attr-defined]  # the Ray node that ran every trial of the row
            result, path = self.file_for(run, back.machine)
            result.reference_distributions = run.reference.shape
            result.rows.append(done.row)
            order = [r.id for r in sorted(run.settings.runners, key=lambda r: r.id != REFERENCE)]  # as a local run
            result.rows.sort(key=lambda r: order.index(r.runner))
            run.rows[info.id] = (done, result, path)
        else:
            done, result, path = run.rows[info.id]
            done.add(back.outcome, k, planned)
        write_result(result, path)
        if done.row.status == "ok" and k < planned:
            self.submit(run, info, k + 1, "time", node=back.node)  # the first trial's logits are the row's
        else:
            self.display.finish(result, done.row)

    def file_for(self, run: Run, machine: dict | None) -> tuple[ResultFile, Path]:
        """The run's result file for the machine that ran a row, begun on its first row. A row whose first trial lost
        its node has no machine: it goes to the run's first file (or one for an unknown machine)."""
        if machine is None:
            if run.files:
                return next(iter(run.files.values()))
            machine = {"cpu": "unknown machine (the row's task never returned)"}
        # identical nodes share a file: their descriptions differ at most in the memory the kernel reports
        key = json.dumps({k: v for k, v in machine.items() if k != "memory_gib"}, sort_keys=True)
        if key not in run.files:
            path = self.new_path(run, machine)
            weights = "synthetic" if run.settings.weights is None else str(run.settings.weights)
            result = new_result(run.settings, weights, machine, self.created_at, path.stem)
            result.cluster = {"accelerator_type": run.accelerator}  # type: ignore[attr-defined]
            run.files[key] = (result, path)
            self.display.begin(result, path)
        return run.files[key]

    def new_path(self, run: Run, machine: dict) -> Path:
        """OUT/<model>/<stamp>-<device>-<dtype>-<machine>.json, numbered when two machines share a name."""
        s = run.settings
        name = machine.get("gpu") if s.device == "cuda" and machine.get("gpu") else machine.get("cpu") or "unknown"
        stem = f"{self.stamp}-{s.device}-{s.dtype}-{re.sub(r'[^a-z0-9]+', '-', str(name).lower()).strip('-')[:40]}"
        path, n = s.out_dir / s.model.id / f"{stem}.json", 1
        while path in self.paths:
            n += 1
            path = path.with_name(f"{stem}-{n}.json")
        self.paths.add(path)
        return path

    def cancel(self) -> None:
        """Cancels every outstanding trial (a running task gets KeyboardInterrupt and kills its child) and waits a
        while for them to end."""
        refs = list(self.pending)
        for ref in refs:
            self.ray.cancel(ref)
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)
