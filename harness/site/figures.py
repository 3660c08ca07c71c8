"""The plotly figures of the site, as plain JSON-ready dicts that the page's script hands to Plotly.newPlot.

A metric chart is horizontal bars, one per row, on a two-level axis (page section, row label), the best bar red.
A history chart is one line per row over the runs of a model on one machine. Text that reaches plotly is escaped:
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


@dataclass(frozen=True)
class Series:
    label: str  # the row's name
    dates: tuple[str, ...]  # ISO times of the runs that measured it
    values: tuple[float, ...]  # one per date
    texts: tuple[str, ...]  # the values as written on the page


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
    """Horizontal bars, first row on top, the value written beside each bar."""
    top = max(b.value for b in bars)
    trace = go.Bar(
        orientation="h",
        y=[[escape(b.group) for b in bars], distinct_labels(bars)],
        x=[b.value for b in bars],
        text=[escape(b.text) for b in bars],
        textposition="outside",
        cliponaxis=False,
        marker_color=[RED if b.best else GREY for b in bars],
        hovertext=[hover_text(b.hover) for b in bars],
        hoverinfo="text",
    )
    figure = go.Figure(trace)
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


def history_figure(series: list[Series], unit: str) -> dict:
    """One line per row over time; the legend toggles rows."""
    figure = go.Figure(
        [
            go.Scatter(
                x=list(s.dates),
                y=list(s.values),
                mode="lines+markers",
                name=escape(s.label),
                hovertext=[f"{escape(s.label)}<br>{escape(t)}" for t in s.texts],
                hoverinfo="text+x",
            )
            for s in series
        ]
    )
    figure.update_layout(
        height=360,
        margin=dict(l=10, r=10, t=10, b=40),
        font=FONT,
        plot_bgcolor="white",
        paper_bgcolor="white",
        template="none",
        legend=dict(orientation="v", x=1.02, y=1),
        hoverlabel=dict(bgcolor="white", font=FONT),
    )
    figure.update_xaxes(type="date", gridcolor="#e6e9ee")
    figure.update_yaxes(title_text=escape(unit), rangemode="tozero", gridcolor="#e6e9ee", automargin=True)
    return as_dict(figure)


def as_dict(figure: go.Figure) -> dict:
    """data, layout and config as plain JSON values (plotly's own encoder turns numpy arrays into lists)."""
    return {**json.loads(figure.to_json()), "config": CONFIG}
