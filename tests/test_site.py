"""The site renderer: the published page rebuilt from a result file that transcribes it, comparisons computed by the
renderer, escaping, the parts beyond the published page, and the generated pages in a real browser (Chromium)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.results import ResultFile, Row, load_result, write_result
from harness.site import build_site, numbers
from linnet_core.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
PUBLISHED = FIXTURES / "published_h100.json"  # the published page's numbers as a result file
# The published page's text, as in shared/seed/ (a copy, so the test runs wherever the repository is cloned).
PAGE = (FIXTURES / "published_page.txt").read_text().splitlines()
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


# ----- a small HTML reader: the text of elements, flattened as the published page's text is -----


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def find_all(self, tag, cls=None):
        for child in self.children:
            if isinstance(child, Node):
                if child.tag == tag and (cls is None or cls in child.classes):
                    yield child
                yield from child.find_all(tag, cls)

    def flat(self) -> str:
        """The text with each text node stripped and joined with nothing; columns beyond the published page
        (class "extra") and the one-line summaries of folded notes (they repeat the notes' start) left out: how the
        seed page's text reads ("transformers12.4 ms93.2 tok/s")."""
        parts = []
        for child in self.children:
            if isinstance(child, Node):
                if "extra" not in child.classes and child.tag != "summary":
                    parts.append(child.flat())
            else:
                parts.append(child.strip())
        return "".join(parts)

    def text(self) -> str:
        """The text with runs of whitespace made single spaces."""
        parts = [c.text() if isinstance(c, Node) else c for c in self.children]
        return re.sub(r"\s+", " ", " ".join(parts)).strip()


class Tree(HTMLParser):
    VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "source", "wbr"})

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#root", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.at)
        self.at.children.append(node)
        if tag not in self.VOID:
            self.at = node

    def handle_endtag(self, tag):
        node = self.at
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.at = node.parent

    def handle_data(self, data):
        self.at.children.append(data)


def page_section(start: str, end: str | None) -> list[str]:
    """The published page's non-empty lines from the first starting with `start` up to the first after it starting
    with `end` (excluded), or to the end of the page."""
    first = next(i for i, line in enumerate(PAGE) if line.startswith(start))
    last = next((i for i, line in enumerate(PAGE) if i > first and line.startswith(end)), None) if end else None
    return [line for line in PAGE[first:last] if line.strip()]


def render(tmp_path: Path, *results: ResultFile | Path) -> Path:
    """Writes the results under tmp_path/results and renders tmp_path/site; returns the site directory."""
    for r in results:
        if isinstance(r, Path):
            r = load_result(r)
        write_result(r, tmp_path / "results" / r.model / f"{r.run_id}.json")
    build_site(tmp_path / "results", tmp_path / "site")
    return tmp_path / "site"


def model_tree(site: Path, model: str = "qwen2.5-0.5b-instruct") -> Tree:
    return Tree((site / "models" / f"{model}.html").read_text())


def figures(tree: Tree) -> dict[str, dict]:
    """Chart title -> the plotly figure the page hands to the browser."""
    out = {}
    for block in tree.root.find_all("section", "chart-block"):
        title = next(block.find_all("h3")).text()
        script = next(block.find_all("script"))
        out[title] = json.loads("".join(c for c in script.children if isinstance(c, str)))
    return out


def published() -> ResultFile:
    return load_result(PUBLISHED)


@pytest.fixture(scope="module")
def published_tree(tmp_path_factory) -> Tree:
    """The published fixture's model page, rendered once for the tests that only read it."""
    return model_tree(render(tmp_path_factory.mktemp("published"), PUBLISHED))


# ----- the published page, rebuilt -----


def test_the_page_has_the_published_header_machine_and_versions(published_tree):
    tree = published_tree
    text = tree.root.text()
    assert next(tree.root.find_all("nav", "breadcrumb")).text() == "Models / qwen2.5-0.5b-instruct"
    assert next(tree.root.find_all("h1")).text() == "Qwen2.5 0.5B Instruct"
    assert PAGE[5] in text  # the one-line description
    facts = [li.text() for li in next(tree.root.find_all("ul", "facts")).find_all("li")]
    # The registry counts 494.0M parameters (the published page says 494.5M): the count is the registry's, not ours.
    assert facts[0].endswith("M parameters")
    assert "".join(facts[1:]) == PAGE[7].split("parameters", 1)[1]
    assert [a.text() for a in next(tree.root.find_all("ul", "links")).find_all("a")] == [
        "Hugging Face",
        "GitHub",
        "arXiv",
        "Registry entry",
    ]
    assert next(tree.root.find_all("p", "machine-line")).text() == PAGE[10]
    assert next(tree.root.find_all("p", "versions")).text() == PAGE[12]
    assert "synthetic weights" not in text  # the transcription names a checkpoint directory


def test_every_number_label_and_note_of_the_published_table_appears_in_order(published_tree):
    tree = published_tree
    table = next(tree.root.find_all("table", "numbers"))
    rendered = [tr.flat() for tr in table.find_all("tr")]
    assert rendered == page_section("MethodTime to first token", None)


def test_the_headline_cards_read_as_published(published_tree):
    tree = published_tree
    cards = [card.flat() for card in tree.root.find_all("article", "card")]
    lines = page_section("vs vLLM, one request", "Each row also carries its distance from reference")
    expected = [title + bars.strip().removeprefix("• ") for title, bars in zip(lines[::2], lines[1::2])]
    assert len(expected) == 7 and cards == expected


@pytest.mark.parametrize(
    "title", ["Time to first token", "Decode speed", "Serving throughput", "Serving time to first token", "Load time"]
)
def test_each_chart_draws_the_published_bars(published_tree, title):
    tree = published_tree
    figure = figures(tree)[title]
    at = PAGE.index(title)
    assert f"{title} {PAGE[at + 2]}" in tree.root.text()  # "ms, lower is better; the best bar is red."
    bar = figure["data"][0]
    labels = [html.unescape(label).replace("\u200b", "") for label in bar["y"][1]]
    drawn = "".join(label + html.unescape(text) for label, text in zip(labels, bar["text"]))
    assert drawn in PAGE[at + 4], (drawn, PAGE[at + 4])
    groups = list(dict.fromkeys(bar["y"][0]))
    assert PAGE[at + 4].startswith("".join(groups))  # the sections, in page order
    best = [label for label, color in zip(labels, bar["marker"]["color"]) if color == "#d1342f"]
    values = dict(zip(labels, bar["x"]))
    pick = max if "higher" in PAGE[at + 2] else min
    assert len(best) == 1 and values[best[0]] == pick(values.values())


