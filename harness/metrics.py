"""The metrics a row measures: one entry each, the one place their key, unit, direction and labels are written.

The regression check (harness/check.py) judges the `judged` ones, the page (harness/site/) charts and tables the
`chart` and `table` ones under their `title`, the trials (harness/trials.py) summarise the `sampled` ones over every
timed run and the others over trials, and the CLI's closing table (harness/cli.py) shows the ones with a `column`.
A new metric is a new entry here."""

from __future__ import annotations

from dataclasses import dataclass

from harness.results import Row
from harness.validate import is_number


@dataclass(frozen=True)
class Metric:
    key: str  # the field of a row's metrics, e.g. "decode_tok_s"; its spread is key_min .. key_max, its interval key_ci
    unit: str  # e.g. "tok/s"
    higher_is_better: bool  # a rate (True) or a cost: a time, a size, an energy (False)
    title: str  # the page's chart and column heading, e.g. "Decode speed"
    label: str  # the check report's column and verdict word, e.g. "decode"
    sampled: bool  # measured in each timed run (samples per run); else once per trial (each trial's value a sample)
    column: str = ""  # the CLI's closing table's heading; empty: not in that table
    chart: bool = False  # a chart of it on the page
    table: bool = False  # a column of it in the page's table
    judged: bool = True  # compared between runs by `linnet-bench check`
    unstable: bool = False  # trials that disagree on it flag the row as unstable
    memory: bool = False  # judged against the memory threshold, else the speed threshold
    # A serving metric's single-request counterpart: the reference does not serve, so check's ratios take the
    # reference's single-request figure, and the CLI's table shows a serving row's figure in that one's column.
    single: str | None = None
    better: str = "faster"  # the page's word for an advantage above 1 ...
    worse: str = "slower"  # ... and below 1

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def name(self) -> str:
        """The title in running text: "decode speed"."""
        return self.title[0].lower() + self.title[1:]

    @property
    def ratio_to(self) -> tuple[str, ...]:
        """In check's ratio mode, divided by the first of these the reference row has."""
        return (self.key, self.single) if self.single else (self.key,)

    def value(self, row: Row) -> float | None:
        """The row's measured figure; None when the row did not run or did not measure it."""
        return row.metrics.get(self.key) if row.status == "ok" else None

    def interval(self, row: Row) -> tuple[float, float, str] | None:
        """(low, high, what) around the row's figure: its 95% interval ("95% CI") when it ran in several trials, else
        the min–max of its runs ("min–max"); None when the row kept neither."""
        if self.value(row) is None:
            return None
        m = row.metrics
        ci = m.get(f"{self.key}_ci")
        several = is_number(m.get("trials")) and m["trials"] > 1
        if several and isinstance(ci, list) and len(ci) == 2 and all(is_number(v) for v in ci):
            return (min(ci), max(ci), "95% CI")
        low, high = m.get(f"{self.key}_min"), m.get(f"{self.key}_max")
        if is_number(low) and is_number(high):
            return (min(low, high), max(low, high), "min–max")
        return None

    def ratio_of(self, row: Row) -> float | None:
        """The figure when a ratio can be taken of it (positive), else None."""
        value = self.value(row)
        return value if value is not None and value > 0 else None


# In page order (charts, the table's columns, check's columns).
METRICS = (
    Metric("ttft_ms", "ms", False, "Time to first token", "TTFT", sampled=True, column="TTFT ms", chart=True,
           table=True, unstable=True),  # fmt: skip
    Metric("decode_tok_s", "tok/s", True, "Decode speed", "decode", sampled=True, column="tok/s ±95%", chart=True,
           table=True, unstable=True),  # fmt: skip
    Metric("serving_tok_s", "tok/s", True, "Serving throughput", "serve", sampled=True, chart=True, table=True,
           unstable=True, single="decode_tok_s"),  # fmt: skip
    Metric("serving_ttft_ms", "ms", False, "Serving time to first token", "serve TTFT", sampled=True, chart=True,
           table=True, unstable=True, single="ttft_ms"),  # fmt: skip
    Metric("load_s", "s", False, "Load time", "load", sampled=False, chart=True, table=True),
    # lazy compilation and session building: shown beside the load time, not judged
    Metric("first_call_s", "s", False, "First call", "first call", sampled=False, table=True, judged=False),
    Metric("peak_mem_gib", "GiB", False, "Peak memory", "mem", sampled=False, column="GiB", chart=True, table=True,
           memory=True, better="smaller", worse="larger"),  # fmt: skip
    # the host memory of the files the engine loads being written (runners.base.run_build: an ONNX or GGUF export),
    # in a process of its own: a user makes them once, apart, so they are not in the engine's peak memory above
    Metric("build_peak_mem_gib", "GiB", False, "Export peak memory", "export mem", sampled=False, judged=False,
           better="smaller", worse="larger"),  # fmt: skip
    # a GPU's energy over the timed runs per generated token (harness/energy.py)
    Metric("energy_j_per_tok", "J/tok", False, "Energy per token", "energy", sampled=True, table=True,
           better="less", worse="more"),  # fmt: skip
    Metric("serving_energy_j_per_tok", "J/tok", False, "Serving energy per token", "serve energy", sampled=True,
           single="energy_j_per_tok", better="less", worse="more"),  # fmt: skip
)
METRIC = {m.key: m for m in METRICS}
SECONDS = {"ms": 1e-3, "s": 1.0}  # the time units, in seconds
