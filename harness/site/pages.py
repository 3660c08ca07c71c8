"""The page objects: plain view models built from the loaded context, holding only text, links and figures, so the
templates hold no computation. A model page shows, for each machine, its latest run: the machine and protocol,
the headline cards, one chart per metric, every number, what was not measured, and the history of the runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.registry import ModelEntry
from harness.results import ResultFile, Row
from harness.site import numbers
from harness.site.charts import Bar, Series, bar_figure, history_figure
from harness.site.comparisons import (
    CARDS, CHARTED, DECODE, FIRST_CALL, LOAD, MEMORY, SERVING, TABLED, TTFT, Metric, against_peer, best_row, headline,
)  # fmt: skip
from harness.site.context import LoadedRun, ModelRuns, machine_name
from runners import GROUPS, REFERENCE

DATA_DIR = "data"  # raw result files are copied to OUT/data/<model>/<file>
# A note that says the memory figure is a pool reserved up front (a setting), not what the model needed.
SETTING_NOTE = re.compile(r"reserves .*pool|cache pool at")
# Package versions worth naming first, in the published page's order, with the names people know them by.
VERSION_NAMES = {
    "linnet": "Linnet", "torch": "PyTorch", "jax": "JAX", "transformers": "transformers", "diffusers": "diffusers",
    "onnxruntime": "ONNX Runtime", "onnxruntime-gpu": "ONNX Runtime GPU", "tensorrt": "TensorRT", "vllm": "vLLM",
    "llama_cpp_python": "llama-cpp-python", "keras-hub": "KerasHub", "keras": "Keras", "tensorflow": "TensorFlow",
}  # fmt: skip


@dataclass(frozen=True)
class Link:
    label: str
    href: str


@dataclass(frozen=True)
class CardBar:
    label: str  # the row's name
    value: str  # its figure, e.g. "1,055 tok/s"
    width: float  # percent of the card's width: the larger figure fills it
    ours: bool  # Linnet's side


@dataclass(frozen=True)
class CardView:
    title: str  # "vs vLLM, one request"
    verdict: str  # "1.49× faster"
    metric: str  # "decode speed"
    wins: bool  # Linnet's side is ahead
    bars: tuple[CardBar, CardBar]  # Linnet's side, then the other


@dataclass(frozen=True)
class ChartView:
    id: str  # the chart's element id
    title: str  # "Time to first token"
    description: str  # unit, which way is better, which rows are not drawn
    figure: dict  # plotly data, layout and config
    bars: tuple[Bar, ...] = ()  # what is drawn (for a metric chart)


@dataclass(frozen=True)
class Cell:
    text: str
    hint: str | None = None  # shown on hover: spread and number of runs
    extra: bool = False  # beyond the published page's columns


@dataclass(frozen=True)
class TableSection:
    name: str  # the page section, e.g. "PyTorch"
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[Cell, ...]
    sections: tuple[TableSection, ...]

    @property
    def width(self) -> int:
        return len(self.headers)


@dataclass(frozen=True)
class Unmeasured:
    label: str  # the row's name
    group: str  # its section
    status: str  # "skipped" or "failed"
    reason: str  # the first line of the reason
    detail: str | None  # the whole reason when it is longer (a failed child's stderr)


@dataclass(frozen=True)
class RunView:
    anchor: str  # element id of the run's section
    machine: str  # the machine's name
    machine_line: str  # machine · workload · protocol · date
    setup_line: str  # profile, dtype, device, weights
    versions_line: str  # package versions, Python, driver
    synthetic: bool  # measured on synthetic weights
    complete: bool  # False when the run was cut short
    download: Link  # the raw result file
    cards: tuple[CardView, ...]
    cards_left_out: str | None  # one line naming the cards whose rows were not measured
    distance_note: str  # what the distance column means for this dtype
    charts: tuple[ChartView, ...]
    charts_left_out: str | None  # one line naming the metrics no row measured
    table: Table
    unmeasured: tuple[Unmeasured, ...]
    history: tuple[ChartView, ...]  # headline metrics over the runs on this machine (two runs or more)
    earlier: tuple[Link, ...]  # every run on this machine, newest first, for download (when there are several)


@dataclass(frozen=True)
class ModelPage:
    model: str  # model id
    file: str  # path under OUT, e.g. "models/qwen2-tiny.html"
    title: str
    description: str
    facts: tuple[str, ...]  # parameters, family, license, task, tags
    links: tuple[Link, ...]
    registry: tuple[tuple[str, str], ...]  # the registry entry's architecture, as (name, value)
    runs: tuple[RunView, ...]  # the latest run of each machine, newest first

    @property
    def several_machines(self) -> bool:
        return len(self.runs) > 1


@dataclass(frozen=True)
class IndexRun:
    machine: str
    measured: str  # when the run started, e.g. "2026-09-28 17:31 UTC"
    setup: str  # profile, dtype, weights
    figures: tuple[tuple[str, str, str], ...]  # (what, value, row label): fastest decode, lowest TTFT, best serving
    verdicts: tuple[str, ...]  # "vs vLLM, one request: 1.49× faster"
    href: str  # the model page's section of this run


@dataclass(frozen=True)
class IndexEntry:
    title: str
    model: str
    href: str
    description: str
    facts: tuple[str, ...]
    runs: tuple[IndexRun, ...]


def data_file(run: LoadedRun) -> str:
    """Where the raw result file is copied, relative to OUT."""
    return f"{DATA_DIR}/{run.result.model}/{run.path.name}"


def model_file(model: str) -> str:
    return f"models/{model}.html"


def run_anchor(result: ResultFile) -> str:
    return f"run-{re.sub(r'[^A-Za-z0-9_-]', '-', result.run_id)}"


# ----- the model page -----


def model_page(model: ModelRuns) -> ModelPage:
    entry = model.entry
    runs = tuple(run_view(runs[-1], runs, index) for index, runs in enumerate(model.by_machine().values()))
    if entry is None:
        return ModelPage(model.model, model_file(model.model), model.model,
                         "A model this bench's registry does not know; only its result files are shown.",
                         (), (), (), runs)  # fmt: skip
    links = tuple(Link(label, href) for label, href in entry.links.items()) + (Link("Registry entry", "#registry"),)
    return ModelPage(model.model, model_file(model.model), entry.title, entry.description, facts(entry), links,
                     registry_facts(entry), runs)  # fmt: skip


def facts(entry: ModelEntry) -> tuple[str, ...]:
    return (f"{numbers.parameters(entry.parameters)} parameters", entry.family, entry.license, entry.task, *entry.tags)


def registry_facts(entry: ModelEntry) -> tuple[tuple[str, str], ...]:
    pairs = [("id", entry.id), *(("alias", a) for a in entry.aliases)]
    if entry.hf_id:
        pairs.append(("Hugging Face repository", entry.hf_id))
    pairs.append(("checkpoint dtype", entry.checkpoint_dtype))
    pairs += [(name, str(value)) for name, value in vars(entry.config).items()]
    return tuple(pairs)


def run_view(run: LoadedRun, machine_runs: tuple[LoadedRun, ...], index: int) -> RunView:
    result = run.result
    rows = result.rows
    comparisons = [(card, headline(card, rows)) for card in CARDS]
    left_out = [card.title for card, c in comparisons if c is None]
    charts = [chart for metric in CHARTED if (chart := metric_chart(metric, result, f"chart-{index}-{metric.key}"))]
    not_charted = [metric_title(m, rows) for m in CHARTED if not any(m.value(r) is not None for r in rows)]
    return RunView(
        anchor=run_anchor(result),
        machine=run.machine,
        machine_line=machine_line(result),
        setup_line=setup_line(result),
        versions_line=versions_line(result),
        synthetic=result.weights == "synthetic",
        complete=result.complete,
        download=Link(run.path.name, f"../{data_file(run)}"),
        cards=tuple(card_view(card.title, c) for card, c in comparisons if c is not None),
        cards_left_out=f"Not shown, since their rows were not measured in this run: {'; '.join(left_out)}."
        if left_out else None,
        distance_note=distance_note(result),
        charts=tuple(charts),
        charts_left_out=f"No row measured {', '.join(t.lower() for t in not_charted)}." if not_charted else None,
        table=numbers_table(result),
        unmeasured=tuple(unmeasured(r) for r in rows if r.status != "ok"),
        history=history_charts(machine_runs, index),
        earlier=tuple(Link(f"{r.result.created_at} ({r.path.name})", f"../{data_file(r)}") for r in reversed(machine_runs))
        if len(machine_runs) > 1 else (),
    )  # fmt: skip


def machine_line(result: ResultFile) -> str:
    """"NVIDIA H100 80GB HBM3 · 512 prompt tokens, 128 new · batch 1 · median of 10 runs after 3 warm-ups · measured …"."""
    w = result.workload
    return " · ".join([
        machine_name(result),
        f"{w.get('prompt_tokens')} prompt tokens, {w.get('new_tokens')} new",
        f"batch {w.get('batch', 1)}",
        f"median of {numbers.count(w.get('runs', 0), 'run')} after {numbers.count(w.get('warmups', 0), 'warm-up')}",
        f"measured {result.created_at}",
    ])  # fmt: skip


def setup_line(result: ResultFile) -> str:
    p = result.protocol
    weights = "synthetic weights (seeded, of the model's exact shapes)" if result.weights == "synthetic" else f"weights from {result.weights}"
    return f"profile {p.get('profile', '?')} · {p.get('dtype', '?')} on {p.get('device', '?')} · {weights}"


def versions_line(result: ResultFile) -> str:
    """"Linnet 0.1.0, PyTorch 2.14.0, …, Python 3.12.3, driver 580.126.09": known stacks first, then the rest."""
    versions = dict(result.machine.get("versions", {}))
    python = versions.pop("python", None)
    known = [f"{name} {versions.pop(key)}" for key, name in VERSION_NAMES.items() if key in versions]
    parts = known + [f"{key} {value}" for key, value in versions.items()]
    parts += [f"Python {python}"] if python else []
    parts += [f"driver {result.machine['driver']}"] if result.machine.get("driver") else []
    parts += [f"CUDA {result.machine['cuda']}"] if result.machine.get("cuda") else []
    return ", ".join(parts)


def card_view(title: str, comparison) -> CardView:
    ours, theirs, metric = comparison.ours, comparison.theirs, comparison.metric
    values = (metric.value(ours), metric.value(theirs))
    top = max(values)
    bars = tuple(
        CardBar(row.label, numbers.with_unit(value, metric.unit), 100 * value / top, row is ours)
        for row, value in zip((ours, theirs), values)
    )
    return CardView(title, comparison.verdict, metric.name, comparison.ratio >= 1, bars)


def distance_note(result: ResultFile) -> str:
    reference = next((r.label for r in result.rows if r.runner == REFERENCE), REFERENCE)
    dtype = result.protocol.get("dtype", "")
    text = (
        "Each row also carries its distance from reference: the largest absolute difference between its logits and "
        f"those of {reference} (the reference) on the same input, through the cache path. "
    )
    if dtype == "f32":
        return text + "In f32 a correct path stays within about 1e-4; it is there so that a fast wrong answer cannot look like a win."
    return text + (
        f"{dtype} outputs differ by rounding (about 0.1 on logits near 16), so a small number is expected; "
        "it is there so that a fast wrong answer cannot look like a win."
    )


# ----- charts -----


def memory_kind(rows: list[Row]) -> str:
    """"gpu" when any row's memory was read from the driver, else "host" (the child's peak RSS)."""
    return "gpu" if any(r.metrics.get("mem_kind") == "gpu" for r in rows) else "host"


def metric_title(metric: Metric, rows: list[Row]) -> str:
    if metric is MEMORY:
        return "Peak GPU memory" if memory_kind(rows) == "gpu" else "Peak host memory"
    return metric.title


def memory_is_setting(row: Row) -> bool:
    """An engine that reserves a pool up front reports its pool: a setting, not what the model needs."""
    return bool(row.metrics.get("mem_is_setting")) or any(SETTING_NOTE.search(note) for note in row.notes)


def in_page_order(rows: list[Row]) -> list[Row]:
    """Rows by section in GROUPS order (unknown sections last), keeping the result file's order within one."""
    rank = {g: i for i, g in enumerate(GROUPS)}
    return sorted(rows, key=lambda r: rank.get(r.group, len(GROUPS)))


