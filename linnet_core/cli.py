"""The `linnet` command line: `linnet compile` (an engine's artefacts) and `linnet export hf|gguf` (another engine's
format); linnet.serve adds `linnet serve`. A UserError is printed as one line with exit status 1; anything else is
a real traceback."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from linnet_core.errors import UserError
from linnet_core.targets import TARGETS, CompileOptions, compile_function

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Linnet: one decoder description, many engines.")
export_app = typer.Typer(no_args_is_help=True, help="Write a model in another engine's format.")
app.add_typer(export_app, name="export")
console = Console()


def resolve(model: str, weights: Optional[Path], seed: int = 0):
    """(registry entry, checkpoint directory): MODEL's synthetic weights, or a checked local directory."""
    from harness.registry import checkpoint_for, get_model

    entry = get_model(model)
    return entry, checkpoint_for(entry, weights, seed)[0]


@app.command("compile")
def compile_(
    model: str = typer.Argument(..., help="model id or alias (see `linnet-bench models`)"),
    target: str = typer.Option(..., help="what to emit: " + ", ".join(TARGETS)),
    out: Path = typer.Option(..., help="directory for the artefacts"),
    weights: Optional[Path] = typer.Option(None, help="a local Hugging Face checkpoint (default: synthetic weights)"),
    dtype: str = typer.Option("f32", help="f32, f16 or bf16"),
    max_positions: int = typer.Option(768, help="static KV cache positions"),
    rows: int = typer.Option(1, help="static KV cache rows (serving uses more)"),
) -> None:
    """Write MODEL's artefacts for one engine (generated source, serialized graphs) into OUT."""
    from linnet_core.graph import qwen2_decoder

    if dtype not in ("f32", "f16", "bf16"):
        raise UserError(f"unknown dtype {dtype!r}; use f32, f16 or bf16")
    write = compile_function(target)
    entry, ckpt = resolve(model, weights)
    files = write(qwen2_decoder(entry.config), ckpt, out, CompileOptions(dtype, max_positions, rows))
    for f in files:
        console.print(f"wrote {f}", soft_wrap=True, highlight=False)


MODEL_HELP = "model id or alias (see `linnet-bench models`); synthetic weights of its shape unless --weights"
WEIGHTS_HELP = "a local Hugging Face checkpoint directory of MODEL (default: synthetic weights)"


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
    console.print(f"wrote {path} in {time.perf_counter() - start:.1f} s: {files}", highlight=False, soft_wrap=True)


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

    if dtype not in gguf.DTYPES:  # before building synthetic weights
        raise UserError(f"unknown GGUF dtype {dtype!r}; use one of {', '.join(gguf.DTYPES)}")
    source = resolve(model, weights, seed)[1]
    start = time.perf_counter()
    path = gguf.export(source, out, dtype, name=model)
    size = path.stat().st_size / 2**20
    console.print(f"wrote {path} ({dtype}, {size:.1f} MiB) in {time.perf_counter() - start:.1f} s", highlight=False)


def main() -> None:
    """Click handles its own usage errors; a UserError becomes one line and exit status 1."""
    try:
        app()
    except UserError as e:
        console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
