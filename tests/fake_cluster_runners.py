"""Runners for the cluster's tests: a stand-in reference with logits, a row whose logits are off it by a known amount,
and rows that kill the Ray worker running their trial (a lost node, as Ray sees it)."""

import os
import shutil
import signal
from pathlib import Path

import numpy as np

from tests.fake_runners import Counting

MARKERS = "LINNET_TEST_MARKERS"  # a directory named by the test; DiesOnce leaves a file there when it strikes


class Scored(Counting):
    """Counting, with probe logits that depend only on the probe's length: a stand-in reference."""

    offset = 0.0

    def score(self, ids, n_prefill):
        rows = len(ids) - n_prefill + 1
        return np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) / 8 + self.offset


class Off(Scored):
    offset = 0.25


class DiesOnce(Counting):
    """Kills the Ray worker that started it, once per (model, runner): a worker lost mid-trial, which Ray retries."""

    def load(self):
        marker = Path(os.environ[MARKERS]) / f"{self.spec.model}-{self.spec.runner}"
        if not marker.exists():
            marker.touch()
            kill_parent(self.spec)
        super().load()


class AlwaysDies(Counting):
    def load(self):
        kill_parent(self.spec)


def kill_parent(spec):
    shutil.rmtree(Path(spec.work_dir).parents[1])  # the task's scratch (SCRATCH/<runner>/trial-k): its worker won't
    os.kill(os.getppid(), signal.SIGKILL)  # the parent is the Ray worker that runs harness.launch.run_child
    os._exit(1)