def metric_chart(metric: Metric, result: ResultFile, chart_id: str) -> ChartView | None:
    rows = [r for r in in_page_order(result.rows) if metric.value(r) is not None]
    if not rows:
        return None
    hidden = [r for r in rows if metric is MEMORY and memory_is_setting(r)]
    drawn = [r for r in rows if r not in hidden]
    best = best_row(drawn, metric)
    bars = [
        Bar(r.group, r.label, metric.value(r), numbers.with_unit(metric.value(r), metric.unit),
            hover_lines(r, metric, result), r is best)
        for r in drawn
    ]  # fmt: skip
    better = "higher" if metric.higher_is_better else "lower"
    description = f"{metric.unit}, {better} is better; the best bar is red."
    if metric is MEMORY:
        description = memory_description(memory_kind(result.rows), hidden)
    return ChartView(chart_id, metric_title(metric, result.rows), description, bar_figure(bars, metric.unit), tuple(bars))


def memory_description(kind: str, hidden: list[Row]) -> str:
    if kind == "gpu":
        text = "What the driver reports the process holding at its peak, in GiB; lower is better; the best bar is red."
    else:
        text = "The process's peak resident memory (RSS), sampled from outside, in GiB; lower is better; the best bar is red."
    if hidden:
        names = ", ".join(r.label for r in hidden)
        text += f" Not drawn, since theirs is a setting rather than a need: {names} (in the table)."
    return text


