"""The runner registry: one line per stack (a row on the page). The harness knows stacks only through this table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from linnet_core.errors import UserError

# Page sections, in page order.
GROUPS = ("PyTorch", "JAX", "ONNX Runtime and TensorRT", "LLM engines", "Serving many requests")


@dataclass(frozen=True)
class RunnerInfo:
    id: str  # the --runner name and the row's `runner` field
    module: str  # "module" (its class Runner) or "module:Class": imported only in the child process
    label: str  # the row's name on the page
    group: str  # one of GROUPS
    peer: str | None = None  # the runner id of the stack this row replaces
    kind: Literal["single", "serving"] = "single"  # single-request protocol or the serving workload
    quant: str | None = None  # the weights' quantization ("int8", "q8_0", "f16"); None: the run's dtype
    dtype: str | None = None  # the dtype it computes in whatever the run's (linnet-ort-f16: "f16"); None: the run's

    def __post_init__(self):
        assert self.group in GROUPS, self.group

    @property
    def ours(self) -> bool:
        """A row of Linnet's (its engines and its exports on other stacks), not a peer stack measured beside them."""
        return "linnet" in self.id


RUNNERS: dict[str, RunnerInfo] = {
    r.id: r
    for r in (
        RunnerInfo("transformers", "runners.transformers_eager", "transformers", "PyTorch"),
        RunnerInfo("transformers-compiled", "runners.transformers_compiled", "transformers, compiled", "PyTorch"),
        RunnerInfo("linnet-torch", "runners.linnet_torch", "Linnet, generated PyTorch", "PyTorch", "transformers-compiled"),
        RunnerInfo("linnet-inductor", "runners.linnet_inductor", "Linnet, inductor", "PyTorch", "transformers-compiled"),
        RunnerInfo("linnet-cudagraphs", "runners.linnet_cudagraphs", "Linnet, CUDA graphs", "PyTorch", "transformers-compiled"),
        RunnerInfo("linnet-torch-int8", "runners.linnet_torch:Int8", "Linnet, generated PyTorch, int8 weights", "PyTorch",
                   "llamacpp-linnet-gguf-q8_0", quant="int8"),
        RunnerInfo("linnet-inductor-int8", "runners.linnet_inductor:Int8", "Linnet, inductor, int8 weights", "PyTorch",
                   "llamacpp-linnet-gguf-q8_0", quant="int8"),
        RunnerInfo("kerashub", "runners.kerashub", "KerasHub", "JAX"),
        RunnerInfo("linnet-stablehlo", "runners.linnet_stablehlo", "Linnet, XLA (StableHLO)", "JAX", peer="kerashub"),
        RunnerInfo("linnet-jax", "runners.linnet_jax", "Linnet, XLA (generated JAX)", "JAX", peer="kerashub"),
        RunnerInfo("linnet-ort-f32", "runners.linnet_ort", "Linnet, ONNX Runtime f32", "ONNX Runtime and TensorRT",
                   "llamacpp-linnet-gguf", dtype="f32"),
        RunnerInfo("linnet-ort-f16", "runners.linnet_ort", "Linnet, ONNX Runtime f16", "ONNX Runtime and TensorRT", dtype="f16"),
        RunnerInfo("linnet-ort-bf16", "runners.linnet_ort", "Linnet, ONNX Runtime bf16", "ONNX Runtime and TensorRT", dtype="bf16"),
        RunnerInfo("linnet-ort-int8", "runners.linnet_ort:Int8", "Linnet, ONNX Runtime, int8 weights", "ONNX Runtime and TensorRT",
                   "llamacpp-linnet-gguf-q8_0", quant="int8"),
        RunnerInfo("linnet-trt-f32", "runners.linnet_trt", "Linnet, TensorRT f32", "ONNX Runtime and TensorRT", dtype="f32"),
        RunnerInfo("linnet-trt-f16", "runners.linnet_trt", "Linnet, TensorRT f16", "ONNX Runtime and TensorRT", dtype="f16"),
        RunnerInfo("linnet-trt-bf16", "runners.linnet_trt", "Linnet, TensorRT bf16", "ONNX Runtime and TensorRT", dtype="bf16"),
        RunnerInfo("vllm", "runners.vllm_offline", "vLLM", "LLM engines"),
        RunnerInfo("vllm-linnet-export", "runners.vllm_linnet_export", "vLLM on Linnet's export", "LLM engines", peer="vllm"),
        RunnerInfo("llamacpp-linnet-gguf", "runners.llamacpp_linnet_gguf", "llama.cpp on Linnet's GGUF", "LLM engines"),
        RunnerInfo("llamacpp-linnet-gguf-f16", "runners.llamacpp_linnet_gguf:F16Runner", "llama.cpp on Linnet's GGUF, f16", "LLM engines", quant="f16"),
        RunnerInfo("llamacpp-linnet-gguf-q8_0", "runners.llamacpp_linnet_gguf:Q8Runner", "llama.cpp on Linnet's GGUF, q8_0", "LLM engines", quant="q8_0"),
        RunnerInfo("serve-vllm", "runners.serve_vllm", "vLLM", "Serving many requests", kind="serving"),
        RunnerInfo("serve-linnet-cudagraphs", "runners.serve_linnet:CudaGraphs", "linnet.serve, CUDA graphs", "Serving many requests", "serve-vllm", "serving"),
        RunnerInfo("serve-linnet-xla", "runners.serve_linnet:Xla", "linnet.serve, XLA", "Serving many requests", "serve-vllm", "serving"),
        RunnerInfo("serve-linnet-ort", "runners.serve_linnet:Ort", "linnet.serve, ONNX Runtime", "Serving many requests", "serve-vllm", "serving"),
        RunnerInfo("serve-vllm-linnet-export", "runners.serve_vllm:LinnetExport", "vLLM on Linnet's export", "Serving many requests", "serve-vllm", "serving"),
        RunnerInfo("serve-triton-vllm", "runners.serve_triton:Vllm", "Triton, vLLM backend", "Serving many requests", kind="serving"),
        RunnerInfo("serve-triton-linnet", "runners.serve_triton:Linnet", "Triton, linnet.serve backend", "Serving many requests", "serve-triton-vllm", "serving"),
        RunnerInfo("serve-transformers-batched", "runners.serve_transformers_batched", "transformers, batched", "Serving many requests", kind="serving"),
        RunnerInfo("serve-kerashub-static", "runners.serve_kerashub_static", "KerasHub, static batches", "Serving many requests", kind="serving"),
    )
}

