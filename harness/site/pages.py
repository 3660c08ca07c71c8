"""The page objects: plain view models built from the loaded context, holding only text, links and figures, so the
templates hold no computation. A model page opens with a short table of its setups (machine, dtype, profile) and their headline comparisons, then
shows one setup at a time (a selector switches; each setup has its own #anchor): its latest run's machine and protocol,
the headline cards, one chart per metric (charts.py), every number and what was not measured (table.py), and the history
of its runs with their change points (history.py); the index shows every model's setups with their headline figures and
its latest changes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.accuracy import shape_problem
from harness.bounds import reference_truth, rounding_dominates, run_layers, tolerance, truth_ratio_bound
from harness.registry import ModelEntry
from harness.results import ResultFile
from harness.site import numbers
from harness.site.charts import ChartView, history_charts, metric_chart, metric_title
from harness.site.history import RULE as CHANGE_RULE
from harness.site.history import Change
from harness.site.comparisons import CARDS, CHARTED, DECODE, SERVING, TTFT, Comparison, best_row, headline
from harness.site.context import LoadedRun, ModelRuns, machine_name
from harness.site.table import Table, Unmeasured, numbers_table, unmeasured
from linnet_core.checkpoint import UNRECORDED_RECIPE
from runners import REFERENCE

DATA_DIR = "data"  # raw result files are copied to OUT/data/<model>/<file>
# How many of a model's latest change points the index lists, and a setup's section shows before folding the rest.
INDEX_CHANGES = 5
SHOWN_CHANGES = 5
# The index's figures of a run: the best row of each of these metrics.
HEADLINE_FIGURES = (
    ("fastest decode", DECODE),
    ("lowest time to first token", TTFT),
    ("best serving throughput", SERVING),
)
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
    wins: bool  # Linnet's side is clearly ahead
    bars: tuple[CardBar, CardBar]  # Linnet's side, then the other
    interval: str | None = None  # "95% CI 1.62–1.95"; "1.03×, 95% CI 0.94–1.12" under "no clear difference"


@dataclass(frozen=True)
class RunView:
    anchor: str  # element id of the run's section
    setup: str  # machine · dtype · profile: what the section's runs share
    machine_line: str  # machine · workload · protocol · date
    setup_line: str  # profile, dtype, device, weights
    versions_line: str  # package versions, Python, driver
    synthetic: bool  # measured on synthetic weights
    weights_recipe: str  # how they were made (when synthetic)
    complete: bool  # False when the run was cut short
    download: Link  # the raw result file
    cards: tuple[CardView, ...]
    cards_left_out: str | None  # one line naming the cards whose rows were not measured
    distance_note: str  # what the distance column means for this dtype
    accuracy_note: str  # what the KL and top-1 columns mean, and what the reference's distributions look like
    charts: tuple[ChartView, ...]
    charts_left_out: str | None  # one line naming the metrics no row measured
    table: Table
    unmeasured: tuple[Unmeasured, ...]
    history: tuple[ChartView, ...]  # headline metrics over the runs of this setup (two runs or more)
    changes: tuple[Change, ...]  # the change points of its history, newest first
    earlier: tuple[Link, ...]  # every run of this setup, newest first, for download (when there are several)
    change_rule: str = CHANGE_RULE  # what a change point is, in words

    @property
    def latest_changes(self) -> tuple[Change, ...]:
        return self.changes[:SHOWN_CHANGES]

    @property
    def older_changes(self) -> tuple[Change, ...]:
        """Folded until the reader opens them: a noisy machine can show dozens."""
        return self.changes[SHOWN_CHANGES:]


@dataclass(frozen=True)
class SetupSummary:
    setup: str  # machine · dtype · profile
    anchor: str  # its section's element id
    measured: str  # when its latest run started, e.g. "2026-09-28 17:31 UTC"
    runs: str  # "3 runs"
    verdicts: tuple[str, ...]  # its headline comparisons: "vs vLLM, one request: 1.49× faster (95% CI …)"
    changes: str  # "2 change points", or "" without


@dataclass(frozen=True)
class ModelPage:
    model: str  # model id
    file: str  # path under OUT, e.g. "models/qwen2-tiny.html"
    title: str
    description: str
    facts: tuple[str, ...]  # parameters, family, license, task, tags
    links: tuple[Link, ...]
    registry: tuple[tuple[str, str], ...]  # the registry entry's architecture, as (name, value)
    runs: tuple[RunView, ...]  # the latest run of each setup: GPU setups first, then newest first
    setups: tuple[SetupSummary, ...] = ()  # one per run, in the same order: the table at the top

    @property
    def several_setups(self) -> bool:
        return len(self.runs) > 1


@dataclass(frozen=True)
class IndexRun:
    name: str  # the setup: machine · dtype · profile
    measured: str  # when the run started, e.g. "2026-09-28 17:31 UTC"
    setup: str  # profile, dtype, weights
    figures: tuple[tuple[str, str, str], ...]  # (what, value, row label): fastest decode, lowest TTFT, best serving
    verdicts: tuple[str, ...]  # "vs vLLM, one request: 1.49× faster"
    href: str  # the model page's section of this setup


@dataclass(frozen=True)
class IndexEntry:
    title: str
    model: str
    href: str
    description: str
    facts: tuple[str, ...]
    runs: tuple[IndexRun, ...]
    architecture: str = "not in the registry"  # the transformers class of its architecture, e.g. LlamaForCausalLM
    changes: tuple[Link, ...] = ()  # its latest change points, newest first, each linking to its setup


def data_file(run: LoadedRun) -> str:
    """Where the raw result file is copied, relative to OUT."""
    return f"{DATA_DIR}/{run.result.model}/{run.path.name}"


def model_file(model: str) -> str:
    return f"models/{model}.html"


def setup_anchor(setup: str) -> str:
    """The element id of a setup's section: "setup-amd-epyc-2-cores-f32-default-profile"."""
    return "setup-" + (re.sub(r"[^a-z0-9]+", "-", setup.lower()).strip("-") or "unnamed")


