"""The `linnet` command line: `linnet compile` (an engine's artefacts) and `linnet export hf|gguf` (another engine's
format); linnet.serve adds `linnet serve`. A UserError is printed as one line with exit status 1; anything else is
a real traceback."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from linnet_core import devices, dtypes
from linnet_core.errors import UserError, literal, run_cli
from linnet_core.targets import TARGETS, CompileOptions, compile_function

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Linnet: one decoder description, many engines.")
export_app = typer.Typer(no_args_is_help=True, help="Write a model in another engine's format.")
app.add_typer(export_app, name="export")
console = Console()
MODEL_HELP = ("model id or alias (see `linnet-bench models`; synthetic weights of its shape unless --weights), or a "
              "local Hugging Face checkpoint directory")  # fmt: skip
WEIGHTS_HELP = "a local Hugging Face checkpoint directory of MODEL (default: synthetic weights)"


def resolve(model: str, weights: Optional[Path], seed: int = 0):
    """(model entry, checkpoint directory): MODEL's synthetic weights, a checked --weights directory, or MODEL
    itself when it is a local checkpoint directory."""
    from linnet_core.models import resolve as resolve_model

    return resolve_model(model, weights, seed)


def default_device() -> str:
    """cuda when NVML sees a GPU, else cpu."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return "cuda" if pynvml.nvmlDeviceGetCount() > 0 else "cpu"
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return "cpu"


