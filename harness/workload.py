"""Workloads: the measurement profiles, the seeded prompt, and the distance probe."""

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

    @property
    def max_positions(self) -> int:
        """Static caches hold prompt + new tokens, rounded up to a multiple of 256."""
        return -(-(self.prompt_tokens + self.new_tokens) // 256) * 256


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("default", 512, 128, 3, 10, 900, "the published page's protocol: 512 prompt tokens, 128 new"),
        Profile("cpu", 128, 32, 1, 3, 1800, "the 0.5B shape on a CPU: 128 prompt tokens, 32 new"),
        Profile("quick", 32, 8, 1, 2, 600, "a smoke run for tests: 32 prompt tokens, 8 new"),
        Profile("gate", 32, 16, 2, 5, 600, "the CI regression gate: 32 prompt tokens, 16 new, 5 runs to narrow the spread"),
    )
}

PROBE_TOKENS = 40  # the distance probe: this many tokens ...
PROBE_PREFILL = 24  # ... of which this many are prefilled and the rest fed one at a time


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UserError(f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}")
    return PROFILES[name]


def prompt_ids(length: int, first_special_token: int, seed: int) -> list[int]:
    """Seeded token ids drawn uniformly from the vocabulary below its special tokens."""
    return np.random.default_rng(seed).integers(0, first_special_token, size=length).tolist()


def probe_ids(first_special_token: int, seed: int) -> list[int]:
    return prompt_ids(PROBE_TOKENS, first_special_token, seed + 1)