# The row every other row's logits are compared with.
REFERENCE = "transformers"
# The float64 truth beside it (runners/transformers_truth.py): computed once per run, untimed, never a row.
TRUTH = RunnerInfo("transformers-f64", "runners.transformers_truth", "transformers, float64 on the CPU", "PyTorch")


def get_runner(name: str) -> RunnerInfo:
    if name not in RUNNERS:
        raise UserError(f"unknown runner {name[:80]!r}; known runners: {', '.join(RUNNERS)}")
    return RUNNERS[name]


def with_extras(rows: Sequence[RunnerInfo], extras: Sequence[str], named: bool) -> tuple[RunnerInfo, ...]:
    """The run's rows with those `run --extra-runner` names last (their trials come after every other row's). A
    one-line error for the reference, whose first trial every row's distance needs, and for a row named with --runner
    too; with no --runner, the extras are taken from every row."""
    extra = tuple(dict.fromkeys(get_runner(name) for name in extras))
    for info in extra:
        if info.id == REFERENCE:
            raise UserError(f"--extra-runner {REFERENCE}: the reference runs first, as every row is compared with it")
        if named and info in rows:
            raise UserError(f"--extra-runner {info.id}: it is given with --runner too; name it once")
    return tuple(r for r in rows if r not in extra) + extra


def with_peers(rows: Sequence[RunnerInfo], pairs: Sequence[str]) -> tuple[RunnerInfo, ...]:
    """The run's rows, each Linnet row that `run --peer RUNNER=PEER` names compared with that PEER instead of its own
    (in the table, and in turns with --peer-duets): on a CPU, say, generated PyTorch against llama.cpp rather than
    transformers compiled. A one-line error for a pair that is not two of this run's rows, a Linnet row and another,
    timed the same way."""
    peers: dict[str, str] = {}
    for pair in pairs:
        ours, sep, theirs = pair.partition("=")
        if not (sep and ours and theirs) or len(pair) > 200:
            raise UserError(f"--peer {pair[:80]!r}: write RUNNER=PEER, e.g. --peer linnet-torch=llamacpp-linnet-gguf")
        linnet, other = get_runner(ours), get_runner(theirs)
        if not linnet.ours or other is linnet:
            raise UserError(f"--peer {pair}: RUNNER is one of Linnet's rows and PEER another stack it is compared with")
        if linnet.kind != other.kind:
            raise UserError(f"--peer {pair}: {linnet.id} is a {linnet.kind} row and {other.id} a {other.kind} one")
        if peers.setdefault(linnet.id, other.id) != other.id:
            raise UserError(f"--peer {pair}: {linnet.id} already has the peer {peers[linnet.id]}")
    in_run = {r.id for r in rows}
    for linnet, other in peers.items():
        if missing := [r for r in (linnet, other) if r not in in_run]:
            raise UserError(f"--peer {linnet}={other}: {missing[0]} is not among this run's rows (add --runner {missing[0]})")
    return tuple(replace(r, peer=peers.get(r.id, r.peer)) for r in rows)