# ----- the model page -----


def model_page(model: ModelRuns) -> ModelPage:
    entry = model.entry
    setups = model.by_setup()
    runs = tuple(run_view(runs[-1], runs, index) for index, runs in enumerate(setups.values()))
    summaries = tuple(setup_summary(view, setup_runs) for view, setup_runs in zip(runs, setups.values()))
    if entry is None:
        return ModelPage(model.model, model_file(model.model), model.model,
                         "A model this bench's registry does not know; only its result files are shown.",
                         (), (), (), runs, summaries)  # fmt: skip
    links = tuple(Link(label, href) for label, href in entry.links.items()) + (Link("Registry entry", "#registry"),)
    return ModelPage(model.model, model_file(model.model), entry.title, entry.description, facts(entry), links,
                     registry_facts(entry), runs, summaries)  # fmt: skip


def setup_summary(view: RunView, setup_runs: tuple[LoadedRun, ...]) -> SetupSummary:
    result = setup_runs[-1].result
    changes = numbers.count(len(view.changes), "change point") if view.changes else ""
    return SetupSummary(view.setup, view.anchor, numbers.when(result.created_at),
                        numbers.count(len(setup_runs), "run"), verdicts(result), changes)  # fmt: skip


def verdicts(result: ResultFile) -> tuple[str, ...]:
    """Each headline comparison of a run in a line: "vs vLLM, one request: 1.49× faster (95% CI 1.40–1.58×)"."""
    return tuple(f"{card.title}: {c.verdict}" + (f" ({c.interval_text})" if c.interval_text else "")
                 for card in CARDS if (c := headline(card, result.rows)))  # fmt: skip


def facts(entry: ModelEntry) -> tuple[str, ...]:
    return (f"{numbers.parameters(entry.parameters)} parameters", entry.family, entry.license, entry.task, *entry.tags)


def registry_facts(entry: ModelEntry) -> tuple[tuple[str, str], ...]:
    pairs = [("id", entry.id), *(("alias", a) for a in entry.aliases)]
    if entry.hf_id:
        pairs.append(("Hugging Face repository", entry.hf_id))
    pairs.append(("checkpoint dtype", entry.checkpoint_dtype))
    pairs += [(name, str(value)) for name, value in vars(entry.config).items()]
    return tuple(pairs)


