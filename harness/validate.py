"""Which figures of a result row are valid: finite numbers where numbers belong, positive where a zero or a negative
means nothing was measured. `check` fails a row with an invalid figure, the bench marks a row that measured one as
failed, and the site shows such a figure as not measured; no code compares or ranks a NaN, an infinity or a string.

A row's figures: `distance` (>= 0), every entry of `metrics` (speeds and judged times > 0, other figures >= 0, the few
text entries in TEXT_METRICS as strings), `<metric>_ci` intervals ([low, high], low <= high, or null when not
computed), the flags in FLAG_METRICS as booleans, and `samples` (nested lists or maps of numbers), in the row or in its metrics. Unknown numeric metrics
are allowed: they only have to be finite and not negative."""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from linnet_core.errors import printable  # noqa: F401 (its home; harness code imports it from here too)

TEXT_METRICS = {"mem_kind"}  # metrics that are words, not figures ("host" or "gpu" memory)
FLAG_METRICS = {"mem_is_setting"}  # metrics that are true or false (the memory figure is a setting, not a need)
# Zero is not a measurement of these: every speed (and its spread), and the medians of the times `check` judges.
# Other times may be 0 (an inter-token gap when two tokens arrive in one chunk).
POSITIVE_TIMES = {"ttft_ms", "serving_ttft_ms", "load_s"}
SAMPLE_FIELDS = ("samples",)  # raw timings, kept per run


def is_number(value: Any) -> bool:
    """A finite int or float that fits a float; bool is not a figure."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer of hundreds of digits
        return False


def base_name(key: str) -> str:
    """decode_tok_s_min -> decode_tok_s: the spread's ends follow their median's rule."""
    for suffix in ("_min", "_max", "_p50", "_p90", "_p99"):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def figure_problem(key: str, value: Any) -> str | None:
    """Why one metric's value is not a valid figure, or None when it is."""
    if key in TEXT_METRICS:
        return None if isinstance(value, str) else f"{key} is {describe(value)}, not a word"
    if key in FLAG_METRICS:
        return None if isinstance(value, bool) else f"{key} is {describe(value)}, not true or false"
    if key.endswith("_ci"):
        return interval_problem(key, value)
    if key in SAMPLE_FIELDS:
        return samples_problem(key, value)
    if not is_number(value):
        return f"{key} is {describe(value)}, not a finite number"
    if (base_name(key).endswith("_tok_s") or key in POSITIVE_TIMES) and value <= 0:
        return f"{key} is {value!r}, not above 0"
    if value < 0:
        return f"{key} is {value!r}, below 0"
    return None


def interval_problem(key: str, value: Any) -> str | None:
    if value is None:
        return None  # not computed (too few runs)
    if not (isinstance(value, list) and len(value) == 2 and all(is_number(v) for v in value) and value[0] <= value[1]):
        return f"{key} is {describe(value)}, not an interval [low, high] of finite numbers"
    return None


def samples_problem(key: str, value: Any, depth: int = 0) -> str | None:
    """Nested lists (or maps of lists) of finite numbers >= 0 (timed values), at most a few levels deep."""
    if depth > 4:
        return f"{key} is nested too deep"
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return None if depth > 0 and is_number(value) and value >= 0 else f"{key} holds {describe(value)}, not timings (numbers >= 0)"
    return next((p for v in items if (p := samples_problem(key, v, depth + 1))), None)


def invalid_figures(row: Any) -> list[str]:
    """Every invalid figure of a row (a results.Row or its dict), one phrase each: "decode_tok_s is nan, ..."."""
    data = row if isinstance(row, dict) else row.model_dump()
    problems = []
    distance = data.get("distance")
    if distance is not None and not (is_number(distance) and distance >= 0):
        problems.append(f"distance is {describe(distance)}, not a finite number >= 0")
    for name, high in (("kl_mean", math.inf), ("kl_p99", math.inf), ("top1_agree", 1.0),  # harness/accuracy.py
                       ("truth_distance", math.inf), ("truth_ratio", math.inf)):  # harness/bench.py
        value = data.get(name)
        if value is not None and not (is_number(value) and 0 <= value <= high):
            problems.append(f"{name} is {describe(value)}, not a finite number in [0, {high:g}]")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict):
        return [*problems, f"metrics is {describe(metrics)}, not a map"]
    problems += [p for key, value in metrics.items() if (p := figure_problem(printable(str(key))[:100], value))]
    problems += [p for key in SAMPLE_FIELDS if key in data and (p := samples_problem(key, data[key]))]
    duet = data.get("peer_duet")
    if isinstance(duet, dict) and (p := samples_problem("peer_duet", {k: duet.get(k) for k in ("ours", "theirs")})):
        problems.append(p)
    return problems


# Fields of a result file's header that code computes with, and the types they must have when present.
HEADER_TYPES = {
    "protocol": {"dtype": str, "profile": str, "device": str},
    "workload": {"prompt_tokens": int, "new_tokens": int, "batch": int, "runs": int, "warmups": int, "seed": int,
                 "max_positions": int},
    "machine": {"cpu": str, "gpu": str, "driver": str, "cuda": str, "cpu_cores": int},
    "architecture": {"model_type": str, "layers": int, "hidden_size": int, "parameters": int},
}  # fmt: skip


