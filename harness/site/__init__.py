"""The site renderer: result files in, a static website out, readable offline from the file system.

    OUT/index.html                  every model, the latest run per machine, headline figures
    OUT/models/<model>.html         the model page (see pages.py)
    OUT/data/<model>/<run-id>.json  the raw result files, linked for download
    OUT/assets/                     style.css, site.js and plotly.min.js (copied from the plotly package: no CDN)

The results are loaded once into one context (context.py), turned into page objects (pages.py), and rendered by
jinja2 templates from site_templates/ that only place what the page objects hold."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2
import plotly.offline

from harness.site.context import load_context
from harness.site.pages import data_file, index_entry, model_page

TEMPLATES = Path(__file__).resolve().parents[2] / "site_templates"


def build_site(results_dir: Path, out_dir: Path) -> list[Path]:
    """Renders every model with results; returns the pages written, the index first."""
    context = load_context(results_dir)
    out = Path(out_dir)
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
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def copy_assets(assets: Path) -> None:
    assets.mkdir(parents=True, exist_ok=True)
    for source in (TEMPLATES / "assets").iterdir():
        copy_file(source, assets / source.name)
    (assets / "plotly.min.js").write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")


def copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