def run_view(run: LoadedRun, setup_runs: tuple[LoadedRun, ...], index: int) -> RunView:
    """The page's section for one setup: its latest run, with the history of all its runs."""
    result = run.result
    rows = result.rows
    comparisons = [(card, headline(card, rows)) for card in CARDS]
    not_compared = "; ".join(card.title for card, c in comparisons if c is None)
    charts = [chart for metric in CHARTED if (chart := metric_chart(metric, result, f"chart-{index}-{metric.key}"))]
    unmeasured_metrics = [m for m in CHARTED if all(m.value(r) is None for r in rows)]
    not_charted = ", ".join(metric_title(m, rows).lower() for m in unmeasured_metrics)
    every_run = [Link(f"{r.result.created_at} ({r.path.name})", f"../{data_file(r)}") for r in reversed(setup_runs)]
    history, changes = history_charts(setup_runs, index)
    return RunView(
        anchor=setup_anchor(run.setup),
        setup=run.setup,
        machine_line=machine_line(result),
        setup_line=setup_line(result),
        versions_line=versions_line(result),
        synthetic=result.weights == "synthetic",
        weights_recipe=weights_recipe(result),
        complete=result.complete,
        download=Link(run.path.name, f"../{data_file(run)}"),
        cards=tuple(card_view(card.title, c) for card, c in comparisons if c is not None),
        cards_left_out=f"Not shown, since their rows were not measured in this run: {not_compared}."
        if not_compared
        else None,
        distance_note=distance_note(result),
        accuracy_note=accuracy_note(result),
        charts=tuple(charts),
        charts_left_out=f"No row measured {not_charted}." if not_charted else None,
        table=numbers_table(result),
        unmeasured=tuple(unmeasured(r) for r in rows if r.status != "ok"),
        history=history,
        changes=changes,
        earlier=tuple(every_run) if len(every_run) > 1 else (),
    )


def machine_line(result: ResultFile) -> str:
    """The machine and protocol: "NVIDIA H100 80GB HBM3 · 512 prompt tokens, 128 new · batch 1 · median of 10 runs
    after 3 warm-ups · measured 2026-09-28T17:31:05+00:00"."""
    w = result.workload
    return " · ".join([
        machine_name(result),
        f"{w.get('prompt_tokens')} prompt tokens, {w.get('new_tokens')} new",
        f"batch {w.get('batch', 1)}",
        f"median of {numbers.count(w.get('runs', 0), 'run')} after {numbers.count(w.get('warmups', 0), 'warm-up')}",
        *trials_text(result),
        f"measured {result.created_at}",
    ])  # fmt: skip


def trials_text(result: ResultFile) -> list[str]:
    """ "in each of 3 trials (fresh processes, round robin), 95% intervals": how many processes each row ran in."""
    trials = result.protocol.get("trials")
    if not trials or trials < 2:
        return []
    serving = result.protocol.get("serving_trials")
    extra = f"; serving rows {numbers.count(serving, 'trial')}" if serving and serving != trials else ""
    return [f"in each of {trials} trials (fresh processes, round robin{extra}), 95% intervals"]


def setup_line(result: ResultFile) -> str:
    p = result.protocol
    weights = (
        "synthetic weights (seeded, of the model's exact shapes)"
        if result.weights == "synthetic"
        else f"weights from {result.weights}"
    )
    return f"profile {p.get('profile', '?')} · {p.get('dtype', '?')} on {p.get('device', '?')} · {weights}"


def versions_line(result: ResultFile) -> str:
    """Package versions, known stacks first, then the rest, Python and the driver: "Linnet 0.1.0, PyTorch 2.14.0, …,
    Python 3.12.3, driver 580.126.09"."""
    versions = result.machine.get("versions")
    if not isinstance(versions, dict):  # a hand-written file may hold a line of text, or nothing
        return str(versions or "")[:300]
    versions = dict(versions)
    python = versions.pop("python", None)
    known = [f"{name} {versions.pop(key)}" for key, name in VERSION_NAMES.items() if key in versions]
    parts = known + [f"{key} {value}" for key, value in versions.items()]
    parts += [f"Python {python}"] if python else []
    parts += [f"driver {result.machine['driver']}"] if result.machine.get("driver") else []
    parts += [f"CUDA {result.machine['cuda']}"] if result.machine.get("cuda") else []
    return ", ".join(parts)


def card_view(title: str, comparison: Comparison) -> CardView:
    ours, theirs, metric = comparison.ours, comparison.theirs, comparison.metric
    values = (metric.value(ours), metric.value(theirs))
    top = max(values)
    bars = tuple(
        CardBar(row.label, numbers.with_unit(value, metric.unit), 100 * value / top, row is ours)
        for row, value in zip((ours, theirs), values)
    )
    interval = comparison.interval_text
    if interval and not comparison.clear:
        interval = f"{numbers.change(comparison.ratio) if comparison.as_change else numbers.times(comparison.ratio)}, {interval}"
    return CardView(title, comparison.verdict, metric.name, comparison.clear and comparison.ratio >= 1, bars, interval)