def hover_lines(row: Row, metric: Metric, result: ResultFile) -> tuple[str, ...]:
    """The bar's label, its figure and how it was measured, the min–max spread, and first-call time beside load."""
    m = row.metrics
    lines = [f"{row.label} ({row.group})", numbers.with_unit(metric.value(row), metric.unit)]
    if metric in (TTFT, DECODE):
        runs = m.get("runs", result.workload.get("runs"))
        lines[-1] += f", median of {numbers.count(runs, 'run')}" if runs else ""
    if (low_high := numbers.spread(m.get(f"{metric.key}_min"), m.get(f"{metric.key}_max"), metric.unit)) :
        lines.append(f"min–max {low_high}")
    if metric is LOAD and FIRST_CALL.value(row) is not None:
        lines.append(f"first call {numbers.with_unit(FIRST_CALL.value(row), FIRST_CALL.unit)}")
    return tuple(lines)


def history_charts(runs: tuple[LoadedRun, ...], index: int) -> tuple[ChartView, ...]:
    """Decode speed and serving throughput of every row over the runs on one machine; none for a single run."""
    if len(runs) < 2:
        return ()
    charts = []
    for metric in (DECODE, SERVING, TTFT):
        series = history_series(runs, metric)
        if series:
            charts.append(ChartView(f"history-{index}-{metric.key}", f"{metric.title} over time",
                                    f"{metric.unit}, {'higher' if metric.higher_is_better else 'lower'} is better; "
                                    f"one line per row, over the {len(runs)} runs on this machine.",
                                    history_figure(series, metric.unit)))  # fmt: skip
    return tuple(charts)


