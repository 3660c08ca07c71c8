"""The `linnet` command line: compile a model to an engine's artefacts (and, in their modules, export and serve).
A UserError is printed as one line with exit status 1; anything else is a real traceback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from linnet_core.errors import UserError
from linnet_core.targets import TARGETS, CompileOptions, compile_function

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Linnet: one decoder description, many engines.")
console = Console()


@app.callback()
def linnet() -> None:
    """Linnet: one decoder description, many engines."""


def resolve(model: str, weights: Optional[Path]):
    """(registry entry, checkpoint directory) for a model id and an optional local checkpoint."""
    from harness.registry import checkpoint_for, get_model

    entry = get_model(model)
    return entry, checkpoint_for(entry, weights)[0]


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
        console.print(f"wrote {f}")


def main() -> None:
    """Click handles its own usage errors; a UserError becomes one line and exit status 1."""
    try:
        app()
    except UserError as e:
        console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