def distance_note(result: ResultFile) -> str:
    reference = next((r.label for r in result.rows if r.runner == REFERENCE), REFERENCE)
    dtype = result.protocol.get("dtype", "")
    text = (
        "Each row also carries its distance from reference: the largest absolute difference between its logits and "
        f"those of {reference} (the reference) on the same input, through the cache path. "
    )
    why = "it is there so that a fast wrong answer cannot look like a win."
    truth = (
        " The next column measures every row, the reference too, against a truth: the same model in float64 on a CPU, "
        "fed the same tokens. It gives each row's distance from that truth as a multiple of the reference's own: a row "
        "that rounds as the reference does sits near 1x, a wrong row far above it, and if every row sits far below 1x "
        f"the reference itself is wrong. `linnet-bench check` fails a {dtype} row beyond "
        f"{truth_ratio_bound(None, dtype):g}x; rows with quantized weights, or computing in another dtype than the "
        "run's, are judged by KL and top-1 instead."
    )
    if dtype == "f32":
        bound = tolerance(REFERENCE, "f32", result.model, layers=run_layers(result))  # what `linnet-bench check` holds this model's f32 rows to
        return f"{text}In f32 a correct path stays within about {bound:.2g} on this model; {why}{truth}"
    if rounding_dominates(dtype, reference := reference_truth(result)):
        return (
            f"{text}{dtype} outputs differ by rounding, and on this model by far more than on a trained one: the "
            f"reference itself is {reference:.2g} from the float64 truth (this model amplifies each rounding), "
            "so right rows sit units from it, and their KL and top-1 against it measure rounding as much as "
            "correctness. The distance is still there so that a fast wrong answer cannot look like a win; here the "
            f"next column tells right from wrong.{truth}"
        )
    return (
        f"{text}{dtype} outputs differ by rounding (about 0.1 on logits near 16), so a small number is expected; {why}"
        + truth
    )


# ----- the index -----


def index_entry(model: ModelRuns, page: ModelPage) -> IndexEntry:
    runs = []
    for setup, setup_runs in model.by_setup().items():
        result = setup_runs[-1].result
        figures = []
        for what, metric in HEADLINE_FIGURES:
            if (row := best_row(result.rows, metric)) is not None:
                figures.append((what, numbers.with_unit(metric.value(row), metric.unit), row.label))
        runs.append(IndexRun(setup, numbers.when(result.created_at), setup_line(result), tuple(figures),
                             verdicts(result), f"{page.file}#{setup_anchor(setup)}"))  # fmt: skip
    architecture = model.entry.config.architecture.HF_CLASS if model.entry else IndexEntry.architecture
    return IndexEntry(page.title, model.model, page.file, page.description, page.facts, tuple(runs), architecture,
                      latest_changes(page))  # fmt: skip


def latest_changes(page: ModelPage) -> tuple[Link, ...]:
    """The model's newest change points over all its setups, each naming and linking to its setup."""
    found = sorted(((c, run) for run in page.runs for c in run.changes), key=lambda pair: pair[0].measured, reverse=True)
    return tuple(Link(f"{c.text} ({run.setup})", f"{page.file}#{run.anchor}") for c, run in found[:INDEX_CHANGES])


def accuracy_note(result: ResultFile) -> str:
    """What the KL and top-1 columns mean; how peaked the reference's distributions are; how synthetic weights are made."""
    shape = result.reference_distributions
    positions = f"each of the {shape['positions']} probe positions" if shape else "each probe position"
    text = (
        f"KL mean and KL p99: the KL divergence of the row's next-token distribution from the reference's at {positions} "
        "(same input, through the cache path, softmax in float64), averaged and at its 99th percentile, in nats; top-1 "
        "agreement: the share of those positions where both pick the same most likely token. Rounding and quantization "
        "move every logit a little and these figures only a little; a wrong row moves them far, in any dtype. "
    )
    text += f"The probe: {probe_text(result)}. "
    if shape:
        text += (f"Here the reference's distributions have a mean entropy of {shape['entropy_mean']:.2f} nats (a flat "
                 f"one: {shape['uniform_entropy']:.2f}) and a mean top-1 probability of {shape['top1_prob_mean']:.2f}, "
                 f"{shape_problem(shape) or 'neither flat nor one-hot'}. ")  # fmt: skip
    if result.weights == "synthetic":
        text += f"Synthetic weights are {weights_recipe(result)}; a real checkpoint's figures will differ."
    return text.strip()


def probe_text(result: ResultFile) -> str:
    """What the run's probe was: as its file records it, or (files from before it did) random token ids."""
    tokens = result.workload.get("probe_tokens")
    return result.workload.get("probe") or (f"{tokens} random token ids" if tokens else "random token ids")


def weights_recipe(result: ResultFile) -> str:
    """How the run's synthetic weights were made: as its file records it, or (files from before it did) the one
    recipe there was then."""
    return result.weights_recipe or UNRECORDED_RECIPE
