"""Cross-checks the harness's serving measurement with a load generator nobody here wrote (guidellm).

Starts `linnet serve` once, warms it up, then drives it with guidellm (text prompts through the checkpoint's
tokenizer, the serving workload's prompt-length range, output length and concurrency) and with the harness's own
serving client (harness/protocol.py's serve_all, the workload's token-id prompts, streamed over the same HTTP
API), and prints both throughputs and TTFTs side by side. Run it through scripts/crosscheck-serving.sh."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx

from harness.protocol import serve_all
from harness.registry import checkpoint_for, get_model
from harness.workload import SERVING

ROOT = Path(__file__).resolve().parent.parent


class HttpRunner:
    """The harness's ServingRunner interface (generate yields each chunk's token ids) over linnet serve's HTTP API."""

    def __init__(self, base: str, model: str):
        self.spec = SimpleNamespace(runner="harness client over HTTP")
        self.client = httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=None))
        self.model = model

    async def generate(self, prompt: list[int], max_tokens: int):
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
        async with self.client.stream("POST", "/v1/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    ids = json.loads(line[6:])["choices"][0]["token_ids"]
                    if ids:
                        yield ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_cpus(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(the server's CPUs, the clients' CPUs): the last CPU for the clients and the rest for the server, so that a
    load generator's own work (guidellm used 35-41 CPU seconds a run where the harness's client used 5-6) cannot
    slow the server it measures; (None, None) unpinned or with one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return set(cpus[:-1]), {cpus[-1]}


def start_server(model: str, backend: str, rows: int, positions: int, port: int, log, cpus: set[int] | None) -> subprocess.Popen:
    command = [sys.executable, "-m", "linnet_core.cli", "serve", model, "--backend", backend, "--rows", str(rows),
               "--positions", str(positions), "--max-waiting", "100000", "--port", str(port)]  # fmt: skip
    env = dict(os.environ)
    if cpus:  # as many compute threads as the server's CPUs (torch, ONNX Runtime and XLA read these at start-up)
        env.update(OMP_NUM_THREADS=str(len(cpus)), MKL_NUM_THREADS=str(len(cpus)))
    child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                             preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)  # fmt: skip
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"linnet serve exited with {child.returncode}; see {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return child
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    child.kill()
    raise SystemExit("linnet serve did not come up in 900 s")


def harness_client(base: str, model: str, prompts: list[list[int]], new_tokens: int, in_flight: int) -> dict:
    async def main():
        runner = HttpRunner(base, model)
        try:
            return await serve_all(runner, prompts, new_tokens, in_flight)
        finally:
            await runner.client.aclose()

    run = asyncio.run(main())
    return {"output_tok_s": run.tok_s, "ttft_ms_median": statistics.median(r.ttft_s * 1e3 for r in run.requests),
            "wall_s": run.wall_s, "requests": len(run.requests), "prompt_tokens_mean": statistics.mean(map(len, prompts))}  # fmt: skip


