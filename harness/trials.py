"""A row's trials (fresh processes of one runner): the per-trial figures summarised into the row's metrics, samples
and unstable flags (harness/stats.py), and result files of one trial each (the gate's) merged into one run."""

from __future__ import annotations

import statistics

from harness import stats
from harness.metrics import METRICS
from harness.results import ResultFile, Row
from harness.validate import invalid_figures
from linnet_core.errors import UserError

# Figures a trial gives once (not per run): each trial's value is a sample, so they get intervals too.
PER_TRIAL = tuple(m.key for m in METRICS if not m.sampled)
# Figures measured in each timed run; a version 1 row holds them only as a median: merged as one sample per file.
SAMPLED = tuple(m.key for m in METRICS if m.sampled)
# The headline figures whose disagreement between trials flags a row as unstable.
UNSTABLE_METRICS = tuple(m.key for m in METRICS if m.unstable)
# Figures whose trials' mean is the row's: the other processes' CPU share over all of its trials (one busy trial of
# three shows, where the median would hide it).
MEAN_OVER_TRIALS = ("other_cpu_share",)


def combine_trials(metrics: list[dict], samples: list[dict]) -> tuple[dict, dict, list[str]]:
    """One row's (metrics, samples, unstable metrics) from its trials' metrics and {metric: [run values]}: sampled
    metrics are summarised over every sample (stats.summary); other figures are the median over trials (the extreme
    for *_min and *_max), words the first trial's."""
    out: dict = {}
    for key in dict.fromkeys(k for m in metrics for k in m):
        values = [m[key] for m in metrics if key in m]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if not numeric or all(v == values[0] for v in values):
            out[key] = values[0]
        elif key in MEAN_OVER_TRIALS:
            out[key] = statistics.fmean(values)
        else:
            out[key] = min(values) if key.endswith("_min") else max(values) if key.endswith("_max") else statistics.median(values)
    names = dict.fromkeys(n for s in samples for n in s)
    trials = {name: [s[name] for s in samples if s.get(name)] for name in names}
    trials.update({name: [[m[name]] for m in metrics] for name in PER_TRIAL
                   if name not in names and all(isinstance(m.get(name), (int, float)) for m in metrics)})  # fmt: skip
    trials = {name: t for name, t in trials.items() if t}
    for name, t in trials.items():
        out.update(stats.summary(name, t))
    out["trials"] = len(metrics)
    unstable = [m for m in UNSTABLE_METRICS if m in trials and stats.unstable(trials[m])]
    return out, trials, unstable


def row_trials(row: Row) -> tuple[list[dict], list[dict]]:
    """A measured row as per-trial (metrics, samples); a version 1 row is one trial whose samples are its medians."""
    if not row.samples:
        return [row.metrics], [{n: [row.metrics[n]] for n in SAMPLED if isinstance(row.metrics.get(n), (int, float))}]
    count = max(len(t) for t in row.samples.values())
    per_trial = [{n: t[j] for n, t in row.samples.items() if j < len(t)} for j in range(count)]
    return [row.metrics] * count, per_trial


def merge_runs(runs: list[ResultFile]) -> ResultFile:
    """Runs of one suite (the same rows, workload and dtype), each one or more trials, as one run whose rows hold every
    trial: what the gate compares. A row failed in any run is kept so (a failure is never noise), and its distance is
    the largest any run measured. A run given twice, or a figure that is not a measurement (NaN, infinite, a zero
    speed), is a one-line error: either would make the merged interval a lie."""
    if not runs:
        raise UserError("merge needs at least one result file")
    for other in runs[1:]:
        for key in ("model", "weights"):
            if getattr(other, key) != getattr(runs[0], key):
                raise UserError(f"merge: {key} {getattr(other, key)!r} vs {getattr(runs[0], key)!r}; merge runs of one suite")
        for key in ("prompt_tokens", "new_tokens", "batch", "runs"):
            if other.workload.get(key) != runs[0].workload.get(key):
                raise UserError(f"merge: {key} {other.workload.get(key)} vs {runs[0].workload.get(key)}; merge runs of one suite")
        if other.protocol.get("dtype") != runs[0].protocol.get("dtype"):
            raise UserError(f"merge: dtype {other.protocol.get('dtype')} vs {runs[0].protocol.get('dtype')}; merge runs of one suite")
    run_ids = [run.run_id for run in runs]
    if twice := next((r for r in run_ids if run_ids.count(r) > 1), None):
        raise UserError(f"merge: run {twice!r} is given twice; each run's trials count once (a repeat would narrow "
                        "the interval beyond what the data supports)")  # fmt: skip
    for run in runs:
        if bad := next(((row.runner, problems) for row in run.rows if (problems := invalid_figures(row))), None):
            raise UserError(f"merge: run {run.run_id!r}, row {bad[0]}: invalid figure ({'; '.join(bad[1][:2])}); "
                            "merge only measured figures")  # fmt: skip
    runners = list(dict.fromkeys(r.runner for run in runs for r in run.rows))
    rows = [merge_rows([r for run in runs for r in run.rows if r.runner == runner]) for runner in runners]
    trials = sum(run.protocol.get("trials", 1) for run in runs)
    return runs[0].model_copy(update={
        "schema_version": 2,
        "run_id": f"{runs[0].run_id}-merged-{len(runs)}",
        "created_at": max(run.created_at for run in runs),
        "complete": all(run.complete for run in runs) and all(len(run.rows) == len(runners) for run in runs),
        "merged": [run.run_id for run in runs],
        "protocol": {**runs[0].protocol, "trials": trials},
        "rows": rows,
    }, deep=True)  # fmt: skip


def merge_rows(repeats: list[Row]) -> Row:
    failed = [r for r in repeats if r.status == "failed"]  # kept whole: check then fails it
    if failed or all(r.status == "skipped" for r in repeats):
        return (failed or repeats)[0].model_copy(deep=True)
    if any(r.status == "skipped" for r in repeats):  # ok in some runs, skipped in others: not the same row
        row = next(r for r in repeats if r.status == "skipped").model_copy(deep=True)
        row.status, row.reason = "failed", f"skipped in some runs and measured in others: {row.reason}"
        return row
    row = repeats[0].model_copy(deep=True)
    distances = [r.distance for r in repeats if r.distance is not None]
    row.distance = max(distances) if distances else None
    for name, worst in (("kl_mean", max), ("kl_p99", max), ("top1_agree", min)):  # a wrong answer is never noise
        values = [getattr(r, name) for r in repeats if getattr(r, name) is not None]
        setattr(row, name, worst(values) if values else None)
    row.notes = list(dict.fromkeys(n for r in repeats for n in r.notes))
    metrics, samples = [], []
    for r in repeats:
        m, s = row_trials(r)
        metrics += m
        samples += s
    row.metrics, row.samples, row.unstable = combine_trials(metrics, samples)
    return row
