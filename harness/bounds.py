"""The bounds of a right answer: how far a row's logits may be from the reference's (TOLERANCES, by dtype, depth and
how its weights are stored), how far from the float64 truth relative to the reference (TRUTH_RATIO_BOUNDS), and how
far its probability distributions may be (ACCURACY_BOUNDS: KL and top-1 agreement). The regression check
(harness/check.py) holds rows to them and the page (harness/site/) shows them; both read them here."""

from __future__ import annotations

from dataclasses import dataclass

from harness.registry import MODELS
from harness.results import ResultFile
from harness.validate import is_number
from runners import REFERENCE, RUNNERS


# The largest distance from the reference that is not a wrong answer, by dtype. f32: the project's correctness bar.
# f16 and bf16 logits differ from the reference by rounding: a few units in the last place at a logit of 16 (the
# real model's largest), i.e. 0.25 is ~16 f16 ulps (the largest of 257 probe positions: on qwen2-tiny the f16 rows
# measured 0.13-0.15 there, 0.04-0.10 over the 17 of the earlier probe) and 0.5 is 4 bf16 ulps (the seed page's bf16
# rows are 0.14-0.39). Quantized weights move logits by more than any fixed bound tells from wrong (llama.cpp q8_0:
# 2.3 on qwen2-tiny, 8.2 on the 0.5B shape in bf16): their distance is not judged, their accuracy is
# (ACCURACY_BOUNDS).
TOLERANCES = {"f32": 1e-4, "f16": 0.25, "bf16": 0.5}
# f32 rounding grows with depth: on the 24-layer Qwen2.5-0.5B shape every engine measured sits 2.9e-4 to 4.9e-4 from
# the reference (results/qwen2.5-0.5b-instruct, sums in another order), the 2-layer test model within 5e-5. So a deep
# model's f32 bound is this much per layer (1.2e-3 at 24 layers), never under TOLERANCES["f32"].
F32_PER_LAYER = 5e-5
# f16 rounding grows with depth too: over the 257 probe positions the 2-layer qwen2-tiny's f16 rows sit 0.13-0.15 from
# the reference, the 6-layer gemma3-tiny's (embeddings scaled by sqrt(hidden), norms after each sublayer) 0.27.
F16_PER_LAYER = 0.05
# Rows whose weights are stored in another precision than the run's dtype (Row.quant, RunnerInfo.quant) are held to
# their storage's bound, or the run dtype's when looser. f16 weights round like f16 logits: TOLERANCES["f16"]
# (llama.cpp on f16 GGUF weights: 0.098 from the f32 reference on qwen2-tiny). 8-bit weights (q8_0, int8) move the
# largest logit difference further than any fixed bound tells from wrong (over the 257 probe positions on qwen2-tiny
# the int8 and q8_0 rows measured 2.0-2.7, where the 17 positions of the earlier probe gave 1.05): their distance is
# not judged, their accuracy is (ACCURACY_BOUNDS: KL and top-1 agreement). A quantization without an entry is not
# judged by distance either, until it is measured.
QUANT_TOLERANCES = {"f16": TOLERANCES["f16"], "q8_0": float("inf"), "int8": float("inf")}


# The largest truth_ratio that is not a wrong answer, by dtype: a row's distance from the float64 truth
# (runners/transformers_truth.py) over the reference's own, both in the run's dtype. A row that rounds as transformers
# does sits near 1. 16 bits: each engine rounds its activations at other places than transformers (fused projections,
# another attention kernel), so up to 4x the reference's error is rounding; a wrong row (a lost bias, a position off by
# one) is 100x and more. f32: the errors are summation order at 1e-6 relative, so the ratio of two such tiny distances
# moves more (qwen2-tiny: 1.1-1.9 over six engines); 10. Rows whose weights are stored in fewer bits (`quant`) are
# not judged by it: their distance is the rounding of their weights, and their accuracy bounds judge them.
TRUTH_RATIO_BOUNDS = {"f32": 10.0, "f16": 4.0, "bf16": 4.0}


SIXTEEN_BITS = ("f16", "bf16")


