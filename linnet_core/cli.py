"""The `linnet` command line: `linnet export hf|gguf` (and, in their own functions, Linnet's other commands).
A UserError is printed as one line with exit status 1; anything else is a real traceback."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from linnet_core.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Linnet: one decoder description, many engines.")
export_app = typer.Typer(no_args_is_help=True, help="Write a model in another engine's format.")
app.add_typer(export_app, name="export")
console = Console()

MODEL_HELP = "model id or alias (see `linnet-bench models`); synthetic weights of its shape unless --weights"
WEIGHTS_HELP = "a local Hugging Face checkpoint directory of MODEL (default: synthetic weights)"


def source_checkpoint(model: str, weights: Optional[Path], seed: int) -> Path:
    """The checkpoint directory an export reads: MODEL's synthetic weights, or a checked local directory."""
    from harness.bench import model_checkpoint
    from harness.registry import get_model

    return model_checkpoint(get_model(model), weights, seed)[0]


@export_app.command("hf")
def export_hf(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Argument(..., help="a new or empty directory to write the checkpoint into"),
    weights: Optional[Path] = typer.Option(None, help=WEIGHTS_HELP),
    seed: int = typer.Option(0, help="seed of synthetic weights"),
) -> None:
    """Write MODEL as a Hugging Face checkpoint (transformers, vLLM, SGLang, TGI)."""
    source = source_checkpoint(model, weights, seed)
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
    source = source_checkpoint(model, weights, seed)
    start = time.perf_counter()
    path = gguf.export(source, out, dtype, name=model)
    size = path.stat().st_size / 2**20
    console.print(f"wrote {path} ({dtype}, {size:.1f} MiB) in {time.perf_counter() - start:.1f} s", highlight=False)


def main() -> None:
    try:
        app(standalone_mode=False)
    except UserError as e:
        console.print(f"[red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(130)
    except Exception as e:  # click's usage errors (bad option, missing argument) are user errors too
        import click

        # typer >= 0.29 raises its own copy of click's exceptions (subclasses of TyperException)
        if isinstance(e, (click.ClickException, typer.TyperException)) and hasattr(e, "show"):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
