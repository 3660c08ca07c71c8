"""The site renderer: the published page rebuilt from a result file that transcribes it, comparisons computed by the
renderer, escaping, the parts beyond the published page, and the generated pages in a real browser (Chromium)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.results import ResultFile, Row, load_result, write_result
from harness.site import build_site, numbers
from linnet_core.errors import UserError

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
        (class "extra") left out: how the seed page's text reads ("transformers12.4 ms93.2 tok/s")."""
        parts = []
        for child in self.children:
            if isinstance(child, Node):
                if "extra" not in child.classes:
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
    history = figures(tree)["Decode speed over time"]["data"]
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
    history = figures(tree)["Decode speed over time"]["data"]  # only the f32 setup has two runs
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
    assert "models/qwen2-tiny.html#run-20261202T100000Z" in hrefs


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
    with pytest.raises(UserError, match="malformed result file"):
        (tmp_path / "results" / "qwen2.5-0.5b-instruct" / "bad.json").write_text('{"schema_version": 1}')
        build_site(tmp_path / "results", tmp_path / "out")


def test_a_model_id_that_is_not_a_plain_name_is_refused(tmp_path):
    result = tiny_run("20261202T100000Z", decode=100.0)
    result.model = "../../outside"
    write_result(result, tmp_path / "results" / "qwen2-tiny" / "r.json")
    with pytest.raises(UserError, match="is not a plain name"):
        build_site(tmp_path / "results", tmp_path / "site")


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


def test_the_pages_draw_every_chart_offline_in_chromium(tmp_path):
    """Chromium opens every generated page from disk: every chart drawn, no console error, no request off disk,
    nothing injected by a hostile result file, hover text with the spread; a screenshot of each page is kept."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package) before the tests")
    from playwright.sync_api import sync_playwright

    site = render(tmp_path, PUBLISHED, hostile(), tiny_run("20261201T100000Z", decode=80.0))
    pages = [site / "index.html", *sorted((site / "models").glob("*.html"))]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for path in pages:
                page, errors, requests = visit(browser, path)
                charts = page.locator("div.chart")
                assert charts.count() == page.locator("script[type='application/json']").count()
                for i in range(charts.count()):
                    chart = charts.nth(i)
                    chart.locator("svg.main-svg").first.wait_for(timeout=10_000)
                    drawn = chart.locator("g.trace path").count()
                    assert drawn > 0, f"{path.name}: chart {chart.get_attribute('id')} drew nothing"
                if path.stem == "qwen2.5-0.5b-instruct":
                    assert charts.count() == 6
                    assert page.locator("#chart-0-ttft_ms g.trace.bars .point").count() == 17
                    # plotly keeps the rows' order, "vLLM" of the serving section among its own rows
                    shown = page.evaluate(TICKS_TOP_DOWN, "chart-0-load_s")
                    assert shown == [r.label for r in published().rows], shown
                if path.stem == "qwen2-tiny":
                    assert page.locator("div.chart[id^='history-']").count() == 2  # decode speed, time to first token
                    box = page.locator("#chart-0-ttft_ms g.trace.bars .point path").first.bounding_box()
                    page.mouse.move(
                        box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                    )  # plotly's drag layer is on top
                    hover = page.locator("#chart-0-ttft_ms .hoverlayer .hovertext").text_content(timeout=5_000)
                    assert "median of 2 runs" in hover and "min–max" in hover, hover
                page.screenshot(path=str(tmp_path / f"{path.stem}.png"), full_page=True)
                assert errors == [], f"{path.name}: {errors}"
                assert all(url.startswith("file://") for url in requests), requests
                assert page.evaluate("window.pwned") is None
                page.close()
        finally:
            browser.close()
    assert all((tmp_path / f"{p.stem}.png").stat().st_size > 10_000 for p in pages)
