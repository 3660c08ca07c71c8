"""Workloads: the measurement profiles, the seeded prompt, the distance probe, and the serving workloads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linnet_core.errors import UserError


@dataclass(frozen=True)
class Profile:
    name: str
    prompt_tokens: int  # P: prompt length of a timed run
    new_tokens: int  # N: tokens generated per run, the first included
    warmups: int  # W: untimed runs first
    runs: int  # R: timed runs; the median is reported, min and max kept
    timeout_s: int  # a runner's child process is killed after this long
    description: str  # one line for `linnet-bench run --help` and the page
    trials: int = 1  # K: each single-request row runs K times, each in a fresh process (`run --trials` overrides)
    serving_trials: int = 1  # the same for serving rows, which take far longer per trial

    @property
    def max_positions(self) -> int:
        """Static caches hold prompt + new tokens, or the probe when it is longer, rounded up to a multiple of 256."""
        return -(-max(self.prompt_tokens + self.new_tokens, PROBE_TOKENS) // 256) * 256

    @property
    def serving(self) -> ServingWorkload:
        """The serving workload this profile runs (a profile without its own runs the quick one)."""
        return SERVING.get(self.name, SERVING["quick"])


@dataclass(frozen=True)
class ServingWorkload:
    """Many requests at once (DESIGN.md, serving): all submitted at start, at most max_in_flight at a time."""

    name: str  # the profile it belongs to
    requests: int  # R: requests in a timed run
    prompt_min: int  # prompt lengths are uniform in [prompt_min, prompt_max], seeded
    prompt_max: int
    new_tokens: int  # generated per request, EOS ignored
    max_in_flight: int  # the client keeps at most this many requests open; the engines get this many rows
    runs: int  # timed runs of the whole workload: throughput's median, min and max
    warmup_requests: int  # one untimed wave first, of this many requests ...
    warmup_new_tokens: int  # ... generating this many tokens each (lazy compilation and capture show here)
    timeout_s: int  # a serving runner's child process is killed after this long
    description: str  # one line for the page and the row notes

    @property
    def max_positions(self) -> int:
        """Cache positions per row: the longest prompt plus its new tokens (512 + 128 = 640 by default)."""
        return self.prompt_max + self.new_tokens

    def prompt_lengths(self, seed: int) -> list[int]:
        return np.random.default_rng(seed + 2).integers(self.prompt_min, self.prompt_max + 1, size=self.requests).tolist()

    def prompts(self, first_special_token: int, seed: int) -> list[list[int]]:
        """The requests' prompts: seeded lengths, then seeded token ids below the special tokens."""
        rng = np.random.default_rng(seed + 3)
        return [rng.integers(0, first_special_token, size=n).tolist() for n in self.prompt_lengths(seed)]


SERVING: dict[str, ServingWorkload] = {
    w.name: w
    for w in (
        # one timed run: on a CPU the peers' batched serving takes about 50 s a run on qwen2-tiny, and a second
        # run (within the same process) took `make demo` past 10 minutes; `--trials K` gives an interval over K
        ServingWorkload("default", 256, 128, 512, 128, 64, 1, 64, 8, 1800,
                        "the published page's serving workload: 256 requests, prompts 128-512 tokens, 128 new, 64 in flight"),
        ServingWorkload("cpu", 32, 32, 128, 32, 8, 2, 8, 4, 1800,
                        "the 0.5B shape on a CPU: 32 requests, prompts 32-128 tokens, 32 new, 8 in flight"),
        ServingWorkload("quick", 12, 16, 48, 8, 4, 1, 4, 2, 600,
                        "a smoke run for tests: 12 requests, prompts 16-48 tokens, 8 new, 4 in flight"),
    )
}  # fmt: skip


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        # 3 trials of 6 runs: the fewest trials that give an interval over processes, and 18 values a row, within
        # 10 minutes of `make demo` on 2 cores (10 runs a trial took it to 10.8); a serving row takes 10-100 s per
        # trial there, so it runs once (its interval is then within one process)
        Profile("default", 512, 128, 2, 6, 900, "the published page's protocol: 512 prompt tokens, 128 new",
                trials=3, serving_trials=1),
        Profile("cpu", 128, 32, 1, 3, 1800, "the 0.5B shape on a CPU: 128 prompt tokens, 32 new",
                trials=3, serving_trials=1),
        Profile("quick", 32, 8, 1, 2, 600, "a smoke run for tests: 32 prompt tokens, 8 new"),
        # one trial per `run`: the gate (.ci/gate) makes its trials itself, baseline and candidate in turn
        Profile("gate", 128, 64, 2, 9, 600, "the CI regression gate: 128 prompt tokens, 64 new, 9 runs to narrow the spread"),
    )
}

# The probe (distance and accuracy from the reference): this many tokens, of which this many are prefilled and the
# rest fed one at a time; logits are compared at the last prefilled position and after each fed token, 257 positions
# in all, enough for a 99th percentile of the per-position KL divergence to rest on more than a couple of positions.
PROBE_TOKENS = 288
PROBE_PREFILL = 32


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UserError(f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}")
    return PROFILES[name]


def prompt_ids(length: int, first_special_token: int, seed: int) -> list[int]:
    """Seeded token ids drawn uniformly from the vocabulary below its special tokens."""
    return np.random.default_rng(seed).integers(0, first_special_token, size=length).tolist()


def probe_ids(first_special_token: int, seed: int, length: int = PROBE_TOKENS) -> list[int]:
    """The probe's token ids (seeded like a prompt, from another seed); tests may take a shorter one."""
    return prompt_ids(length, first_special_token, seed + 1)
