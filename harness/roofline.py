"""The memory wall: at batch 1 a decode step reads every weight once (and the KV cache it attends over), so no engine
decodes faster than the machine's memory bandwidth over the bytes it reads per token. Each run measures the bandwidth
twice, at its start and at its end (a large read, in a child process: on a CPU with every core, on a GPU in its
memory), and records the larger in `machine`: a VM's speed moves between phases, and a probe taken in a slow one put
llama.cpp's f32 decode at 1.12 and 1.28 of the wall; each decode row records `bytes_per_token` (weights in their storage type, plus the KV cache over the mean
context of the decode) and `roofline`, the share of that wall its median decode reaches. A reader sees how much is
left for anyone, not only who won.

`python -m harness.roofline DEVICE` prints the probe's JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import time

# Bytes per stored weight. Per-channel int8 adds one scale per output channel (negligible); llama.cpp's q8_0 stores
# 32 int8 weights and one f16 scale in 34 bytes.
WEIGHT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "int8": 1.0, "q8_0": 34 / 32}
PROBE_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}  # the copied array: far beyond any cache
PROBE_REPEATS = 5
PROBE_TIMEOUT_S = 120


def probe(device: str) -> dict:
    """The best of PROBE_REPEATS reads of a large array (its maximum: a streaming read and nothing written, as a
    batch-1 decode step reads its weights), in GB/s. A copy (STREAM's measure) under-reads the wall a decode faces: on
    this project's 2-core VM it gave 31 GB/s where llama.cpp's f32 decode read 39. So does a read of 4 KiB pages: on
    that VM a streaming read ran at 65-80% of its speed on 2 MiB pages in the machine's fast spells."""
    try:
        import torch
    except ImportError:  # the harness runs without torch: numpy on one thread
        array = host_array()
        read, sync, method = array.max, (lambda: None), "numpy read (max), one thread"
    else:
        torch.set_num_threads(torch.get_num_threads())  # every core: a decode step's matrix products use them all
        if device == "cpu":
            array = torch.from_numpy(host_array())
        else:
            array = torch.ones(PROBE_BYTES[device] // 4, dtype=torch.float32, device=device)
        read = array.amax
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        threads = torch.get_num_threads()
        method = "torch read (max), on the GPU" if device == "cuda" else f"torch read (max) of huge pages, {threads} threads"
    best = float("inf")
    for _ in range(PROBE_REPEATS + 1):  # the first touches the pages
        sync()
        start = time.perf_counter()
        read()
        sync()
        best = min(best, time.perf_counter() - start)
    return {"gb_s": PROBE_BYTES[device] / best / 1e9, "method": f"{method}, best of {PROBE_REPEATS}"}


def host_array():
    """The CPU probe's float32 array. numpy asks Linux for huge pages under an array this large, as the generated
    PyTorch engine does for its weights (in_huge_pages)."""
    import numpy as np

    return np.ones(PROBE_BYTES["cpu"] // 4, np.float32)


def measure(device: str) -> dict:
    """The probe in a child process (this one must not import torch or touch the GPU); {} when it fails."""
    try:
        out = subprocess.run([sys.executable, "-m", "harness.roofline", device], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S)  # fmt: skip
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    gb_s = figures.get("gb_s")
    if not isinstance(gb_s, (int, float)) or not 0 < gb_s < 1e6:
        return {}
    return {"memory_bandwidth_gb_s": float(gb_s), "memory_bandwidth_method": str(figures.get("method", ""))[:200]}


def larger(probes: list[dict]) -> dict:
    """The larger of several probes' figures (measure()'s), its method naming them all; {} when none measured."""
    measured = [p for p in probes if p]
    if not measured:
        return {}
    best = max(measured, key=lambda p: p["memory_bandwidth_gb_s"])
    if len(measured) == 1:
        return best
    figures = ", ".join(f"{p['memory_bandwidth_gb_s']:.1f}" for p in measured)
    return {**best, "memory_bandwidth_method": f"{best['memory_bandwidth_method']}; the larger of {len(measured)} probes, "
                                              f"at the run's start and end ({figures} GB/s)"}  # fmt: skip


def bytes_per_token(config, dtype: str, quant: str | None, prompt_tokens: int, new_tokens: int) -> float:
    """Bytes a batch-1 decode step reads, on average over the decode: every weight in its storage type (the embedding
    table only where the output head shares it: a lookup reads one row of it) and the K and V of every layer over the
    positions attended (the prompt, then half the new tokens on average) in the run's dtype. Sliding-window layers are
    counted as attending over the whole context."""
    embedding = config.vocab_size * config.hidden_size
    weights = config.num_parameters - (0 if config.tie_word_embeddings else embedding)
    kv_per_position = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * WEIGHT_BYTES[dtype]
    context = prompt_tokens + new_tokens / 2
    return weights * WEIGHT_BYTES.get(quant or dtype, WEIGHT_BYTES[dtype]) + kv_per_position * context


def roofline(decode_tok_s: float, bytes_per_token_: float, gb_s: float) -> float:
    """The share of the memory wall a decode speed reaches: tok/s x bytes/token over bytes/s."""
    return decode_tok_s * bytes_per_token_ / (gb_s * 1e9)


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1] if len(sys.argv) > 1 else "cpu")))