@app.command("compile")
def compile_(
    model: str = typer.Argument(..., help=MODEL_HELP),
    target: str = typer.Option(..., help="what to emit: " + ", ".join(TARGETS)),
    out: Path = typer.Option(..., help="directory for the artefacts"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint (default: synthetic weights)"),
    dtype: str = typer.Option("f32", help="f32, f16 or bf16"),
    max_positions: int = typer.Option(768, help="static KV cache positions"),
    rows: int = typer.Option(1, help="static KV cache rows (serving uses more)"),
    quant: Optional[str] = typer.Option(None, help="weight-only quantization of the linear layers: int8 (targets torch, onnx)"),
    fused_attention: bool = typer.Option(False, "--fused-attention", help="onnx: attention as ONNX Runtime's "
                                         "GroupQueryAttention (its CPU provider; CUDA's in f16/bf16 only)"),
) -> None:
    """Write MODEL's artefacts for one engine (generated source, serialized graphs) into OUT."""
    from linnet_core.arch import build_decoder

    dtypes.check(dtype)
    check_quant(quant, target)
    if fused_attention and target != "onnx":
        raise UserError(f"--fused-attention is for the onnx target, not {target}")
    write = compile_function(target)
    entry, ckpt = resolve(model, weights)
    options = CompileOptions(dtype, max_positions, rows, quant, fused_attention)
    files = write(build_decoder(entry.config), ckpt, out, options)
    for f in files:
        console.print(f"wrote {literal(f, 4096)}", soft_wrap=True, highlight=False)




@export_app.command("hf")
def export_hf(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Argument(..., help="a new or empty directory to write the checkpoint into"),
    weights: Optional[Path] = typer.Option(None, help=WEIGHTS_HELP),
    seed: int = typer.Option(0, help="seed of synthetic weights"),
) -> None:
    """Write MODEL as a Hugging Face checkpoint (transformers, vLLM, SGLang, TGI)."""
    source = resolve(model, weights, seed)[1]
    from linnet_core import hf  # imports torch: after the checks that need none
    start = time.perf_counter()
    path = hf.export(source, out)
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    console.print(f"wrote {literal(path, 4096)} in {time.perf_counter() - start:.1f} s: {literal(files, 4096)}", highlight=False,
                  soft_wrap=True)  # fmt: skip


@export_app.command("gguf")
def export_gguf(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Argument(..., help="the GGUF file to write"),
    dtype: str = typer.Option("f32", help="how 2-D weights are stored: f32, f16, bf16 or q8_0"),
    weights: Optional[Path] = typer.Option(None, help=WEIGHTS_HELP),
    seed: int = typer.Option(0, help="seed of synthetic weights"),
) -> None:
    """Write MODEL as one GGUF file for llama.cpp."""
    from linnet_core import gguf

    from linnet_core.models import get_model

    if dtype not in gguf.DTYPES:  # before building synthetic weights
        raise UserError(f"unknown GGUF dtype {dtype!r}; use one of {', '.join(gguf.DTYPES)}")
    gguf.arch_of(get_model(model).config)  # an architecture without a GGUF export: one line, before any weights
    entry, source = resolve(model, weights, seed)
    start = time.perf_counter()
    path = gguf.export(source, out, dtype, name=entry.id)
    size = path.stat().st_size / 2**20
    console.print(f"wrote {literal(path, 4096)} ({dtype}, {size:.1f} MiB) in {time.perf_counter() - start:.1f} s", highlight=False)


@app.command("serve")
def serve(
    model: str = typer.Argument(..., help=MODEL_HELP),
    backend: str = typer.Option("torch", help="torch, xla or ort (or module:function)"),
    rows: int = typer.Option(64, help="S: cache rows, the most requests decoding at once"),
    positions: int = typer.Option(640, help="L: positions per row (a prompt plus its new tokens)"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    port: int = typer.Option(8000, help="port to listen on"),
    max_waiting: int = typer.Option(256, help="requests queued beyond the rows before a 503"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint (default: synthetic weights)"),
    dtype: str = typer.Option("f32", help="f32, f16 or bf16"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when NVML sees a GPU)"),
    mode: Optional[str] = typer.Option(None, help="the backend's variant, e.g. torch eager, inductor or cudagraphs"),
    api_key: Optional[str] = typer.Option(None, envvar="LINNET_API_KEY", show_envvar=True,
                                          help="require `Authorization: Bearer KEY` on every route but /health"),
    allow_unauthenticated: bool = typer.Option(False, "--allow-unauthenticated",
                                               help="serve beyond loopback without --api-key (anyone who can reach it)"),
    request_timeout: float = typer.Option(30.0, help="seconds a client may take to send a request's headers or body"),
    quant: Optional[str] = typer.Option(None, help="weight-only quantization of the linear layers: int8 (torch, ort)"),
) -> None:
    """Serve MODEL over an OpenAI-compatible HTTP API (POST /v1/completions, GET /v1/models, GET /health)."""
    from linnet_core.serve.guard import is_loopback
    from linnet_core.serve.server import ServerSettings, run_server

    if not is_loopback(host):
        if not api_key and not allow_unauthenticated:
            raise UserError(f"--host {host} serves beyond this machine: give --api-key KEY (or set LINNET_API_KEY), "
                            "or --allow-unauthenticated to serve anyone who can reach it")  # fmt: skip
        console.print(f"[yellow]warning:[/] listening on {literal(host)}, beyond loopback: other machines can reach this server"
                      + ("" if api_key else ", and without an API key anyone of them can use it"), highlight=False)  # fmt: skip
    if not (math.isfinite(request_timeout) and request_timeout > 0):
        raise UserError(f"--request-timeout {request_timeout}: give a number of seconds above 0")
    check_dtype_device(dtype, device)
    check_quant(quant, backend)
    entry, ckpt = resolve(model, weights)
    settings = ServerSettings(entry.id, ckpt, backend, rows, positions, max_waiting, dtype,
                              device or default_device(), mode, host, port, api_key or None, request_timeout,
                              quant)  # fmt: skip
    run_server(settings, on_ready=lambda line: console.print(literal(line, 4096), highlight=False, soft_wrap=True))


@export_app.command("triton")
def export_triton(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Argument(..., help="the model repository directory to write"),
    backend: str = typer.Option("torch", help="the linnet.serve backend the Triton model runs: torch, xla or ort"),
    rows: int = typer.Option(64, help="S: cache rows"),
    positions: int = typer.Option(640, help="L: positions per row"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint (default: synthetic weights)"),
    dtype: str = typer.Option("f32", help="f32, f16 or bf16"),
    device: str = typer.Option("cuda", help="where the Triton model runs: cuda or cpu"),
) -> None:
    """Write a Triton Inference Server model repository whose Python-backend model runs linnet.serve (streaming)."""
    from linnet_core.serve.triton import TritonExport, write_repository

    check_dtype_device(dtype, device)
    entry, ckpt = resolve(model, weights)
    for f in write_repository(TritonExport(entry.id, ckpt, out, backend, rows, positions, dtype, device)):
        console.print(f"wrote {literal(f, 4096)}", highlight=False, soft_wrap=True)


def check_dtype_device(dtype: str, device: Optional[str]) -> None:
    dtypes.check(dtype)
    if device is not None:
        devices.check(device)


def check_quant(quant: Optional[str], where: str) -> None:
    """A one-line error for an unknown quantization, or for a compile target or serve backend without it."""
    from linnet_core import quant as quantization

    if quant is None:
        return
    quantization.check_quant(quant)
    if where in ("jax", "stablehlo", "xla"):
        raise UserError(f"--quant {quant}: {where} has no quantized weights; use target torch or onnx (compile), "
                        "backend torch or ort (serve)")


def main() -> None:
    run_cli(app, console)


if __name__ == "__main__":
    main()
