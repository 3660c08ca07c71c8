"""Linnet Bench on a Ray cluster: a local cluster of 2 CPUs started here (shut down at the end), two models, real child
processes and a real transformers reference, a row that crashes, trials kept on their node, a worker lost once (Ray
retries it) and one lost for good, Ctrl-C, a cluster without the node a row needs, and the one-line error without Ray."""

from __future__ import annotations

import _thread
import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from harness import cluster, registry
from harness.bench import BenchSettings
from harness.cli import app
from harness.results import load_result
from harness.workload import get_profile
from linnet_core.errors import UserError
from runners import RUNNERS, RunnerInfo
from tests.fake_cluster_runners import MARKERS


def fake(name: str, target: str) -> RunnerInfo:
    return RunnerInfo(name, target, name, "PyTorch")


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory, private_cache):
    """One node with 2 CPUs and the node resource; its workers (and their children) inherit this environment."""
    import ray

    os.environ[MARKERS] = str(tmp_path_factory.mktemp("markers"))
    ray.init(num_cpus=2, resources={cluster.NODE_RESOURCE: 1}, include_dashboard=False, object_store_memory=100 * 2**20,
             logging_level="warning")  # fmt: skip
    yield ray
    ray.shutdown()
    os.environ.pop(MARKERS)


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C as a terminal delivers it, even when the tests run as a background job (SIGINT ignored)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def settings(model, tmp_path, runners, trials=1, device="cpu") -> BenchSettings:
    return BenchSettings(model, tuple(runners), get_profile("quick"), "f32", device, None, tmp_path, timeout_s=60,
                         trials=trials)  # fmt: skip


def test_two_models_run_as_tasks_and_every_row_is_a_row(local_cluster, tiny, tmp_path, monkeypatch):
    """The CLI end to end: each (model, row) cell is a task; the driver writes one file per model and machine."""
    twin = dataclasses.replace(tiny, id="qwen2-tiny-twin", title="Qwen2 tiny, again")
    monkeypatch.setitem(registry.MODELS, twin.id, twin)
    for info in (fake("counting", "tests.fake_runners:Counting"), fake("crash", "tests.fake_runners:Crash")):
        monkeypatch.setitem(RUNNERS, info.id, info)
    args = ["run", tiny.id, twin.id, "-r", "counting", "-r", "transformers", "-r", "crash", "--cluster", "local",
            "--profile", "quick", "--out", str(tmp_path)]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, (out.output, out.exception)
    files = sorted(tmp_path.glob("*/*.json"))
    assert [f.parent.name for f in files] == [tiny.id, twin.id], files  # one machine: one file per model
    for path in files:
        result = load_result(path)
        assert result.complete and path.stem == result.run_id and "-cpu-f32-" in result.run_id
        assert result.machine["cpu"] and "torch" in result.machine["versions"]  # described by the node, in the task
        rows = {r.runner: r for r in result.rows}
        assert list(rows) == ["transformers", "counting", "crash"]  # the reference first, as in a local run
        ref = rows["transformers"]  # a real transformers child: its logits and tokens came back from the task
        assert ref.status == "ok" and ref.distance == 0.0 and ref.tokens_agree == 8, ref.reason
        assert ref.metrics["mem_kind"] == "host" and ref.metrics["peak_mem_gib"] > 0.1
        counting = rows["counting"]
        assert counting.status == "ok" and "not compared: this engine exposes no logits" in counting.notes
        assert any("greedy tokens follow the reference's" in n for n in counting.notes)  # compared with the reference
        assert rows["crash"].status == "failed" and "planted crash in prefill" in rows["crash"].reason
    assert f"{twin.id} on " in out.output and "result file:" in out.output


def test_trials_stay_on_their_node_and_lost_workers_are_retried_then_failed(local_cluster, tiny, tmp_path,
                                                                            monkeypatch):  # fmt: skip
    monkeypatch.setattr(cluster, "MAX_RETRIES", 1)
    runners = [fake("transformers", "tests.fake_cluster_runners:Scored"), fake("off", "tests.fake_cluster_runners:Off"),
               fake("dies-once", "tests.fake_cluster_runners:DiesOnce"),
               fake("always-dies", "tests.fake_cluster_runners:AlwaysDies")]  # fmt: skip
    [path] = cluster.run_cluster([settings(tiny, tmp_path, runners, trials=2)])
    result = load_result(path)
    rows = {r.runner: r for r in result.rows}
    assert result.complete and list(rows) == ["transformers", "off", "dies-once", "always-dies"]
    assert rows["transformers"].distance == 0.0
    off = rows["off"]  # its logits and the reference's met on the driver
    assert off.status == "ok" and off.distance == pytest.approx(0.25, abs=1e-5) and off.metrics["trials"] == 2
    assert len(off.samples["decode_tok_s"]) == 2
    once = rows["dies-once"]  # its first try killed its Ray worker; Ray ran the trial again
    assert once.status == "ok" and once.metrics["trials"] == 2, once.reason
    assert os.listdir(os.environ[MARKERS]) == [f"{tiny.id}-dies-once"]
    dead = rows["always-dies"]
    assert dead.status == "failed" and dead.reason.startswith("Ray lost the trial (retried up to 1 times): "), dead.reason
    assert "WorkerCrashedError" in dead.reason, dead.reason
    assert len({r.node for r in result.rows if r.node}) == 1 and dead.node is None


