"""The site renderer: result files in, a static website out, readable offline from the file system.

    OUT/index.html                  every model, the latest run per machine, headline figures
    OUT/models/<model>.html         the model page (see pages.py)
    OUT/data/<model>/<run-id>.json  the raw result files, linked for download
    OUT/assets/                     style.css, site.js and plotly.min.js (copied from the plotly package: no CDN)

The results are loaded once into one context (context.py), turned into page objects (pages.py), and rendered by
jinja2 templates from harness/site/templates/ (package data: an installed copy renders as a clone does) that only place what the page objects hold. The site is rendered into a
temporary directory beside OUT and swapped in whole: a failure mid-render leaves the previous site as it was."""

from __future__ import annotations

import importlib.resources
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import jinja2
import plotly.offline

from harness.site.context import load_context
from harness.site.pages import data_file, index_entry, model_page
from linnet_core.errors import UserError

TEMPLATES = importlib.resources.files("harness.site") / "templates"  # package data, read as such


def build_site(results_dir: Path, out_dir: Path, warn: Callable[[str], None] = lambda message: None) -> list[Path]:
    """Renders every model with results; returns the pages written, the index first. Files that cannot be shown
    are skipped and told to `warn`, one line each."""
    context = load_context(results_dir, warn)
    out = Path(out_dir)
    check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.rendering-"))
    try:
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a website is for everyone to read
        pages = render(context, staging)
        swap(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / page.relative_to(staging) for page in pages]


def check_replaceable(out: Path) -> None:
    """OUT is replaced whole: only when it is new, empty, or a site (index.html and assets/), never a user's files."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"--out {out}: not a directory; give a directory for the website")
    if out.is_dir() and any(out.iterdir()) and not ((out / "index.html").is_file() and (out / "assets").is_dir()):
        raise UserError(f"--out {out}: not a site rendered here (no index.html and assets/), and it would be replaced "
                        "whole; give a new or empty directory")  # fmt: skip


def swap(staging: Path, out: Path) -> None:
    """Puts the rendered site in OUT's place; the old one is moved aside first and removed after."""
    if not out.exists():
        os.rename(staging, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.rename(out, old / out.name)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(old / out.name, out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def render(context, out: Path) -> list[Path]:
    env = environment()
    copy_assets(out / "assets")
    written, entries = [], []
    for model in context.models:
        for run in model.runs:
            copy_file(run.path, out / data_file(run))
        page = model_page(model)
        written.append(write(out / page.file, env.get_template("model.html.j2").render(page=page, root="../")))
        entries.append(index_entry(model, page))
    index = write(out / "index.html", env.get_template("index.html.j2").render(entries=entries, root=""))
    return [index, *written]


def environment() -> jinja2.Environment:
    """Templates escape everything they print: result files may hold any text."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("harness.site", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def copy_assets(assets: Path) -> None:
    assets.mkdir(parents=True, exist_ok=True)
    for source in (TEMPLATES / "assets").iterdir():
        (assets / source.name).write_bytes(source.read_bytes())
    (assets / "plotly.min.js").write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")


def copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
