"""What the vLLM rows hand to vLLM, kept apart from `import vllm` so it is testable where vLLM is not installed:
the settings (from spec.options), the engine and sampling arguments, and the notes a row carries."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path

from linnet_core.dtypes import long_name
from linnet_core.errors import UserError
from runners.base import RunSpec

TOKENIZER_FILES = ("tokenizer.json", "vocab.json")  # either one: vLLM can build the checkpoint's tokenizer


@dataclass(frozen=True)
class Settings:
    gpu_memory_utilization: float = 0.85  # share of GPU memory vLLM reserves up front (weights + KV-cache pool)
    enforce_eager: bool = False  # True turns off vLLM's CUDA-graph capture of the decode step

    @classmethod
    def from_options(cls, options: dict) -> Settings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UserError(f"unknown vLLM option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        settings = cls(**options)
        if not 0 < settings.gpu_memory_utilization <= 1:
            raise UserError(f"gpu_memory_utilization={settings.gpu_memory_utilization}: use a share in (0, 1]")
        return settings


def engine_arguments(spec: RunSpec, model_dir: Path, settings: Settings) -> dict:
    """Keyword arguments of vllm.LLM for one sequence of at most spec.max_positions tokens."""
    has_tokenizer = any((Path(model_dir) / f).is_file() for f in TOKENIZER_FILES)
    return {
        "model": str(model_dir),
        "dtype": long_name(spec.dtype),
        "max_model_len": spec.max_positions,
        "max_num_seqs": 1,  # batch 1, as the single-request protocol runs every row
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "enforce_eager": settings.enforce_eager,
        "enable_prefix_caching": False,  # every timed run repeats the prompt: a cache hit would skip the prefill
        "generation_config": "vllm",  # vLLM's neutral defaults, not sampling settings read from the checkpoint
        "skip_tokenizer_init": not has_tokenizer,  # prompts are token ids; synthetic weights have no tokenizer
        "seed": 0,
    }


def sampling_arguments(spec: RunSpec) -> dict:
    """Keyword arguments of vllm.SamplingParams: greedy, exactly spec.new_tokens tokens, EOS ignored."""
    return {"temperature": 0.0, "max_tokens": spec.new_tokens, "ignore_eos": True, "detokenize": False}


def notes(settings: Settings) -> list[str]:
    return [
        f"reserves a KV-cache pool up front (gpu_memory_utilization {settings.gpu_memory_utilization}), "
        "so its memory is a setting, not a need",
        "prefix caching off, so every run prefills the whole prompt",
        "vLLM's API returns log-probabilities (after softmax, top-k only), not logits: nothing to compare exactly",
    ]


def export_hf_at_load(runner) -> Path:
    """Linnet's `hf` export of the row's checkpoint into its work directory, timed: its seconds go in the row's
    metrics and note (they are part of the load time)."""
    from linnet_core import hf  # imports torch: only in the child that exports

    start = time.perf_counter()
    export_dir = hf.export(runner.spec.checkpoint, runner.spec.work / "hf")
    export_s = time.perf_counter() - start
    runner.metrics["export_s"] = export_s
    runner.notes.append(f"linnet.hf.export ({export_s:.1f} s, included in load time)")
    return export_dir
