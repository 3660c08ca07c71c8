"""linnet-torch-int8 and linnet-inductor-int8's decode on the 0.5B shape (qwen2.5-0.5b-instruct, synthetic weights,
f32 activations, one row), with a decode step's matrices in matvec_int8 ("kernel") and in the paths before it ("before":
torch's int8 weight-pack matmul eagerly, in bf16; inductor's fused product-and-sum), each in a fresh process, in turns.

    .venv/bin/python results/int8-kernel/measure.py [ROUNDS]   (prints one line per process; nothing else may run)

"before" is the same module with MATVEC_MIN_WEIGHTS above every matrix, which is what linear_int8 read before the
kernel. Each process: load, a 128-token prompt, a warm decode of 8 tokens (inductor compiles there), then three timed
decodes of 64 tokens after a fresh prefill each; it prints their tok/s and the first greedy tokens."""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time, tempfile
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
[path] = write(build_decoder(entry.config), checkpoint, Path(tempfile.mkdtemp()), CompileOptions(max_positions=1024, quant="int8"))
module = import_generated(path)
if which == "before":
    module.MATVEC_MIN_WEIGHTS = 2**62
started = time.perf_counter()
engine = module.Engine(checkpoint, rows=1, max_positions=1024, mode=mode)
load = time.perf_counter() - started
probe = probe_ids(entry.first_special_token, 0, length=128)
engine.prefill(0, probe)
engine.generate(8)
speeds = []
for _ in range(3):
    engine.prefill(0, probe)
    started = time.perf_counter()
    tokens = engine.generate(64)
    speeds.append(64 / (time.perf_counter() - started))
print(f"{mode:8s} {which:6s} load {load:5.1f} s  decode tok/s " + " ".join(f"{s:5.1f}" for s in speeds)
      + f"  tokens {tokens[:6, 0].tolist()}")
"""


def main(rounds: int) -> None:
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {rounds} rounds, in turns", flush=True)
    for _ in range(rounds):
        for mode in ("eager", "inductor"):
            for which in ("kernel", "before"):
                time.sleep(6)  # the machine settles between processes
                out = subprocess.run([sys.executable, "-c", CHILD, mode, which], cwd=ROOT, capture_output=True,
                                     text=True, timeout=900)  # fmt: skip
                print(out.stdout.strip() or out.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