def test_memory_rows_whose_figure_is_a_setting_are_listed_not_drawn(published_tree):
    tree = published_tree
    figure = figures(tree)["Peak GPU memory"]
    at = PAGE.index("Peak GPU memory")
    head, names = PAGE[at + 2].split(" Not drawn, since theirs is a setting rather than a need: ")
    text = tree.root.text()
    assert f"Peak GPU memory {head}" in text
    listed = re.search(r"Not drawn, since theirs is a setting rather than a need: (.*) \(in the table\)\.", text)
    # "transformers, batched" holds a comma: split on the names the published page lists
    published_names = sorted(
        re.findall(r"vLLM on Linnet's export|Triton, vLLM backend|transformers, batched|vLLM", names)
    )
    assert (
        sorted(re.findall(r"vLLM on Linnet's export|Triton, vLLM backend|transformers, batched|vLLM", listed[1]))
        == published_names
    )
    bar = figure["data"][0]
    labels = [html.unescape(label).replace("\u200b", "") for label in bar["y"][1]]
    drawn = "".join(label + html.unescape(text) for label, text in zip(labels, bar["text"]))
    assert drawn in PAGE[at + 4]
    assert "vLLM" not in labels and "Triton, vLLM backend" not in labels  # the last one by field, not by note


def test_the_comparisons_are_the_renderers_arithmetic(tmp_path):
    """Move vLLM's decode speed: the cards and the table's column follow; drop KerasHub: its card is left out."""
    result = published()
    vllm = next(r for r in result.rows if r.runner == "vllm")
    vllm.metrics["decode_tok_s"] = 527.5  # 1055 / 527.5 = 2.00; 510 / 527.5 = 0.967
    result.rows = [r for r in result.rows if r.runner != "kerashub"]
    tree = model_tree(render(tmp_path, result))
    cards = {
        next(c.find_all("h3")).text(): next(c.find_all("strong")).text() for c in tree.root.find_all("article", "card")
    }
    assert cards["vs vLLM, one request"] == "2.00× faster"
    assert cards["exported to vLLM, SGLang, TGI"] == "−3.3% slower"
    assert "vs KerasHub, in JAX" not in cards
    assert "Not shown, since their rows were not measured in this run: vs KerasHub, in JAX." in tree.root.text()
    rows = {tr.flat().split("ms")[0]: tr.flat() for tr in next(tree.root.find_all("table", "numbers")).find_all("tr")}
    assert "−3.3% from vLLM" in rows["vLLM on Linnet's export12.2 "]


def test_ratio_and_number_formatting():
    assert [numbers.figure(v) for v in (12.4, 7.03, 10.0, 0.8, 0.83, 93.2, 188.8, 1055, 34643, 99.96, 0.0042)] == [
        "12.4", "7.03", "10.0", "0.80", "0.83", "93.2", "189", "1,055", "34,643", "100", "0.0042"]  # fmt: skip
    assert numbers.with_unit(1.87, "GiB") == "1.87 GiB" and numbers.with_unit(None, "ms") == "–"
    assert [numbers.times(r) for r in (1055 / 707, 908.4 / 188.8, 24211 / 2157, 108 / 188.8)] == [
        "1.49×",
        "4.81×",
        "11×",
        "0.57×",
    ]
    assert [numbers.change(r) for r in (510 / 707, 26248 / 18828)] == ["−27.9%", "+39.4%"]
    assert numbers.distance(0.25) == "0.25" and numbers.distance(None) == "not compared"


# ----- result files are data, never markup -----


def hostile() -> ResultFile:
    result = tiny_run("20261202T100000Z", decode=100.0)
    row = result.rows[1]
    row.label = "<b>bold</b> & co"
    row.notes = ['<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">']
    result.rows.append(Row(runner="linnet-torch", label="Linnet, generated PyTorch", group="PyTorch", status="failed",
                           reason="Traceback (most recent call last):\n  <script>window.pwned = 3</script>\n"
                                  "ValueError: boom"))  # fmt: skip
    return result


def test_text_from_result_files_is_escaped(tmp_path):
    site = render(tmp_path, hostile())
    page = (site / "models" / "qwen2-tiny.html").read_text()
    assert "<script>window.pwned" not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    text = Tree(page).root.text()
    assert '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">' in text  # shown as text
    assert "<b>bold</b> & co" in text


# ----- beyond the published page -----


def tiny_run(run_id: str, decode: float, created_at: str | None = None) -> ResultFile:
    """A qwen2-tiny run on a CPU with spreads, as the harness writes one."""
    machine = {"cpu": "AMD EPYC", "cpu_cores": 2, "versions": {"python": "3.11.7", "torch": "2.13.0+cpu"}}

    def metrics(scale):  # fmt: skip
        return {"ttft_ms": 30.9 * scale, "ttft_ms_min": 20.6 * scale, "ttft_ms_max": 41.1 * scale,
                "decode_tok_s": decode / scale, "decode_tok_s_min": decode / scale * 0.9,
                "decode_tok_s_max": decode / scale * 1.1, "load_s": 4.06, "first_call_s": 0.25 * scale, "runs": 2,
                "peak_mem_gib": 0.39 * scale, "mem_kind": "host"}  # fmt: skip

    return ResultFile(
        schema_version=1, model="qwen2-tiny", run_id=run_id,
        created_at=created_at or f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:00+00:00",
        machine=machine, workload={"prompt_tokens": 32, "new_tokens": 8, "batch": 1, "warmups": 1, "runs": 2},
        protocol={"profile": "quick", "dtype": "f32", "device": "cpu"}, weights="synthetic",
        rows=[
            Row(runner="transformers", label="transformers", group="PyTorch", status="ok", distance=0.0,
                metrics=metrics(1)),
            Row(runner="transformers-compiled", label="transformers, compiled", group="PyTorch", status="ok",
                distance=1.6e-5, notes=["static cache of 256 positions"], metrics=metrics(0.5)),
            Row(runner="linnet-jax", label="Linnet, XLA (generated JAX)", group="JAX", status="skipped",
                peer="kerashub", reason="jax is not installed"),
        ],
    )  # fmt: skip


def test_a_cpu_run_says_synthetic_weights_host_memory_and_what_was_not_measured(tmp_path):
    tree = model_tree(render(tmp_path, tiny_run("20261202T100000Z", decode=100.0)), "qwen2-tiny")
    text = tree.root.text()
    assert "synthetic weights" in next(tree.root.find_all("p", "setup")).text()
    assert "Peak host memory" in figures(tree) and "Peak GPU memory" not in text
    assert "Linnet, XLA (generated JAX) JAX skipped : jax is not installed" in text
    assert "No row measured serving throughput, serving time to first token." in text
    assert "Not shown, since their rows were not measured in this run: vs vLLM, one request; " in text
    assert not list(tree.root.find_all("article", "card"))


def test_hover_shows_the_spread_and_runs_and_load_shows_first_call(tmp_path):
    figs = figures(model_tree(render(tmp_path, tiny_run("20261202T100000Z", decode=100.0)), "qwen2-tiny"))
    ttft = figs["Time to first token"]["data"][0]["hovertext"][0]
    assert "30.9 ms, median of 2 runs" in ttft and "min–max 20.6–41.1 ms" in ttft
    assert "first call 0.25 s" in figs["Load time"]["data"][0]["hovertext"][0]
    header = [
        th.text()
        for th in next(model_tree(tmp_path / "site", "qwen2-tiny").root.find_all("table", "numbers")).find_all("th")
    ]
    assert header.index("First call") == header.index("Load time") + 1


