"""The kernels of Linnet's generated PyTorch steps on a GPU, so that a GPU window says what limits the CUDA-graph rows
and not only how fast they are: the decode step a CUDA graph replays (the whole cache window, masked) at one row
(linnet-cudagraphs) and at the serving rows (serve-linnet-cudagraphs), and a serving step's batched prefill (prompt
chunks within linnet.serve's budget, the other rows' decode steps riding along), which runs eagerly. For each: how
many kernels, which, their time against the step's (an eager step's gaps are the host launching them), and for the
decode step a replay's. `make gpu` writes it beside the result file (scripts/gpu-suite.sh); on a CPU (the suite's
dry run) it lists the ops a step calls instead.

    python scripts/gpu_step_kernels.py qwen2.5-0.5b-instruct --device cuda --dtype bf16 --rows 1 64
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from harness.workload import prompt_ids
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import import_generated, write
from linnet_core.models import resolve
from linnet_core.serve.backends.torch_backend import SERVE_OPTIONS
from linnet_core.serve.config import ServeConfig
from linnet_core.targets import CompileOptions

PROFILED_STEPS = 5
TIMED_STEPS = 20
# A serving step's prompt chunks (length, start): linnet.serve's default budget (prefill_budget, 2,048 tokens) in the
# torch backend's chunks (SERVE_OPTIONS: 256 tokens), half of them starting a prompt (plainly causal) and half
# continuing one (under a mask), as the default workload's prompts of 128-512 tokens come
CHUNKS = ((256, 0), (256, 256)) * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="cache rows of each engine profiled")
    parser.add_argument("--prompt", type=int, default=512, help="tokens prefilled in every row first")
    parser.add_argument("--max-positions", type=int, default=640)
    parser.add_argument("--top", type=int, default=15, help="kernels listed per step")
    args = parser.parse_args()
    longest = max(n + start for n, start in CHUNKS)
    if not 0 < args.prompt < args.max_positions or min(args.rows) < 1 or args.max_positions < longest:
        parser.error(f"rows must be at least 1, the prompt shorter than --max-positions, and that {longest} or more")
    assert sum(n for n, _ in CHUNKS) == ServeConfig().prefill_budget and all(n <= SERVE_OPTIONS["prefill_chunk"] for n, _ in CHUNKS)
    entry, checkpoint = resolve(args.model)
    options = CompileOptions(dtype=args.dtype, max_positions=args.max_positions)
    [path] = write(build_decoder(read_config(checkpoint)), checkpoint, tempfile.mkdtemp(), options)
    module = import_generated(path)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "a CPU"
    print(f"{args.model}, {args.dtype} on {where}, torch {torch.__version__}; cache rows of {args.max_positions} "
          f"positions, each row's first {args.prompt} filled")  # fmt: skip
    prompt = prompt_ids(args.prompt, entry.first_special_token, 0)
    for rows in args.rows:
        engine = module.Engine(checkpoint, rows=rows, max_positions=args.max_positions, device=device, dtype=args.dtype)
        for row in range(rows):
            engine.prefill(row, prompt)
        report(f"{rows} row(s), a decode step", engine, lambda: engine.decode_step(engine.max_positions), args.top,
               replay=engine.device.type == "cuda")  # fmt: skip
        if rows > 1:  # a serving step: prompt chunks in the first rows, a decode step in every other
            # every row holds the prompt already: a chunk at 256 rewrites what a prompt's second chunk would write
            prompts = [(row, prompt_ids(n, entry.first_special_token, row), start) for row, (n, start) in enumerate(CHUNKS[: rows - 1])]
            riders = [(row, prompt[-1:], args.prompt) for row in range(len(prompts), rows)]
            tokens = sum(len(chunk) for _, chunk, _ in prompts)
            continuing = sum(start > 0 for _, _, start in prompts)
            label = (f"{rows} row(s), a prefill step: {len(prompts)} chunks ({tokens} tokens, {continuing} continuing a "
                     f"prompt), {len(riders)} rows decoding")  # fmt: skip
            report(label, engine, lambda: engine.prefill_batch(prompts + riders), args.top)
        del engine


def report(label: str, engine, step, top: int, replay: bool = False) -> None:
    """Times step() eagerly, then profiles a few and prints the kernels (ops on a CPU) it runs, the most costly
    first; with `replay`, times step() captured in a CUDA graph too."""
    cuda = engine.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else lambda: None
    with torch.inference_mode():
        for _ in range(3):  # warm-up: allocator, cuBLAS handles, lazy kernels
            step()
        step_ms = timed_ms(step, sync)
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            for _ in range(PROFILED_STEPS):
                step()
            sync()
        replay_ms = timed_ms(engine.capture(step)[0].replay, sync) if replay else None
    if cuda:  # the GPU's kernels (and copies): what a graph replays
        events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:  # the ops the step calls (their own children left out)
        events = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.cpu_parent is None]
    if not events:
        print(f"\n{label}: the profiler saw nothing (on a GPU it needs CUPTI); eagerly {step_ms:.3f} ms")
        return
    count, micros = collections.Counter(), collections.Counter()
    for e in events:
        count[e.name] += 1
        micros[e.name] += e.time_range.elapsed_us()
    kind, per_step = ("kernels" if cuda else "ops"), len(events) / PROFILED_STEPS
    busy_ms = sum(micros.values()) / PROFILED_STEPS / 1e3
    print(f"\n{label}: {per_step:.0f} {kind}, {busy_ms:.3f} ms of them ({busy_ms / step_ms:.0%} of the eager step's "
          f"{step_ms:.3f} ms)")  # fmt: skip
    if replay_ms is not None:  # what a replay spends beyond the kernels' own time: the gaps between them
        print(f"  replayed as a CUDA graph: {replay_ms:.3f} ms, {(replay_ms - busy_ms) * 1e3 / per_step:.2f} us a "
              "kernel between kernels")  # fmt: skip
    print(f"  {'a step':>7} {'us a step':>10}  {kind[:-1]}")
    for name, us in micros.most_common(top):
        print(f"  {count[name] / PROFILED_STEPS:7.1f} {us / PROFILED_STEPS:10.1f}  {name[:110]}")


def timed_ms(run, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        run()
    sync()
    return (time.perf_counter() - start) / TIMED_STEPS * 1e3


if __name__ == "__main__":
    main()
