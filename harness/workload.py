"""Workloads: the measurement profiles, the seeded prompt, the distance probe, and the serving workloads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    """Random probe token ids (seeded like a prompt, from another seed), for a checkpoint without a tokenizer; tests
    of an engine's arithmetic take them too, often shorter."""
    return prompt_ids(length, first_special_token, seed + 1)


# The probe is text where the checkpoint has a tokenizer (every synthetic one has): a language model's next-token
# distributions on text are what its users see, and on random ids a trained model is unsure everywhere, its top two
# tokens often a hair apart, so any rounding swaps them (llama.cpp measures a quantization's KL on text too). The
# passage is the project's own prose, written apart from the text the test-size twins are trained on.
PROBE_TEXT = Path(__file__).resolve().parent.parent / "linnet_core" / "data" / "probe_text.txt"
TEXT_PROBE = "the first {n} tokens of the project's probe text (linnet_core/data/probe_text.txt, not in the twins' training text)"
RANDOM_PROBE = "{n} random token ids (seeded; the checkpoint has no tokenizer.json)"


def probe_source(has_tokenizer: bool, length: int = PROBE_TOKENS) -> str:
    """One line for the result file and the page: what the probe is."""
    return (TEXT_PROBE if has_tokenizer else RANDOM_PROBE).format(n=length)


def probe_for(checkpoint: Path, first_special_token: int, seed: int, length: int = PROBE_TOKENS) -> list[int]:
    """The run's probe: the probe text through the checkpoint's own tokenizer (no special tokens added), or random
    ids where it has none. A tokenizer that makes fewer tokens of the text, or ids outside the ordinary ones, is
    refused in one line rather than measured on another probe than the file says."""
    tokenizer_file = Path(checkpoint) / "tokenizer.json"
    if not tokenizer_file.is_file():
        return probe_ids(first_special_token, seed, length)
    from tokenizers import Tokenizer

    try:
        ids = Tokenizer.from_file(str(tokenizer_file)).encode(PROBE_TEXT.read_text(), add_special_tokens=False).ids
    except Exception as e:  # a malformed tokenizer.json
        raise UserError(f"{tokenizer_file}: cannot tokenize the probe text: {type(e).__name__}: {str(e)[:200]}") from None
    if len(ids) < length:
        raise UserError(f"{tokenizer_file} makes {len(ids)} tokens of the probe text, fewer than the probe's {length}")
    if max(ids[:length]) >= first_special_token:
        raise UserError(f"{tokenizer_file} gives the probe text token id {max(ids[:length])}, past the model's ordinary ids (< {first_special_token})")
    return ids[:length]
