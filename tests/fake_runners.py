"""Runners that misbehave on purpose, for the harness's own tests."""

import time

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


class Killed(Counting):
    """Dies by a signal, as the kernel's out-of-memory killer ends a process."""

    def load(self):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
