"""The plotly figures of the site, as plain JSON-ready dicts that the page's script hands to Plotly.newPlot.

A metric chart is horizontal bars, one per row, on a two-level axis (page section, row label), the best bar red.
A bar carries its interval as a whisker where the row kept one. A history chart is one line per row over the runs of
one setup, in run order, each point with its interval, change points ringed. Text that reaches plotly is escaped:
plotly reads a few HTML tags in its strings, and result files may hold anything."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

import plotly.graph_objects as go

RED = "#d1342f"  # the best bar
GREY = "#8d99a8"  # every other bar
BAR_PX = 26  # height of one bar's band
FONT = dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=13, color="#1f2933")
CONFIG = {"displayModeBar": False, "responsive": True}
ZERO_WIDTH = "\u200b"  # U+200B, appended to a label that repeats in another section


@dataclass(frozen=True)
class Bar:
    group: str  # the page section, the axis's outer level
    label: str  # the row's name
    value: float  # the bar's length
    text: str  # the value as written on the page, e.g. "12.4 ms"
    hover: tuple[str, ...]  # lines shown on hover (plain text)
    best: bool  # drawn red
    low: float | None = None  # the whisker's ends, where the row kept an interval
    high: float | None = None


@dataclass(frozen=True)
class Series:
    label: str  # the row's name
    runs: tuple[str, ...]  # the x labels of the runs that measured it, oldest first
    values: tuple[float, ...]  # one per run
    texts: tuple[tuple[str, ...], ...]  # hover lines per run (plain)
    lows: tuple[float | None, ...]  # the interval's ends per run; None where it kept none
    highs: tuple[float | None, ...]


@dataclass(frozen=True)
class Marker:
    run: str  # the x label of the run where a row's figure changed
    value: float
    text: str  # what changed, for the hover (plain)


def escape(text: str) -> str:
    return html.escape(text, quote=False)


def hover_text(lines: tuple[str, ...]) -> str:
    return "<br>".join(escape(line) for line in lines)


def distinct_labels(bars: list[Bar]) -> list[str]:
    """The bars' labels, escaped, a repeated one made distinct by invisible zero-width spaces.

    A two-level plotly axis orders an inner label by where it first appeared in any section, so a "vLLM" under
    "Serving many requests" would be drawn before that section's other rows, next to nothing it belongs with."""
    seen: dict[str, int] = {}
    labels = []
    for b in bars:
        label = escape(b.label)
        labels.append(label + ZERO_WIDTH * seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    return labels


def bar_figure(bars: list[Bar], unit: str) -> dict:
    """Horizontal bars, first row on top, the value written beside each bar (beyond its whisker, where it has one:
    a bar's own text sits at the bar's end, where the whisker would strike it through)."""
    top = max(max(b.value, b.high or 0) for b in bars)
    y = [[escape(b.group) for b in bars], distinct_labels(bars)]
    error_x = whiskers([b.value for b in bars], [b.low for b in bars], [b.high for b in bars], "#3b4754")
    trace = go.Bar(
        orientation="h",
        y=y,
        x=[b.value for b in bars],
        text=[escape(b.text) for b in bars],
        textposition="none" if error_x else "outside",
        cliponaxis=False,
        marker_color=[RED if b.best else GREY for b in bars],
        error_x=error_x,
        hovertext=[hover_text(b.hover) for b in bars],
        hoverinfo="text",
    )
    figure = go.Figure(trace)
    if error_x:
        figure.add_trace(go.Scatter(x=[max(b.value, b.high or 0) for b in bars], y=y, mode="text",
                                    text=[escape(b.text) for b in bars], textposition="middle right",
                                    cliponaxis=False, hoverinfo="skip"))  # fmt: skip
    figure.update_layout(
        height=BAR_PX * len(bars) + 70,
        margin=dict(l=10, r=30, t=10, b=45),
        font=FONT,
        plot_bgcolor="white",
        paper_bgcolor="white",
        template="none",
        bargap=0.3,
        showlegend=False,
        hoverlabel=dict(bgcolor="white", font=FONT),
    )
    figure.update_xaxes(title_text=escape(unit), range=[0, top * 1.2], gridcolor="#e6e9ee", zeroline=False,
                        rangemode="tozero", fixedrange=True)  # fmt: skip
    figure.update_yaxes(autorange="reversed", automargin=True, dividercolor="#c5ccd6", fixedrange=True,
                        tickson="boundaries", ticklen=0)  # fmt: skip
    return as_dict(figure)


def whiskers(values: list[float], lows: list, highs: list, color: str | None = None) -> dict | None:
    """plotly error bars from each value to its interval's ends (zero where there is none); None when none has one."""
    if all(low is None for low in lows):
        return None
    whisker = dict(type="data", symmetric=False, thickness=1.2, width=3,
                   array=[max(h - v, 0) if h is not None else 0 for v, h in zip(values, highs)],
                   arrayminus=[max(v - lo, 0) if lo is not None else 0 for v, lo in zip(values, lows)])  # fmt: skip
    return whisker | ({"color": color} if color else {})


def history_figure(series: list[Series], runs: list[str], markers: list[Marker], unit: str) -> dict:
    """One line per row over the runs (x: every run of the setup, oldest first, evenly spaced), its interval as
    whiskers, on a log axis so that a step reads the same at any speed; change points ringed; the legend toggles
    rows."""
    traces = [
        go.Scatter(x=list(s.runs), y=list(s.values), mode="lines+markers", name=escape(s.label),
                   error_y=whiskers(list(s.values), list(s.lows), list(s.highs)),
                   hovertext=[hover_text(t) for t in s.texts], hoverinfo="text")
        for s in series
    ]  # fmt: skip
    if markers:
        traces.append(go.Scatter(x=[m.run for m in markers], y=[m.value for m in markers], mode="markers",
                                 name="change point", hovertext=[escape(m.text) for m in markers], hoverinfo="text",
                                 marker=dict(symbol="circle-open", size=18, color=RED,
                                             line=dict(width=2.5))))  # fmt: skip
    figure = go.Figure(traces)
    figure.update_layout(
        height=380,
        margin=dict(l=10, r=10, t=10, b=10),
        font=FONT,
        plot_bgcolor="white",
        paper_bgcolor="white",
        template="none",
        legend=dict(orientation="v", x=1.02, y=1),
        hoverlabel=dict(bgcolor="white", font=FONT),
    )
    figure.update_xaxes(type="category", categoryorder="array", categoryarray=runs, tickangle=-35,
                        gridcolor="#e6e9ee", automargin=True)  # fmt: skip
    figure.update_yaxes(title_text=escape(unit) + " (log scale)", type="log", gridcolor="#e6e9ee", automargin=True)
    return as_dict(figure)


def as_dict(figure: go.Figure) -> dict:
    """data, layout and config as plain JSON values (plotly's own encoder turns numpy arrays into lists)."""
    return {**json.loads(figure.to_json()), "config": CONFIG}