def test_raw_files_are_copied_and_linked_and_several_runs_draw_a_history(tmp_path):
    old, new = tiny_run("20261201T100000Z", decode=80.0), tiny_run("20261202T100000Z", decode=100.0)
    site = render(tmp_path, new, old)
    tree = model_tree(site, "qwen2-tiny")
    links = [a.attrs["href"] for a in tree.root.find_all("a") if "download" in a.attrs]
    targets = {(site / "models" / href).resolve() for href in links}
    assert targets == {(site / "data" / "qwen2-tiny" / f"{r.run_id}.json").resolve() for r in (old, new)}
    assert all(load_result(t).run_id in ("20261201T100000Z", "20261202T100000Z") for t in targets)
    assert "runs of this setup" in tree.root.text()
    history = figures(tree)["Decode speed over the runs"]["data"]
    compiled = next(s for s in history if s["name"] == "transformers, compiled")
    assert compiled["y"] == [160.0, 200.0]  # decode / 0.5 on the two dates, oldest first
    assert next(tree.root.find_all("p", "machine-line")).text().endswith("measured 2026-12-02T10:00:00+00:00")


def test_runs_of_another_dtype_on_the_same_machine_get_their_own_section_and_history(tmp_path):
    f32_old, f32_new = tiny_run("20261201T100000Z", decode=80.0), tiny_run("20261202T100000Z", decode=100.0)
    bf16 = tiny_run("20261203T100000Z", decode=50.0)
    bf16.protocol = {**bf16.protocol, "dtype": "bf16"}
    tree = model_tree(render(tmp_path, f32_old, bf16, f32_new), "qwen2-tiny")
    sections = {next(s.find_all("h2")).text(): s for s in tree.root.find_all("section", "run")}
    assert list(sections) == ["On AMD EPYC, 2 cores · bf16 · quick profile", "On AMD EPYC, 2 cores · f32 · quick profile"]
    f32 = sections["On AMD EPYC, 2 cores · f32 · quick profile"]
    assert next(f32.find_all("p", "machine-line")).text().endswith("measured 2026-12-02T10:00:00+00:00")  # its own latest
    history = figures(tree)["Decode speed over the runs"]["data"]  # only the f32 setup has two runs
    assert next(s for s in history if s["name"] == "transformers, compiled")["y"] == [160.0, 200.0]


def test_the_index_lists_every_model_with_its_latest_run(tmp_path):
    site = render(
        tmp_path, PUBLISHED, tiny_run("20261201T100000Z", decode=80.0), tiny_run("20261202T100000Z", decode=100.0)
    )
    index = Tree((site / "index.html").read_text()).root
    entries = {next(e.find_all("h2")).text(): e.text() for e in index.find_all("article", "model-entry")}
    assert set(entries) == {"Qwen2.5 0.5B Instruct qwen2.5-0.5b-instruct", "Qwen2 tiny qwen2-tiny"}
    big = entries["Qwen2.5 0.5B Instruct qwen2.5-0.5b-instruct"]
    assert "NVIDIA H100 80GB HBM3" in big and "fastest decode: 1,055 tok/s Linnet, XLA (generated JAX)" in big
    assert "vs vLLM, behind Triton: 11× faster" in big
    tiny = entries["Qwen2 tiny qwen2-tiny"]
    assert "Architecture: Qwen2ForCausalLM" in big and "Architecture: Qwen2ForCausalLM" in tiny
    assert "2026-12-02 10:00 UTC" in tiny and "2026-12-01" not in tiny  # the latest run only
    assert "fastest decode: 200 tok/s transformers, compiled" in tiny
    hrefs = [a.attrs["href"] for a in index.find_all("a")]
    assert "models/qwen2-tiny.html#setup-amd-epyc-2-cores-f32-quick-profile" in hrefs  # its setup, wherever it is


def test_a_model_the_registry_no_longer_knows_still_gets_its_page(tmp_path):
    result = tiny_run("20261202T100000Z", decode=100.0)
    result.model = "retired-model"
    tree = model_tree(render(tmp_path, result), "retired-model")
    assert next(tree.root.find_all("h1")).text() == "retired-model"
    assert "registry does not know" in tree.root.text() and "Registry entry" not in tree.root.text()
    assert len(figures(tree)) == 4


