"""Runners that misbehave on purpose, for the harness's own tests."""

import time

import numpy as np

from runners import base


class Counting(base.Runner):
    """A well-behaved stack: counts upwards, exposes no logits."""

    def load(self):
        self.next = 0

    def prefill(self, prompt):
        self.next = len(prompt)
        return self.next

    def decode(self, n):
        out = list(range(self.next + 1, self.next + 1 + n))
        self.next += n
        return out


class Crash(Counting):
    def prefill(self, prompt):
        raise RuntimeError("planted crash in prefill")


class Hang(Counting):
    def load(self):
        time.sleep(3600)


class Unavailable(Counting):
    @classmethod
    def unavailable(cls, spec):
        return "needs a planted accelerator"


class ShortCount(Counting):
    def decode(self, n):
        return super().decode(n - 1)


class CrashOnTrial2(Counting):
    """Fine in its first trial (process), crashes in its second: the harness gives each trial its own work dir."""

    def load(self):
        if self.spec.work_dir.endswith("trial-2"):
            raise RuntimeError("planted crash in trial 2")
        super().load()


class ScoresInTrial1Only(Counting):
    """Exposes logits, and fails a trial that scores the probe after the first: a later trial's logits are never read."""

    def score(self, ids, n_prefill):
        if not self.spec.work_dir.endswith("trial-1"):
            raise RuntimeError(f"planted: scored the probe in {self.spec.work_dir}")
        return np.zeros((len(ids) - n_prefill + 1, 8), np.float32)


class Killed(Counting):
    """Dies by a signal, as the kernel's out-of-memory killer ends a process."""

    def load(self):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class PerToken(Counting):
    """Spends a fixed time per generated token (busy, as computing would): a stack of a known speed."""

    seconds_per_token = 0.001

    def decode(self, n):
        end = time.perf_counter() + n * self.seconds_per_token
        while time.perf_counter() < end:
            pass
        return super().decode(n)


class PerTokenHalfSpeed(PerToken):
    seconds_per_token = 0.002


class CrashWhenOnlyTimed(Counting):
    """Runs its first trial (mode measure), then breaks in every process that only times (later trials, duets)."""

    def load(self):
        if self.spec.mode == "time":
            raise RuntimeError("planted crash when only timed")
        super().load()


class HalfLoaded(Counting):
    """Fails in load before it holds what close() releases: close() then fails too, as a real runner's would."""

    def load(self):
        raise RuntimeError("planted crash in load")

    def close(self):
        self.manager.stop()  # never made: AttributeError