# A model id names a page file (models/<model>.html) and a results folder, so it is a plain name: no slashes, no "..".
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
LONGEST_HEADER_TEXT = 500


LONGEST_PATH = 4096  # the weights' path: Linux's PATH_MAX
LONGEST_REASON = 20_000  # why a row failed: a child's stderr tail is 2,000 characters
LONGEST_NOTE, MOST_NOTES = 1000, 100
ROW_NAMES = ("runner", "label", "group", "peer", "quant")  # a row's names: in messages, tables and page headings


def header_problem(data: dict) -> str | None:
    """The first known header field of the wrong type ("protocol.dtype is a list [], not a str"), or None. None
    stands for "not recorded" everywhere; machine.versions may be anything (the site shows what it can). Text fields
    are one short line: they end up in one-line messages and on pages. Then the rows' texts (rows_problem)."""
    version = data.get("schema_version")
    if type(version) is not int:  # 2.0 and true equal 2 and 1, but no writer writes them
        return f"schema_version is {describe(version)}, not a whole number"
    model = data.get("model")
    if isinstance(model, str) and not MODEL_ID.fullmatch(model):
        return f"model is {describe(model)}, not a model id (letters, digits, '.', '_', '-')"
    created = data.get("created_at")
    if isinstance(created, str) and not is_time(created):
        return f"created_at is {describe(created)}, not an ISO 8601 time (2026-12-04T20:25:00+00:00)"
    workload = data.get("workload")
    texts = {"run_id": (data.get("run_id"), 200), "weights": (data.get("weights"), LONGEST_PATH),
             "weights_recipe": (data.get("weights_recipe"), LONGEST_HEADER_TEXT),  # printed on the page as they are
             "workload.probe": (workload.get("probe") if isinstance(workload, dict) else None, LONGEST_HEADER_TEXT)}  # fmt: skip
    for name, (text, longest) in texts.items():
        if text is not None and not (isinstance(text, str) and len(text) <= longest and text.isprintable()):
            return f"{name} is {describe(text)}, not one printable line of at most {longest} characters"
    for section, fields in HEADER_TYPES.items():
        values = data.get(section)
        if not isinstance(values, dict):
            continue  # the schema's own validation says so
        for key, kind in fields.items():
            value = values.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                return f"{section}.{key} is {describe(value)}, not a {'string' if kind is str else 'whole number'}"
            if kind is int and value is not None and not 0 <= value < 2**63:
                return f"{section}.{key} is {describe(value)}, out of range"
            if kind is str and value is not None and (len(value) > LONGEST_HEADER_TEXT or not value.isprintable()):
                return f"{section}.{key} is {describe(value)}, not one printable line of at most {LONGEST_HEADER_TEXT} characters"
    return rows_problem(data.get("rows"))


def rows_problem(rows: Any) -> str | None:
    """A row name that is not one short printable line, a reason or notes beyond their size, or two rows of one
    runner (a failed copy and an ok one: which would be judged?), or None. Types are the schema's to check."""
    if not isinstance(rows, list):
        return None
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            continue
        for key in ROW_NAMES:
            text = row.get(key)
            if isinstance(text, str) and not (len(text) <= LONGEST_HEADER_TEXT and text.isprintable()):
                return f"rows.{i}.{key} is {describe(text)}, not one printable line of at most {LONGEST_HEADER_TEXT} characters"
        reason, notes = row.get("reason"), row.get("notes")
        if isinstance(reason, str) and len(reason) > LONGEST_REASON:
            return f"rows.{i}.reason has {len(reason)} characters, more than {LONGEST_REASON}"
        if isinstance(notes, list) and (len(notes) > MOST_NOTES or any(isinstance(n, str) and len(n) > LONGEST_NOTE for n in notes)):
            return f"rows.{i}.notes: more than {MOST_NOTES} notes or a note of more than {LONGEST_NOTE} characters"
        runner = row.get("runner")
        if isinstance(runner, str):
            if runner in seen:
                return f"rows {seen[runner]} and {i} are both {describe(runner)}: one row per runner"
            seen[runner] = i
    return None


def is_time(text: str) -> bool:
    """Whether text is an ISO 8601 date and time (what created_at holds)."""
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def valid_metrics(metrics: dict) -> dict:
    """The metrics without their invalid figures: what a page may show and rank."""
    return {k: v for k, v in metrics.items() if figure_problem(str(k), v) is None}


def describe(value: Any) -> str:
    """A value as a short phrase for a one-line message."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)  # nan, inf
    if isinstance(value, (int, bool)):
        return repr(value) if len(str(value)) < 30 else "a huge integer"
    text = repr(value)
    kind = type(value).__name__
    return f"a {kind} {text[:40]}{'…' if len(text) > 40 else ''}"