def guidellm(base: str, model: str, checkpoint: Path, w, out: Path) -> dict:
    """guidellm's concurrent profile: max_in_flight streams until the workload's number of requests is done."""
    uniform_sd = (w.prompt_max - w.prompt_min) / math.sqrt(12)  # the harness draws lengths uniformly
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": base, "model": model, "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": w.max_in_flight},
        "tokenizer": {"kind": "huggingface_auto", "model": str(checkpoint)},
        "data": [{"kind": "synthetic_text", "prompt_tokens": (w.prompt_min + w.prompt_max) // 2,
                  "prompt_tokens_stdev": round(uniform_sd), "prompt_tokens_min": w.prompt_min,
                  "prompt_tokens_max": w.prompt_max, "output_tokens": w.new_tokens}],
        "constraints": [{"kind": "max_requests", "count": w.requests}],
        "outputs": [{"kind": "json", "path": str(out)}],
    }}  # fmt: skip
    file = out.with_suffix(".scenario.json")
    file.write_text(json.dumps(scenario, indent=1))
    exe = shutil.which("guidellm") or str(Path(sys.executable).with_name("guidellm"))
    done = subprocess.run([exe, "run", "--scenario", str(file), "--disable-console-interactive"], cwd=out.parent,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"guidellm failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    m = bench["metrics"]
    return {"output_tok_s": m["output_token_count"]["successful"]["total_sum"] / bench["duration"],
            "ttft_ms_median": m["time_to_first_token_ms"]["successful"]["median"], "wall_s": bench["duration"],
            "requests": m["output_token_count"]["successful"]["count"],
            "prompt_tokens_mean": m["prompt_token_count"]["successful"]["mean"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2-tiny")
    parser.add_argument("--backend", default="torch")
    # the default workload: on qwen2-tiny a run takes seconds; the quick one is over in a fraction of a second,
    # too short for either client's own start-up to vanish in its numbers
    parser.add_argument("--workload", default="default", choices=sorted(SERVING))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the table and the record (JSON) to this text file")
    parser.add_argument("--no-repeat", dest="repeat", action="store_false", help="one run of each client, not two")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="let server and clients share every CPU (default: the clients get the last CPU to themselves)")
    args = parser.parse_args()
    server_cpus, client_cpus = split_cpus(args.pin)
    entry, w = get_model(args.model), SERVING[args.workload]
    checkpoint, _ = checkpoint_for(entry, None, args.seed)
    prompts = w.prompts(entry.first_special_token, args.seed)
    work = Path(tempfile.mkdtemp(prefix="linnet-crosscheck-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(work / "server.log", "w") as log:
        server = start_server(entry.id, args.backend, w.max_in_flight, w.max_positions, port, log, server_cpus)
        if client_cpus:  # this process and the guidellm processes it starts (affinity is inherited)
            os.sched_setaffinity(0, client_cpus)
        try:
            print(f"linnet serve {entry.id} --backend {args.backend}: {w.max_in_flight} rows x {w.max_positions} positions; "
                  f"workload '{w.name}': {w.description}; {cpu_line(server_cpus, client_cpus)}", flush=True)  # fmt: skip
            harness_client(base, entry.id, prompts[: w.warmup_requests], w.warmup_new_tokens, w.max_in_flight)  # warm-up
            # A B B A: a machine whose load drifts during the check favours neither client
            runs = {"guidellm": [], "harness": []}
            for i, name in enumerate(("guidellm", "harness", "harness", "guidellm")[: 4 if args.repeat else 2]):
                with cpu_seconds(server.pid) as cpu:
                    if name == "guidellm":
                        run = guidellm(base, entry.id, checkpoint, w, work / f"guidellm-{i}.json")
                    else:
                        run = harness_client(base, entry.id, prompts, w.new_tokens, w.max_in_flight)
                runs[name].append(run | cpu)
        finally:
            server.terminate()
            server.wait(timeout=60)
    theirs, ours = median_run(runs["guidellm"]), median_run(runs["harness"])
    ratio = ours["output_tok_s"] / theirs["output_tok_s"]
    lines = [f"{'client':<28}{'output tok/s':>14}{'TTFT median ms':>16}{'wall s':>9}{'requests':>10}{'prompt tokens':>15}"
             f"{'server CPU s':>14}{'client CPU s':>14}"]  # fmt: skip
    for name, key in (("guidellm " + guidellm_version(), "guidellm"), ("harness (serve_all, HTTP)", "harness")):
        for r in runs[key]:
            lines.append(f"{name:<28}{r['output_tok_s']:>14.1f}{r['ttft_ms_median']:>16.1f}{r['wall_s']:>9.2f}{r['requests']:>10}"
                         f"{r['prompt_tokens_mean']:>15.1f}{r['server_cpu_s']:>14.1f}{r['client_cpu_s']:>14.1f}")  # fmt: skip
    lines.append(cpu_line(server_cpus, client_cpus))
    lines.append(f"throughput harness / guidellm (mean of each client's runs): {ratio:.3f} "
                 f"({'within' if abs(ratio - 1) <= 0.15 else 'NOT within'} 15%); TTFT {ours['ttft_ms_median'] / theirs['ttft_ms_median']:.3f}")  # fmt: skip
    print("\n".join(lines))
    if args.out:  # a text file (results/*/*.json are the bench's result files): the table, then the record as JSON
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {"model": entry.id, "backend": args.backend, "workload": w.name, "description": w.description,
                  "rows": w.max_in_flight, "positions": w.max_positions, "guidellm": theirs, "harness": ours, "runs": runs,
                  "throughput_ratio": ratio, "guidellm_version": guidellm_version(), "cpu_count": os.cpu_count(),
                  "server_cpus": sorted(server_cpus or []), "client_cpus": sorted(client_cpus or []),
                  "load_average": os.getloadavg(), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        args.out.write_text("\n".join(lines) + "\n\n" + json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out}")


@contextlib.contextmanager
def cpu_seconds(server_pid: int):
    """CPU seconds the server and the client (this process, or guidellm's processes once waited for) used inside
    the block: on a machine with few cores the load generator's own work competes with the server it measures."""
    import psutil

    server = psutil.Process(server_pid)

    def used():
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        t = server.cpu_times()
        return t.user + t.system, me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime

    out: dict[str, float] = {}
    server0, client0 = used()
    yield out
    server1, client1 = used()
    out.update(server_cpu_s=server1 - server0, client_cpu_s=client1 - client0)


def cpu_line(server: set[int] | None, clients: set[int] | None) -> str:
    if not server:
        return "server and clients share every CPU"
    return f"server pinned to CPU(s) {','.join(map(str, sorted(server)))}, clients to CPU(s) {','.join(map(str, sorted(clients)))}"


def median_run(runs: list[dict]) -> dict:
    """The mean of each number over a client's runs (two at most: their mean is their median)."""
    return {k: statistics.mean(r[k] for r in runs) for k in runs[0]}


def guidellm_version() -> str:
    from importlib.metadata import version

    return version("guidellm")


if __name__ == "__main__":
    main()