def test_the_cli_renders_and_refuses_a_missing_directory_in_one_line(tmp_path):
    write_result(published(), tmp_path / "results" / "qwen2.5-0.5b-instruct" / "r.json")
    cli = [
        sys.executable,
        "-m",
        "harness.cli",
        "site",
        "--results",
        str(tmp_path / "results"),
        "--out",
        str(tmp_path / "out"),
    ]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "models" / "qwen2.5-0.5b-instruct.html").exists()
    assert (tmp_path / "out" / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    cli[cli.index("--results") + 1] = str(tmp_path / "nowhere")
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert (
        done.returncode == 1
        and len(done.stdout.strip().splitlines()) == 1
        and "no such results directory" in done.stdout
    )
    (tmp_path / "results" / "qwen2.5-0.5b-instruct" / "bad.json").write_text('{"schema_version": 1}')
    cli[cli.index("--results") + 1] = str(tmp_path / "results")
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    warning = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "bad.json" in warning[0] and "malformed result file" in warning[0], done.stdout


def test_a_model_id_that_is_not_a_plain_name_is_skipped(tmp_path):
    result = tiny_run("20261202T100000Z", decode=100.0)
    result.model = "../../outside"
    (tmp_path / "results" / "qwen2-tiny").mkdir(parents=True)
    (tmp_path / "results" / "qwen2-tiny" / "r.json").write_text(result.model_dump_json())  # write_result refuses it
    warnings = []
    build_site(tmp_path / "results", tmp_path / "site", warnings.append)
    assert len(warnings) == 1 and "r.json" in warnings[0] and "not a model id" in warnings[0]
    assert not (tmp_path / "outside.html").exists() and not (tmp_path / "site" / "models").exists()


# ----- broken and hostile result files -----

BAD_FILES = {
    "empty.json": "",
    "not-json.json": "{not json",
    "version.json": '{"schema_version": 999, "model": "qwen2-tiny"}',
    "missing.json": '{"schema_version": 1, "model": "qwen2-tiny"}',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "digits.json": '{"schema_version": 1, "x": ' + "9" * 5000 + "}",
    "null.json": "null",
}


def test_bad_files_are_skipped_with_a_warning_naming_them_and_the_rest_renders(tmp_path):
    write_result(tiny_run("20261202T100000Z", decode=100.0), tmp_path / "results" / "qwen2-tiny" / "good.json")
    for name, text in BAD_FILES.items():
        (tmp_path / "results" / "qwen2-tiny" / name).write_text(text)
    (tmp_path / "results" / "qwen2-tiny" / "folder.json").mkdir()
    long = tiny_run("20261202T100000Z", decode=100.0)
    long.model = "m" * 300
    (tmp_path / "results" / "long").mkdir()
    (tmp_path / "results" / "long" / "long-model.json").write_text(long.model_dump_json())  # write_result refuses it
    warnings = []
    build_site(tmp_path / "results", tmp_path / "site", warnings.append)
    for name in [*BAD_FILES, "folder.json", "long-model.json"]:
        assert sum(name in w for w in warnings) == 1, (name, warnings)
    assert all("\n" not in w and len(w) < 500 for w in warnings), warnings
    assert "100 tok/s" in (tmp_path / "site" / "models" / "qwen2-tiny.html").read_text()
    assert [p.name for p in (tmp_path / "site" / "models").iterdir()] == ["qwen2-tiny.html"]


def hostile_text(result: ResultFile, change) -> str:
    """The result file's text after `change(data)`; json.dumps writes NaN and Infinity as JavaScript does."""
    data = json.loads(result.model_dump_json())
    change(data)
    return json.dumps(data)


def fastest(**fields):
    def change(data):
        row = data["rows"][1]  # transformers, compiled: the fastest row
        for key, value in fields.items():
            if key in ("distance", "reason", "status"):
                row[key] = value
            else:
                row["metrics"][key] = value

    return change


def machine(**fields):
    return lambda data: data["machine"].update(fields)


HOSTILE = {
    "NaN decode": (fastest(decode_tok_s=float("nan")), None),
    "Infinity decode": (fastest(decode_tok_s=float("inf")), None),
    "1e400 decode": (fastest(decode_tok_s="@1e400"), None),
    "-Infinity TTFT": (fastest(ttft_ms=float("-inf")), None),
    "string decode": (fastest(decode_tok_s="fast"), None),
    "list decode": (fastest(decode_tok_s=[1, 2]), None),
    "null decode": (fastest(decode_tok_s=None), None),
    "zero decode": (fastest(decode_tok_s=0), None),
    "dict memory": (fastest(peak_mem_gib={"a": 1}), None),
    "huge spread": (fastest(decode_tok_s_max="@" + "9" * 400), None),
    "NaN distance": (fastest(distance=float("nan")), None),
    "mem_kind a number": (fastest(mem_kind=5), None),
    "versions a string": (machine(versions="torch 2"), None),
    "versions null": (machine(versions=None), None),
    "versions a list": (machine(versions=[1, 2]), None),
    "git_commit a list": (machine(git_commit=["<b>x</b>"]), None),
    "decode interval reversed": (fastest(decode_tok_s_ci=[300.0, 100.0], trials=3), None),
    "cpu a list": (machine(cpu=["a", "b"], cpu_cores="many"), "machine.cpu is a list"),
    "whitespace reason": (fastest(status="failed", reason="   \n\t  "), None),
    "empty reason": (fastest(status="skipped", reason=""), None),
    "workload runs a string": (lambda data: data["workload"].update(runs="ten", warmups=None), "workload.runs is a str"),
    "protocol dtype a list": (lambda data: data["protocol"].update(dtype=["f32"]), "protocol.dtype is a list"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_figures_and_fields_render_and_never_become_a_headline(tmp_path, name):
    change, skipped = HOSTILE[name]  # skipped: the file cannot be read as a result (a warning says why)
    text = hostile_text(tiny_run("20261202T100000Z", decode=100.0), change)
    text = re.sub(r'"@([0-9e.]+)"', r"\1", text)  # numbers json.dumps cannot write: 1e400, 400 digits
    (tmp_path / "results" / "qwen2-tiny").mkdir(parents=True)
    (tmp_path / "results" / "qwen2-tiny" / "r.json").write_text(text)
    warnings = []
    build_site(tmp_path / "results", tmp_path / "site", warnings.append)
    index = Tree((tmp_path / "site" / "index.html").read_text()).root.text()
    if skipped:
        assert len(warnings) == 1 and "r.json" in warnings[0] and skipped in warnings[0], warnings
        assert not (tmp_path / "site" / "models").exists()
        return
    page = Tree((tmp_path / "site" / "models" / "qwen2-tiny.html").read_text()).root.text()
    for shown in (index, page):
        assert not re.search(r"\b(nan|inf|infinity)\b", shown, re.IGNORECASE), name
    assert "fastest decode" in index and "fastest decode: 1" not in index.replace("fastest decode: 100 tok/s", "")
    assert all("r.json" in w for w in warnings)


def test_non_finite_numbers_are_written_as_a_dash():
    for value in (float("nan"), float("inf"), float("-inf")):
        assert numbers.figure(value) == numbers.with_unit(value, "ms") == numbers.DASH
        assert numbers.distance(value) == numbers.DASH


def test_the_output_is_replaced_atomically_and_a_failed_render_leaves_the_old_site(tmp_path, monkeypatch):
    site = render(tmp_path, tiny_run("20261202T100000Z", decode=100.0))
    before = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    write_result(tiny_run("20261203T100000Z", decode=300.0), tmp_path / "results" / "qwen2-tiny" / "new.json")

    import harness.site as site_module

    def broken(*args, **kwargs):
        raise RuntimeError("planted failure mid-render")

    monkeypatch.setattr(site_module, "index_entry", broken)
    with pytest.raises(RuntimeError, match="planted"):
        build_site(tmp_path / "results", site)
    after = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "site"]  # no temporary directory left

    monkeypatch.undo()
    build_site(tmp_path / "results", site)
    assert "fastest decode: 600 tok/s" in Tree((site / "index.html").read_text()).root.text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "site"]


def test_an_out_directory_that_is_not_a_site_is_not_replaced(tmp_path):
    write_result(tiny_run("20261202T100000Z", decode=100.0), tmp_path / "results" / "qwen2-tiny" / "r.json")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a site"):
        build_site(tmp_path / "results", tmp_path / "home")
    assert (tmp_path / "home" / "notes.txt").read_text() == "mine"


# ----- in a real browser -----

# The inner tick labels of a two-level axis, top to bottom, zero-width spaces removed.
TICKS_TOP_DOWN = """id => Array.from(document.getElementById(id).querySelectorAll('.ytick text'))
    .map(t => [t.getBoundingClientRect().y, t.textContent.replace(/\u200b/g, '')])
    .sort((a, b) => a[0] - b[0]).map(pair => pair[1])"""


def visit(browser, path: Path):
    """Opens a page from disk; returns it with the console errors and the URLs it requests, as they come."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def each_setup_opened(page):
    """Shows each setup of a model page in turn (through its link), opens everything folded in it, and yields its
    section once its charts are drawn (they draw as they show)."""
    for anchor in page.eval_on_selector_all("section.run", "sections => sections.map(s => s.id)"):
        page.evaluate("anchor => { location.hash = anchor; }", anchor)
        page.wait_for_function("anchor => !document.getElementById(anchor).hidden", arg=anchor)
        section = page.locator(f"#{anchor}")
        section.evaluate("s => s.querySelectorAll('details').forEach(d => { d.open = true; })")
        for chart in section.locator("div.chart").all():
            chart.locator("svg.main-svg").first.wait_for(timeout=10_000)
        yield section


def cells_overflowing(page) -> list[str]:
    """The table cells of the page whose content is wider than the cell, and the tables wider than their frame."""
    return page.evaluate("""() => [
        ...Array.from(document.querySelectorAll('td, th')).filter(c => c.offsetParent !== null && c.scrollWidth > c.clientWidth + 1)
            .map(c => 'cell: ' + c.textContent.trim().slice(0, 60)),
        ...Array.from(document.querySelectorAll('div.table-wrap')).filter(w => w.offsetParent !== null && w.scrollWidth > w.clientWidth + 1)
            .map(w => 'table ' + w.scrollWidth + ' px wide in ' + w.clientWidth)]""")


def chromium(p):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package) before the tests")
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def test_the_pages_draw_every_chart_offline_in_chromium(tmp_path):
    """Chromium opens every generated page from disk: every chart drawn, no console error, no request off disk,
    nothing injected by a hostile result file, hover text with the spread; a screenshot of each page is kept."""
    from playwright.sync_api import sync_playwright

    site = render(tmp_path, PUBLISHED, hostile(), tiny_run("20261201T100000Z", decode=80.0))
    with_trials = render(tmp_path / "trials", trials_run(1800.0, between=0.3))  # schema 2: intervals, an unstable row
    pages = [site / "index.html", *sorted((site / "models").glob("*.html")), with_trials / "models" / "qwen2-tiny.html"]
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            for path in pages:
                page, errors, requests = visit(browser, path)
                charts = page.locator("div.chart")
                assert charts.count() == page.locator("script[type='application/json']").count()
                for section in each_setup_opened(page):
                    for chart in section.locator("div.chart").all():
                        drawn = chart.locator("g.trace path").count()
                        assert drawn > 0, f"{path.name}: chart {chart.get_attribute('id')} drew nothing"
                if path.stem == "qwen2.5-0.5b-instruct":
                    assert charts.count() == 6
                    assert page.locator("#chart-0-ttft_ms g.trace.bars .point").count() == 17
                    # plotly keeps the rows' order, "vLLM" of the serving section among its own rows
                    shown = page.evaluate(TICKS_TOP_DOWN, "chart-0-load_s")
                    assert shown == [r.label for r in published().rows], shown
                if path.is_relative_to(with_trials):
                    assert page.locator("span.flag").count() == 1 and page.locator(".card .interval").count() == 1
                elif path.stem == "qwen2-tiny":
                    assert page.locator("div.chart[id^='history-']").count() == 2  # decode speed, time to first token
                    page.locator("#chart-0-ttft_ms").scroll_into_view_if_needed()  # the mouse hovers inside the window
                    box = page.locator("#chart-0-ttft_ms g.trace.bars .point path").first.bounding_box()
                    page.mouse.move(
                        box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                    )  # plotly's drag layer is on top
                    hover = page.locator("#chart-0-ttft_ms .hoverlayer .hovertext").text_content(timeout=5_000)
                    assert "median of 2 runs" in hover and "min–max" in hover, hover
                # every table fits the 1280-pixel window, opened: the notes column is read, not scrolled to or clipped
                assert cells_overflowing(page) == [], path.name
                shot = f"trials-{path.stem}" if path.is_relative_to(with_trials) else path.stem
                page.screenshot(path=str(tmp_path / f"{shot}.png"), full_page=True)
                assert errors == [], f"{path.name}: {errors}"
                assert all(url.startswith("file://") for url in requests), requests
                assert page.evaluate("window.pwned") is None
                page.close()
        finally:
            browser.close()
    assert all((tmp_path / f"{p.stem}.png").stat().st_size > 10_000 for p in pages)


# ----- trials: intervals, "no clear difference", unstable rows (schema 2) -----


def trial_row(runner: str, label: str, decode: float, seed: int, between=0.03, peer=None) -> Row:
    """A row measured in 3 trials of 5 runs: each trial's level around `decode`, its runs within 1% of that."""
    import numpy as np

    from harness.trials import combine_trials

    rng = np.random.default_rng(seed)
    levels = decode * (1 + rng.normal(0, between, 3))
    samples = [{"decode_tok_s": list(lv * (1 + rng.normal(0, 0.01, 5))), "ttft_ms": list(2000 / lv * (1 + rng.normal(0, 0.01, 5)))}
               for lv in levels]  # fmt: skip
    base = [{"load_s": 2.0, "first_call_s": 0.3, "peak_mem_gib": 0.4, "mem_kind": "host", "runs": 5}] * 3
    metrics, samples, unstable = combine_trials(base, samples)
    return Row(runner=runner, label=label, group="PyTorch", status="ok", distance=1e-5, peer=peer, metrics=metrics,
               samples=samples, unstable=unstable)  # fmt: skip


def trials_run(ours: float, theirs: float = 1000.0, between: float = 0.03) -> ResultFile:
    run = tiny_run("20261203T100000Z", decode=100.0)
    return run.model_copy(update={
        "schema_version": 2,
        "protocol": {**run.protocol, "trials": 3},
        "rows": [trial_row("transformers", "transformers", 500.0, 1),
                 trial_row("transformers-compiled", "transformers, compiled", theirs, 2),
                 trial_row("linnet-inductor", "Linnet, inductor", ours, 3, between, peer="transformers-compiled")],
    })  # fmt: skip


def card_texts(tree: Tree) -> dict[str, str]:
    return {next(c.find_all("h3")).text(): c.text() for c in tree.root.find_all("article", "card")}


def numbers_rows(tree: Tree) -> dict[str, str]:
    return {tr.text().split(" ")[0]: tr.text() for tr in next(tree.root.find_all("table", "numbers")).find_all("tr")}


def test_a_clear_win_shows_its_ratio_with_the_interval(tmp_path):
    tree = model_tree(render(tmp_path, trials_run(1800.0)), "qwen2-tiny")
    card = card_texts(tree)["vs the reference, in PyTorch"]
    ratio, low, high = (float(x) for x in re.search(r"([\d.]+)× faster.*95% CI ([\d.]+)–([\d.]+)×", card).groups())
    assert 1.6 < low < ratio < high < 2.0, card
    assert re.search(r"Linnet, inductor.*× transformers, compiled \(95% CI [\d.]+–[\d.]+×\)", numbers_rows(tree)["Linnet,"])
    assert "in each of 3 trials (fresh processes, round robin), 95% intervals" in next(tree.root.find_all("p", "machine-line")).text()
    index = (tmp_path / "site" / "index.html").read_text()
    assert re.search(r"vs the reference, in PyTorch: [\d.]+× faster \(95% CI", index)


def test_an_interval_that_holds_1_says_no_clear_difference(tmp_path):
    tree = model_tree(render(tmp_path, trials_run(1000.0, between=0.15)), "qwen2-tiny")
    card = card_texts(tree)["vs the reference, in PyTorch"]
    assert "no clear difference" in card and re.search(r"[\d.]+×, 95% CI [\d.]+–[\d.]+×", card), card
    assert "faster" not in card and "slower" not in card
    assert "no clear difference (95% CI" in numbers_rows(tree)["Linnet,"]
    verdict = next(next(tree.root.find_all("article", "card")).find_all("strong"))
    assert "loss" in verdict.classes  # not coloured as a win


def test_a_row_whose_trials_disagree_is_flagged_unstable_and_its_hover_shows_the_interval(tmp_path):
    result = trials_run(1800.0, between=0.3)
    assert result.rows[2].unstable == ["ttft_ms", "decode_tok_s"]  # in the order of harness/metrics.py
    tree = model_tree(render(tmp_path, result), "qwen2-tiny")
    row = next(tr for tr in next(tree.root.find_all("table", "numbers")).find_all("tr") if "Linnet, inductor" in tr.text())
    first = next(row.find_all("td"))
    assert next(first.find_all("span", "flag")).text() == "unstable"
    assert "differ by more than 10%" in first.attrs["title"]
    decode = figures(tree)["Decode speed"]["data"][0]["hovertext"]
    inductor = next(h for h in decode if h.startswith("Linnet, inductor"))
    assert "median of 5 runs in each of 3 trials" in inductor and "95% CI" in inductor and "unstable" in inductor
    steady = next(h for h in decode if h.startswith("transformers (PyTorch)"))
    assert "unstable" not in steady


def test_the_accuracy_figures_sit_beside_the_distance_in_the_table_and_the_hover(tmp_path):
    result = tiny_run("20261202T100000Z", decode=100.0)
    compiled = result.rows[1]
    compiled.kl_mean, compiled.kl_p99, compiled.top1_agree = 2.3e-11, 8.1e-11, 0.99611
    result.reference_distributions = {"positions": 257, "entropy_mean": 3.41, "uniform_entropy": 6.93,
                                      "top1_prob_mean": 0.28}  # fmt: skip
    tree = model_tree(render(tmp_path, result), "qwen2-tiny")
    table = next(tree.root.find_all("table", "numbers"))
    header = [th.text() for th in table.find_all("th")]
    at = header.index("Distance from reference")
    assert header[at + 1 : at + 4] == ["KL mean", "KL p99", "Top-1 agreement"]
    cells = {tr.text() for tr in table.find_all("tr")}
    assert any("1.6e-05 2.3e-11 8.1e-11 99.6%" in c for c in cells), cells
    assert "KL from reference: mean 2.3e-11, p99 8.1e-11; top-1 agreement 99.6%" in figures(tree)["Load time"]["data"][0]["hovertext"][1]
    text = tree.root.text()
    assert "mean entropy of 3.41 nats (a flat one: 6.93)" in text and "neither flat nor one-hot" in text
    assert "Synthetic weights are seeded Gaussians" in text


def test_the_page_says_how_the_runs_synthetic_weights_were_made(tmp_path):
    """As the result file records it (a trained twin's recipe here); the old recipe for files that do not."""
    from linnet_core.checkpoint import synthetic_recipe
    from linnet_core.models import get_model

    result = tiny_run("20261202T100000Z", decode=100.0)
    result.weights_recipe = synthetic_recipe(get_model("qwen2-tiny").config) + " <script>alert(1)</script>"
    tree = model_tree(render(tmp_path, result), "qwen2-tiny")
    notice = next(p.text() for p in tree.root.find_all("p", "notice") if "synthetic weights" in p.text())
    assert "steps of next-token training on this project's own text" in notice and "<script>" in notice
    assert all("alert(1)" not in s.text() for s in tree.root.find_all("script"))  # escaped: shown, never run
    assert "steps of next-token training" in tree.root.text().split("KL mean and KL p99")[-1]


def test_the_page_says_what_the_probe_was(tmp_path):
    """As the result file records it (text here, escaped); random ids for files from before it did."""
    from harness.workload import probe_source

    result = tiny_run("20261202T100000Z", decode=100.0)
    result.workload["probe"] = probe_source(True) + " <script>alert(1)</script>"
    text = model_tree(render(tmp_path / "new", result), "qwen2-tiny").root.text()
    assert "The probe: the first 288 tokens of the project's probe text" in text and "<script>" in text
    old = tiny_run("20261202T100000Z", decode=100.0)
    old.workload["probe_tokens"] = 288
    assert "The probe: 288 random token ids" in model_tree(render(tmp_path / "old", old), "qwen2-tiny").root.text()
    older = tiny_run("20261202T100000Z", decode=100.0)  # from before the file recorded the probe's length too
    assert "The probe: random token ids." in model_tree(render(tmp_path / "older", older), "qwen2-tiny").root.text()


# ----- one setup at a time; history with change points; notes that fold; whiskers -----

LONG_NOTE = ("CPU: synchronous dispatch (every call is awaited anyway, no hand-off to a worker thread); decode: the "
             "remaining tokens in one jitted call, an XLA while loop over the decode step")  # fmt: skip


def stepped_runs() -> list[ResultFile]:
    """Three runs on one machine: a pair 8% apart whose min–max spreads overlap (noise), then "transformers, compiled"
    nearly three times as fast (far beyond both spreads); and a later run on another machine, at yet another speed."""
    steady, same = tiny_run("20261201T100000Z", decode=100.0), tiny_run("20261202T100000Z", decode=108.0)
    step = tiny_run("20261203T100000Z", decode=100.0)
    step.machine["git_commit"] = "0123456789abcdef0123456789abcdef01234567"
    step.rows[1].metrics.update(decode_tok_s=600.0, decode_tok_s_min=590.0, decode_tok_s_max=610.0)
    step.rows[1].notes = [LONG_NOTE]
    other = tiny_run("20261203T120000Z", decode=400.0)
    other.machine["cpu"] = "Intel Xeon"
    return [steady, same, step, other]


AMD = "setup-amd-epyc-2-cores-f32-quick-profile"
XEON = "setup-intel-xeon-2-cores-f32-quick-profile"


def test_a_step_beyond_the_runs_intervals_is_a_change_point_and_noise_is_not(tmp_path):
    site = render(tmp_path, *stepped_runs())
    tree = model_tree(site, "qwen2-tiny")
    amd = next(s for s in tree.root.find_all("section", "run") if s.attrs["id"] == AMD)
    change = "transformers, compiled: decode speed 216 → 600 tok/s (+177.8%) at 2026-12-03 10:00 · 0123456"
    assert [li.text() for li in amd.find_all("li") if "→" in li.text()] == [change]  # the step; not 200 → 216
    history = figures(tree)["Decode speed over the runs"]  # only the AMD setup has more than one run
    labels = ["2026-12-01 10:00 · no commit", "2026-12-02 10:00 · no commit", "2026-12-03 10:00 · 0123456"]
    assert history["layout"]["xaxis"]["categoryarray"] == labels  # x: the runs in run order, by date and commit
    compiled = next(s for s in history["data"] if s["name"] == "transformers, compiled")
    assert compiled["x"] == labels and compiled["y"] == [200.0, 216.0, 600.0]  # the Xeon run's 800 is on no line
    assert compiled["error_y"]["array"] == pytest.approx([20.0, 21.6, 10.0])  # its min–max as whiskers
    marked = next(s for s in history["data"] if s["name"] == "change point")
    assert marked["x"] == [labels[2]] and marked["y"] == [600.0]
    setups = [tr.text() for tr in next(tree.root.find_all("table", "setups")).find_all("tr")][1:]
    assert setups[0].startswith("Intel Xeon, 2 cores · f32 · quick profile 2026-12-03 12:00 UTC 1 run")  # the newest
    assert "AMD EPYC, 2 cores · f32 · quick profile 2026-12-01" not in setups[1] and "3 runs 1 change point" in setups[1]
    index = Tree((site / "index.html").read_text()).root
    latest = [a for a in index.find_all("a") if "→" in a.text()]
    assert [a.text() for a in latest] == [f"{change} (AMD EPYC, 2 cores · f32 · quick profile)"]
    assert latest[0].attrs["href"] == f"models/qwen2-tiny.html#{AMD}"
    assert {a.attrs["href"] for a in index.find_all("a") if "quick profile" == a.text()[-13:]} == {
        f"models/qwen2-tiny.html#{AMD}", f"models/qwen2-tiny.html#{XEON}"}  # fmt: skip


def test_the_page_opens_on_a_gpu_setup_then_the_newest(tmp_path):
    """A GPU run older than every CPU run still comes first: in the setups' table, the selector and the sections."""
    gpu = published().model_copy(update={"model": "qwen2-tiny", "created_at": "2026-11-01T10:00:00+00:00"})
    tree = model_tree(render(tmp_path, gpu, *stepped_runs()), "qwen2-tiny")
    sections = [s.attrs["id"] for s in tree.root.find_all("section", "run")]
    assert sections == ["setup-nvidia-h100-80gb-hbm3-bf16-default-profile", XEON, AMD]
    assert [o.attrs["value"] for o in tree.root.find_all("option")] == sections
    table = next(tree.root.find_all("table", "setups"))
    assert [a.attrs["href"] for a in table.find_all("a")] == [f"#{s}" for s in sections]
    h100 = next(tr.text() for tr in table.find_all("tr") if "H100" in tr.text())
    assert "vs vLLM, one request: 1.49× faster" in h100  # each setup's headline comparisons


def test_long_notes_fold_behind_a_one_line_summary_and_short_ones_stand(tmp_path):
    from harness.site.table import NOTE_FITS

    tree = model_tree(render(tmp_path, *stepped_runs()[:3]), "qwen2-tiny")
    notes = {tr.text().split(" ")[0]: next(tr.find_all("td", "notes")) for tr in tree.root.find_all("tr")
             if list(tr.find_all("td", "notes"))}  # fmt: skip
    folded = next(notes["transformers,"].find_all("details", "fold"))
    summary = next(folded.find_all("summary")).text()
    assert summary.endswith("…") and len(summary) <= NOTE_FITS and LONG_NOTE.startswith(summary[:-2])
    assert LONG_NOTE in folded.text()  # the whole note, once opened
    assert not list(notes["transformers"].find_all("details"))  # no note: nothing to fold


def test_bars_carry_their_intervals_as_whiskers_where_the_rows_kept_them(tmp_path):
    result = trials_run(1800.0)
    tree = model_tree(render(tmp_path / "trials", result), "qwen2-tiny")
    figs = figures(tree)
    bars = figs["Decode speed"]["data"][0]
    rows = {r.label: r for r in result.rows}
    for label, value, plus, minus in zip(bars["y"][1], bars["x"], bars["error_x"]["array"], bars["error_x"]["arrayminus"]):
        low, high = rows[label].metrics["decode_tok_s_ci"]
        assert (value - minus, value + plus) == pytest.approx((low, high)), label
    texts = figs["Decode speed"]["data"][1]  # the figures written beyond the whiskers, not struck through by them
    assert texts["mode"] == "text" and texts["text"] == bars["text"] and bars["textposition"] == "none"
    assert texts["x"] == pytest.approx([v + plus for v, plus in zip(bars["x"], bars["error_x"]["array"])])
    assert "best bar is red. Whiskers: each row's 95% interval over its trials" in tree.root.text()  # said beside it
    published_bars = figures(model_tree(render(tmp_path / "published", PUBLISHED)))["Decode speed"]["data"][0]
    assert "error_x" not in published_bars  # the published page kept no interval: no whisker is invented


def test_in_chromium_one_setup_shows_the_selector_switches_and_the_step_is_marked(tmp_path):
    """At 1280 px: one setup shown (the newest), no table cell overflowing, folded or opened; the selector and a
    setup's own link show another; the planted step is ringed on that setup's history chart."""
    from playwright.sync_api import sync_playwright

    site = render(tmp_path, *stepped_runs())
    path = site / "models" / "qwen2-tiny.html"
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page, errors, _ = visit(browser, path)
            shown = "() => Array.from(document.querySelectorAll('section.run')).filter(s => !s.hidden).map(s => s.id)"
            assert page.evaluate(shown) == [XEON] and page.input_value("#setup-select") == XEON
            assert cells_overflowing(page) == []
            page.select_option("#setup-select", AMD)
            page.wait_for_function(f"() => !document.getElementById('{AMD}').hidden")
            assert page.evaluate(shown) == [AMD] and page.url.endswith(f"#{AMD}")
            assert cells_overflowing(page) == []  # the long note folded
            note = page.locator(f"#{AMD} details.fold").first
            height = note.evaluate("d => d.closest('tr').getBoundingClientRect().height")
            note.locator("summary").click()
            assert note.evaluate("d => d.closest('tr').getBoundingClientRect().height") > height + 20  # opened
            assert cells_overflowing(page) == []  # and it wraps inside its cell
            chart = page.locator(f"#{AMD} div.chart[id^='history-'][id$='-decode_tok_s']")
            chart.evaluate("c => { c.closest('details').open = true; }")
            chart.locator("svg.main-svg").first.wait_for(timeout=10_000)
            traces = chart.evaluate("c => c.data.map(t => t.name)")
            rings = chart.locator("g.scatterlayer g.trace").nth(traces.index("change point")).locator("path.point")
            assert rings.count() == 1 and rings.first.bounding_box()["width"] > 10  # one ring, drawn
            assert errors == []
            page.close()
            page, errors, _ = visit(browser, path)  # a setup's own link opens on it
            page.goto(f"{path.as_uri()}#{AMD}")
            page.wait_for_function(f"() => !document.getElementById('{AMD}').hidden")
            assert page.evaluate(shown) == [AMD] and errors == []
            page.close()
        finally:
            browser.close()


def test_in_chromium_the_committed_results_pages_are_a_few_screens_tall_and_fit_1280px(tmp_path):
    """Every model page of the repository's own results, at 1280 x 900, is at most five screens tall until a reader
    opens something, and no table cell overflows; the longest page, every setup opened, still fits."""
    from playwright.sync_api import sync_playwright

    build_site(Path(__file__).parents[1] / "results", tmp_path / "site")
    pages = sorted((tmp_path / "site" / "models").glob("*.html"))
    assert len(pages) >= 5
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            for path in pages:
                page, errors, _ = visit(browser, path)
                height = page.evaluate("document.documentElement.scrollHeight")
                assert height <= 5 * 900, f"{path.name}: {height} px tall"
                assert cells_overflowing(page) == [], path.name
                if path.stem == "qwen2-tiny":
                    for _ in each_setup_opened(page):
                        assert cells_overflowing(page) == [], path.name
                assert errors == [], f"{path.name}: {errors}"
                page.close()
        finally:
            browser.close()


def test_the_truth_ratio_and_energy_have_columns_only_where_a_row_has_them(tmp_path):
    """Each row's distance from the float64 truth over the reference's is a column, the reference at 1; energy per token
    (a GPU's) is a column only where a row measured it, so a CPU page keeps its width."""
    plain = model_tree(render(tmp_path / "cpu", tiny_run("20261202T100000Z", decode=100.0)), "qwen2-tiny")
    headers = [th.text() for th in next(plain.root.find_all("table", "numbers")).find_all("th")]
    assert "Against the float64 truth" not in headers and not any("Energy per token" in h for h in headers)

    run = tiny_run("20261202T110000Z", decode=100.0)
    reference, compiled = run.rows[0], run.rows[1]
    reference.truth_distance, reference.truth_ratio = 2.0e-5, 1.0
    compiled.truth_distance, compiled.truth_ratio = 3.0e-5, 1.5
    compiled.metrics["energy_j_per_tok"] = 0.42
    # 8-bit weights: over an f32 reference's rounding the ratio is 35,000x, which says nothing; their distance is shown
    run.rows.append(Row(runner="linnet-ort-int8", label="Linnet, ONNX Runtime int8", group="ONNX Runtime", status="ok",
                        quant="int8", distance=0.28, truth_distance=0.284, truth_ratio=34787.6, metrics=dict(compiled.metrics)))
    tree = model_tree(render(tmp_path / "gpu", run), "qwen2-tiny")
    table = next(tree.root.find_all("table", "numbers"))
    headers = [th.text() for th in table.find_all("th")]
    assert "Against the float64 truth" in headers and any("Energy per token" in h for h in headers)
    cells = {td.text(): td for td in table.find_all("td", "truth")}
    assert list(cells) == ["1 (the reference)", "1.5x", "0.284 from it"]
    assert "its weights are int8" in cells["0.284 from it"].attrs["title"] and "KL and top-1 judge it" in cells["0.284 from it"].attrs["title"]
    assert [td.text() for td in table.find_all("td", "energy_j_per_tok")] == ["–", "0.42 J/tok", "0.42 J/tok"]
    assert "multiple of the reference's own" in tree.root.text()


def test_the_memory_wall_is_shown_beside_decode_speed(tmp_path):
    run = tiny_run("20261202T120000Z", decode=100.0)
    run.machine["memory_bandwidth_gb_s"] = 25.0
    run.rows[0].metrics.update(bytes_per_token=125e6, roofline=0.5)
    table = next(model_tree(render(tmp_path, run), "qwen2-tiny").root.find_all("table", "numbers"))
    assert [td.text() for td in table.find_all("td", "wall")] == ["50%", "–"]
    assert "Of the memory wall" in [th.text() for th in table.find_all("th")]


def test_an_installed_copy_renders_the_site_from_anywhere(tmp_path):
    """`pip install .` (not editable), then `linnet-bench site` from another directory: the templates and assets are
    package data, not files beside a clone."""
    target, elsewhere = tmp_path / "installed", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                          str(target), str(ROOT)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert not (target / "site_templates").exists()
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = ("import harness.site, sys; assert harness.site.__file__.startswith(sys.argv[1]), harness.site.__file__; "
            "from harness.cli import main; sys.argv = ['linnet-bench', 'site', '--results', sys.argv[2], '--out', 'site']; main()")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(target), str(ROOT / "results")], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert (elsewhere / "site" / "index.html").is_file() and (elsewhere / "site" / "assets" / "style.css").is_file()
    assert (elsewhere / "site" / "assets" / "site.js").read_text() == (ROOT / "harness/site/templates/assets/site.js").read_text()


