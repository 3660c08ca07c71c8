"""The kernels of one decode step of Linnet's generated PyTorch: the step a CUDA graph replays (the whole cache window,
masked), at one row (linnet-cudagraphs) and at the serving rows (serve-linnet-cudagraphs). How many, which, and their
time against an eager step's, so that a GPU window says what limits those rows and not only how fast they are.
`make gpu` writes it beside the result file (scripts/gpu-suite.sh); on a CPU (the suite's dry run) it lists the ops.

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
from linnet_core.targets import CompileOptions

PROFILED_STEPS = 5
TIMED_STEPS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="cache rows of each engine profiled")
    parser.add_argument("--prompt", type=int, default=512, help="tokens prefilled in every row first")
    parser.add_argument("--max-positions", type=int, default=640)
    parser.add_argument("--top", type=int, default=20, help="kernels listed per engine")
    args = parser.parse_args()
    if not 0 < args.prompt < args.max_positions or min(args.rows) < 1:
        parser.error("rows must be at least 1 and the prompt shorter than --max-positions")
    entry, checkpoint = resolve(args.model)
    options = CompileOptions(dtype=args.dtype, max_positions=args.max_positions)
    [path] = write(build_decoder(read_config(checkpoint)), checkpoint, tempfile.mkdtemp(), options)
    module = import_generated(path)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "a CPU"
    print(f"{args.model}, {args.dtype} on {where}, torch {torch.__version__}: one decode step over "
          f"{args.max_positions} cache positions, each row at position {args.prompt}")  # fmt: skip
    prompt = prompt_ids(args.prompt, entry.first_special_token, 0)
    for rows in args.rows:
        engine = module.Engine(checkpoint, rows=rows, max_positions=args.max_positions, device=device, dtype=args.dtype)
        for row in range(rows):
            engine.prefill(row, prompt)
        report(engine, rows, args.top)
        del engine


def report(engine, rows: int, top: int) -> None:
    """Times eager steps, then profiles a few and prints the kernels (ops on a CPU) a step runs, the most costly first."""
    cuda = engine.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else lambda: None
    with torch.inference_mode():
        for _ in range(3):  # warm-up: allocator, cuBLAS handles, lazy kernels
            engine.decode_step(engine.max_positions)
        sync()
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            engine.decode_step(engine.max_positions)
        sync()
        step_ms = (time.perf_counter() - start) / TIMED_STEPS * 1e3
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            for _ in range(PROFILED_STEPS):
                engine.decode_step(engine.max_positions)
            sync()
        replay_ms = replayed_step_ms(engine) if cuda else None
    if cuda:  # the GPU's kernels: what a graph replays
        events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:  # the ops the step calls (their own children left out)
        events = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.cpu_parent is None]
    if not events:
        print(f"\n{rows} row(s): the profiler saw nothing (on a GPU it needs CUPTI); an eager step {step_ms:.3f} ms")
        return
    count, micros = collections.Counter(), collections.Counter()
    for e in events:
        count[e.name] += 1
        micros[e.name] += e.time_range.elapsed_us()
    kind, per_step = ("kernels" if cuda else "ops"), len(events) / PROFILED_STEPS
    busy_ms = sum(micros.values()) / PROFILED_STEPS / 1e3
    print(f"\n{rows} row(s): {per_step:.0f} {kind} a step, {busy_ms:.3f} ms of them "
          f"({busy_ms / step_ms:.0%} of an eager step's {step_ms:.3f} ms)")  # fmt: skip
    if replay_ms is not None:  # what a replay spends beyond the kernels' own time: gaps between them
        print(f"  replayed as a CUDA graph: {replay_ms:.3f} ms a step, "
              f"{(replay_ms - busy_ms) * 1e3 / per_step:.2f} us a kernel between kernels")  # fmt: skip
    print(f"  {'a step':>7} {'us a step':>10}  {kind[:-1]}")
    for name, us in micros.most_common(top):
        print(f"  {count[name] / PROFILED_STEPS:7.1f} {us / PROFILED_STEPS:10.1f}  {name[:110]}")


def replayed_step_ms(engine) -> float:
    """The same step captured in a CUDA graph (as linnet-cudagraphs runs it), timed over replays."""
    graph, _ = engine.capture(lambda: engine.decode_step(engine.max_positions))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / TIMED_STEPS * 1e3


if __name__ == "__main__":
    main()