def test_a_node_that_cannot_start_a_row_fails_it_without_a_retry(local_cluster, tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --weights is relative: the driver makes it absolute for every node
    s = dataclasses.replace(settings(tiny, tmp_path, [fake("transformers", "tests.fake_cluster_runners:Scored")]),
                            weights=Path("no-such-checkpoint"))  # fmt: skip
    [path] = cluster.run_cluster([s])
    result = load_result(path)
    [row] = result.rows
    assert row.status == "failed" and row.reason.startswith(f"on this node: {tmp_path}/no-such-checkpoint/config.json: ")
    assert result.weights == str(tmp_path / "no-such-checkpoint") and result.machine["cpu"] and row.node


def hanging() -> list[psutil.Process]:
    """The child processes of the row that hangs (its work dir is named after it)."""
    return [p for p in psutil.process_iter(["cmdline"]) if "hang-on-a-cluster" in " ".join(p.info["cmdline"] or [])]


class InterruptWhenHanging(cluster.ClusterDisplay):
    """Presses Ctrl-C (in the main thread) once the reference row is done and the hanging row's child runs."""

    def finish(self, result, row):
        if row.runner == "transformers":
            threading.Thread(target=self.interrupt, daemon=True).start()

    def interrupt(self):
        deadline = time.monotonic() + 60
        while not hanging() and time.monotonic() < deadline:
            time.sleep(0.2)
        _thread.interrupt_main()


def test_ctrl_c_cancels_the_trials_kills_their_children_and_keeps_what_finished(local_cluster, tiny, tmp_path,
                                                                                ctrl_c_raises):  # fmt: skip
    runners = [fake("transformers", "tests.fake_cluster_runners:Scored"), fake("hang-on-a-cluster", "tests.fake_runners:Hang")]
    with pytest.raises(KeyboardInterrupt):
        cluster.run_cluster([settings(tiny, tmp_path, runners)], display=InterruptWhenHanging())
    [path] = tmp_path.glob(f"{tiny.id}/*.json")
    result = load_result(path)
    assert not result.complete and result.interrupted
    assert [(r.runner, r.status) for r in result.rows] == [("transformers", "ok")]
    deadline = time.monotonic() + 60  # Ray's cancel reaches the task's child within seconds, later on a loaded machine
    while hanging() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not hanging()  # the cancelled task killed its child


@pytest.mark.parametrize("device, accelerator, missing", [("cuda", None, "GPU: 1"),
                                                          ("cpu", "H100", "accelerator_type:H100: 0.001")])  # fmt: skip
def test_a_row_no_node_can_take_is_refused_at_once(local_cluster, tiny, tmp_path, device, accelerator, missing):
    with pytest.raises(UserError, match=f"no node of the cluster offers what a {device} row needs .*{missing}"):
        cluster.run_cluster([settings(tiny, tmp_path, [RUNNERS["transformers"]], device=device)], (accelerator,))
    assert not list(tmp_path.iterdir())


def test_without_ray_the_cluster_flag_says_how_to_install_it(tmp_path):
    code = "import sys; sys.modules['ray'] = None; from harness.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code, "run", "qwen2-tiny", "--cluster", "local", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out
    assert out.stdout.strip().splitlines() == ["error: --cluster needs Ray, which is not installed here: pip install -e "
                                               "'.[cluster]'"]  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_accelerator_types_need_a_cluster():
    out = CliRunner().invoke(app, ["run", "qwen2-tiny", "--accelerator-type", "H100"])
    assert isinstance(out.exception, UserError) and "give --cluster too" in str(out.exception)


def test_an_address_nobody_answers_at_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "qwen2-tiny", "--cluster", "127.0.0.1:1", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out
    [line] = out.stdout.strip().splitlines()
    assert line.startswith("error: cannot reach the Ray cluster at '127.0.0.1:1' (") and "ray start --head" in line