def test_a_warning_about_a_file_whose_path_or_text_looks_like_markup_is_printed_as_written(tmp_path):
    """One file holding "[/]" raised rich's MarkupError and aborted the whole site; "[old]" in its path vanished."""
    write_result(tiny_run("20261202T100000Z", decode=100.0), tmp_path / "results" / "qwen2-tiny" / "good.json")
    bad = tmp_path / "results" / "[old]" / "[bold]bad.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"schema_version": 1, "model": "[/]"}')
    cli = [sys.executable, "-m", "harness.cli", "site", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    warning = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and str(bad) in warning[0] and "'[/]'" in warning[0], done.stdout
    assert (tmp_path / "out" / "models" / "qwen2-tiny.html").exists()


def test_a_fifo_among_the_result_files_is_skipped_with_a_warning_not_waited_on(tmp_path):
    """Reading a FIFO named like a result file waits for a writer forever: `site` hung."""
    write_result(tiny_run("20261202T100000Z", decode=100.0), tmp_path / "results" / "qwen2-tiny" / "good.json")
    os.mkfifo(tmp_path / "results" / "qwen2-tiny" / "pipe.json")
    cli = [sys.executable, "-m", "harness.cli", "site", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    warning = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "pipe.json: not a regular file" in warning[0], done.stdout
    assert "100 tok/s" in (tmp_path / "out" / "models" / "qwen2-tiny.html").read_text()


def test_a_row_measured_while_other_processes_held_the_cores_says_so(tmp_path):
    result = tiny_run("20261202T100000Z", decode=100.0)
    result.rows[0].metrics["other_cpu_share"] = 0.52
    result.rows[1].metrics["other_cpu_share"] = 0.03
    text = Tree((render(tmp_path, result) / "models" / "qwen2-tiny.html").read_text()).root.text()
    assert text.count("measured while other processes used 52% of the cores") == 1, text
    assert "3% of the cores" not in text


def test_the_distance_note_says_when_16_bit_rounding_moves_the_reference_far_from_the_truth():
    """On the 0.5B shape's random weights bf16 moves the reference 6.3 from the float64 truth and right rows sit units
    from it (the committed run): the note says so and points at the truth ratio. A reference near the truth keeps the
    usual sentence."""
    from harness.site.pages import distance_note

    deep = load_result(ROOT / "results" / "reference-check" / "qwen2.5-0.5b-instruct" / "20261206T055113Z.json")
    note = distance_note(deep)
    assert "the reference itself is 6.3 from the float64 truth" in note and "about 0.1 on logits near 16" not in note
    near = deep.model_copy(deep=True)
    near.rows[0].truth_distance = 0.2
    assert "about 0.1 on logits near 16" in distance_note(near) and "from the float64 truth (deep" not in distance_note(near)