def rounding_bound(dtype: str, reference_truth: float | None) -> float:
    """The distance from the reference a right row may have in a 16-bit run whose reference is `reference_truth` from
    the float64 truth: a row within its truth-ratio bound is at most that many times as far from the truth, so the
    two errors add to at most (1 + the bound) times the reference's. TOLERANCES assume the reference is within
    rounding of a logit of 16; a model may amplify 16-bit rounding far beyond it (the 0.5B shape's random weights of
    synthetic recipe 3 in bf16: the reference 6.3 from the truth, right rows 5.0-6.8 from it: results/reference-check/).
    0 without a truth."""
    return (1 + TRUTH_RATIO_BOUNDS[dtype]) * reference_truth if measured_truth(reference_truth) else 0.0


def rounding_dominates(dtype: str, reference_truth: float | None) -> bool:
    """Whether, in this run, 16-bit rounding alone moves the reference beyond what ACCURACY_BOUNDS were set for: its
    distance from the float64 truth exceeds its dtype's TOLERANCES. Then two right rows round into distributions
    apart by more than those bounds (the 0.5B shape in bf16, recipe 3: KL 0.32-0.54, top-1 0.38-0.47 between right
    rows), and their truth ratio judges them instead."""
    return dtype in SIXTEEN_BITS and measured_truth(reference_truth) and reference_truth > TOLERANCES[dtype]


def measured_truth(reference_truth: float | None) -> bool:
    """Whether a reference's truth distance can set a bound: a finite number above 0 (a file may hold anything; check
    reports an invalid one, and it must not loosen any row's bound meanwhile)."""
    return is_number(reference_truth) and reference_truth > 0


def own_dtype(runner: str, dtype: str) -> str:
    """The dtype a row computes in: its registry entry's (linnet-ort-f16 in an f32 run: f16), else the run's. A runner
    this code does not know (a file from another checkout) is read by its id's suffix, as such files were named."""
    if (info := RUNNERS.get(runner)) is not None:
        return info.dtype or dtype
    return next((d for d in TOLERANCES if runner.endswith(f"-{d}")), dtype)


def run_dtype(run: ResultFile) -> str:
    return run.protocol.get("dtype", "f32")


def truth_ratio_judged(row, dtype: str) -> bool:
    """Whether `check` bounds this row's truth ratio in a run of `dtype`: not for 8-bit weights or another dtype than
    the run's, whose ratio over the reference's rounding says nothing of them (an int8 row in an f32 run: 35,000x)."""
    return truth_ratio_bound(row.quant, dtype, row.runner) != float("inf")


def truth_ratio_bound(quant: str | None, dtype: str, runner: str = "") -> float:
    """A row's truth_ratio bound: its run dtype's; none (infinity) for quantized weights or a row that computes in
    another dtype than the run's (linnet-ort-f16 in an f32 run: its ratio is over an f32 reference's distance)."""
    own = own_dtype(runner, dtype)
    return float("inf") if quant or own != dtype else TRUTH_RATIO_BOUNDS.get(dtype, TRUTH_RATIO_BOUNDS["f32"])


@dataclass(frozen=True)
class AccuracyBound:
    """The loosest accuracy figures (harness/accuracy.py: KL(reference || row) over the probe's positions, top-1
    agreement) that are not a wrong answer."""

    kl_mean: float  # the largest mean KL divergence, nats
    kl_p99: float  # the largest 99th percentile of it
    top1_agree: float  # the smallest share of positions agreeing with the reference's top-1 token

    def loosest(self, other: AccuracyBound) -> AccuracyBound:
        return AccuracyBound(max(self.kl_mean, other.kl_mean), max(self.kl_p99, other.kl_p99),
                             min(self.top1_agree, other.top1_agree))  # fmt: skip


