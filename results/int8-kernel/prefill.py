"""linnet-torch-int8 and linnet-inductor-int8's prefill on the 0.5B shape (qwen2.5-0.5b-instruct, synthetic weights,
f32 activations, one row): this checkout's code ("tiled": a prefill's products in matmul_int8) against the code of a
commit before it ("before": each int8 matrix widened whole to f32 at every call), and the f32 engine of this checkout
for scale; each in a fresh process, in turns.

    .venv/bin/python results/int8-kernel/prefill.py BEFORE_WORKTREE [ROUNDS]   (one line per process; nothing else may run)

BEFORE_WORKTREE is a git worktree of the commit before (its linnet_core is imported from there). Each process: load,
two untimed prefills of each length (inductor compiles there), then five timed prefills of 128 tokens (the `cpu`
profile's prompt) and five of 512 (the `default` profile's); it prints their medians in ms, and the first token."""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import statistics, sys, time, tempfile
from pathlib import Path
from harness.registry import get_model
from harness.workload import probe_ids
from linnet_core.arch import build_decoder
from linnet_core.checkpoint import synthetic_checkpoint
from linnet_core.emit_torch import import_generated, write
from linnet_core.targets import CompileOptions
mode, which = sys.argv[1], sys.argv[2]
entry = get_model("qwen2.5-0.5b-instruct")
checkpoint = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
options = CompileOptions(max_positions=1024, quant=None if which == "f32" else "int8")
[path] = write(build_decoder(entry.config), checkpoint, Path(tempfile.mkdtemp()), options)
engine = import_generated(path).Engine(checkpoint, rows=1, max_positions=1024, mode=mode)
prompts = {n: probe_ids(entry.first_special_token, 0, length=n) for n in (128, 512)}
medians, firsts = {}, []
for n, prompt in prompts.items():
    firsts += [engine.prefill(0, prompt) for _ in range(2)]
    times = []
    for _ in range(5):
        started = time.perf_counter()
        firsts.append(engine.prefill(0, prompt))
        times.append(1e3 * (time.perf_counter() - started))
    medians[n] = statistics.median(times)
print(f"{mode:8s} {which:6s} prefill ms: 128 tokens {medians[128]:6.1f}, 512 tokens {medians[512]:7.1f}"
      f"  first tokens {sorted(set(firsts))}")
"""


def main(before: Path, rounds: int) -> None:
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {rounds} rounds, in turns", flush=True)
    for _ in range(rounds):
        for mode in ("eager", "inductor"):
            for which, code in (("tiled", ROOT), ("before", before), ("f32", ROOT)):
                time.sleep(6)  # the machine settles between processes
                out = subprocess.run([sys.executable, "-c", CHILD, mode, which], cwd=code, capture_output=True,
                                     text=True, timeout=900)  # fmt: skip
                print(out.stdout.strip() or out.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