def history_series(runs: tuple[LoadedRun, ...], metric: Metric) -> list[Series]:
    points: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for run in runs:
        for row in in_page_order(run.result.rows):
            if (value := metric.value(row)) is not None:
                points.setdefault((row.group, row.label), []).append((run.result.created_at, value))
    labels = [label for _, label in points]
    return [
        Series(label if labels.count(label) == 1 else f"{label} ({group})", tuple(d for d, _ in p),
               tuple(v for _, v in p), tuple(numbers.with_unit(v, metric.unit) for _, v in p))
        for (group, label), p in points.items()
    ]  # fmt: skip


# ----- the table -----


def numbers_table(result: ResultFile) -> Table:
    rows = result.rows
    headers = (Cell("Method"), *(Cell(metric_title(m, rows), extra=m is FIRST_CALL) for m in TABLED),
               Cell("Against the stack it replaces"), Cell("Distance from reference"), Cell("Notes"))  # fmt: skip
    measured = [r for r in in_page_order(rows) if r.status == "ok"]
    sections = []
    for group in dict.fromkeys(r.group for r in measured):
        sections.append(TableSection(group, tuple(table_row(r, result) for r in measured if r.group == group)))
    return Table(headers, tuple(sections))


def table_row(row: Row, result: ResultFile) -> tuple[Cell, ...]:
    comparison = against_peer(row, result.rows)
    distance = "0 (the reference)" if row.runner == REFERENCE and row.distance == 0 else numbers.distance(row.distance)
    if row.distance is None and row.runner == REFERENCE:
        distance = "the reference"
    return (
        Cell(row.label),
        *(Cell(numbers.with_unit(m.value(row), m.unit), hint=" · ".join(hover_lines(row, m, result)[1:]) or None,
               extra=m is FIRST_CALL) if m.value(row) is not None else Cell(numbers.DASH, extra=m is FIRST_CALL)
          for m in TABLED),
        Cell(comparison.against_text if comparison else ""),
        Cell(distance),
        Cell("; ".join(row.notes)),
    )  # fmt: skip


def unmeasured(row: Row) -> Unmeasured:
    reason = (row.reason or "no reason recorded").strip()
    first, _, rest = reason.partition("\n")
    return Unmeasured(row.label, row.group, row.status, first, reason if rest.strip() else None)


# ----- the index -----


def index_entry(model: ModelRuns, page: ModelPage) -> IndexEntry:
    runs = []
    for machine, machine_runs in model.by_machine().items():
        result = machine_runs[-1].result
        figures = []
        for what, metric in (("fastest decode", DECODE), ("lowest time to first token", TTFT), ("best serving throughput", SERVING)):
            if (row := best_row(result.rows, metric)) is not None:
                figures.append((what, numbers.with_unit(metric.value(row), metric.unit), row.label))
        verdicts = tuple(f"{card.title}: {c.verdict}" for card in CARDS if (c := headline(card, result.rows)))
        runs.append(IndexRun(machine, numbers.when(result.created_at), setup_line(result), tuple(figures), verdicts,
                             f"{page.file}#{run_anchor(result)}"))  # fmt: skip
    return IndexEntry(page.title, model.model, page.file, page.description, page.facts, tuple(runs))