# Accuracy bounds by quantization (a row's `quant`, or its runner id's suffix: -int8, -q8_0, ...), else by dtype as
# TOLERANCES; a row is held to the looser of its own and the run's dtype's. Set from qwen2-tiny runs (f32, synthetic
# weights; harness/accuracy.py's test checks their distributions are neither flat nor one-hot), about 10x above
# what correct rows measured there, and from the physics: f32 differs by summation order (KL ~1e-10), f16 and bf16 by
# rounding every activation (3 and 8 significant bits fewer), 8-bit weights by a rounding step of 1/254 of each
# channel's (or block's) largest weight. On the random weights of synthetic recipe 2 near-ties were common and small
# logit errors flipped them: per-channel int8 weights measured KL 0.017, p99 0.094, top-1 0.926, llama.cpp q8_0
# (8-bit activations too) 0.023, 0.115, 0.899, and the 8-bit bounds hold about 2x above those. On the trained twins
# (recipe 3) and the text probe the same rows measure KL 6.2e-4 to 3.4e-3, p99 3.7e-3 to 2.4e-2, top-1 0.95-0.98
# (results/int8-twins/), where bf16 alone agrees at 0.96-0.98 (scripts/accuracy_floor.py), so the bounds are now
# loose; a broken row (a lost bias, a wrong scale, the lost embedding scale) is KL > 1, top-1 < 0.5.
ACCURACY_BOUNDS = {
    "f32": AccuracyBound(kl_mean=1e-6, kl_p99=1e-5, top1_agree=0.99),
    "f16": AccuracyBound(kl_mean=1e-3, kl_p99=1e-2, top1_agree=0.97),
    "bf16": AccuracyBound(kl_mean=2e-2, kl_p99=0.2, top1_agree=0.90),
    "int8": AccuracyBound(kl_mean=0.05, kl_p99=0.3, top1_agree=0.85),
    "q8_0": AccuracyBound(kl_mean=0.05, kl_p99=0.3, top1_agree=0.85),
}


def tolerance(runner: str, dtype: str, model: str | None = None, quant: str | None = None,
              layers: int | None = None, reference_truth: float | None = None) -> float:  # fmt: skip
    """A row's bound: its weights' quantization's (the row's `quant`, else the registry's for that runner id), else
    its own dtype's (own_dtype: its registry entry's, else the run's), or the reference's, the looser, since the
    distance is to the reference run in the run's dtype; in f32 and f16, wider for a deep model (`layers`, else the
    registry's for `model`, else none); in a 16-bit run, at least what the reference's own rounding allows
    (rounding_bound)."""
    entry = MODELS.get(model) if model else None
    if layers is None:
        layers = entry.config.num_hidden_layers if entry else 0
    bounds = {**TOLERANCES, "f32": max(TOLERANCES["f32"], F32_PER_LAYER * layers),
              "f16": max(TOLERANCES["f16"], F16_PER_LAYER * layers)}  # fmt: skip
    if dtype in SIXTEEN_BITS:
        bounds[dtype] = max(bounds[dtype], rounding_bound(dtype, reference_truth))
    f32 = bounds["f32"]
    quant = quant or (RUNNERS[runner].quant if runner in RUNNERS else None)  # files from before Row.quant
    if quant:
        own = QUANT_TOLERANCES.get(quant, max(QUANT_TOLERANCES.values()))
    else:
        own = bounds.get(own_dtype(runner, dtype), f32)
    return max(own, bounds.get(dtype, f32))


def reference_truth(run: ResultFile) -> float | None:
    """The reference row's distance from the float64 truth in `run`, where it ran and the run measured one."""
    row = next((r for r in run.rows if r.runner == REFERENCE and r.status == "ok"), None)
    return row.truth_distance if row is not None else None


def run_layers(run: ResultFile) -> int | None:
    """The model's depth as the run recorded it (files from before it did: None, the registry says). Loading has
    checked it is a whole number; a depth no model has is not allowed to loosen a bound."""
    layers = (run.architecture or {}).get("layers")
    return layers if layers is not None and 0 < layers < 10_000 else None


def accuracy_bound(runner: str, quant: str | None, dtype: str) -> AccuracyBound:
    """A row's accuracy bound: its quantization's (`quant`, or a runner id ending in one), else its own dtype's (a
    runner id ending in one), loosened to the run's dtype's, since the reference ran in that."""
    own = quant or next((q for q in ACCURACY_BOUNDS if runner.endswith(f"-{q}")), dtype)
    run = ACCURACY_BOUNDS.get(dtype, ACCURACY_BOUNDS["f32"])
    return ACCURACY_BOUNDS.get(own, run).loosest(run)
