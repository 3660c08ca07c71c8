"""The result file: one JSON document per run, versioned, written atomically, refused when its version is unknown."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.validate import MODEL_ID, header_problem, printable
from linnet_core.errors import UserError

SCHEMA_VERSION = 2
# Versions this code reads. 1: no trials, no samples, no intervals (rendered and checked as before).
READABLE_VERSIONS = (1, 2)


class PeerDuet(BaseModel):
    """A row timed in lock-step turns with the stack it replaces (harness/duet.py, `run --peer-duets`): run j of
    process pair i of each side made next to each other, so their ratio is the comparison's figure."""

    model_config = ConfigDict(extra="forbid")

    peer: str  # the other side's runner id (the row's peer)
    seconds: float  # of turns per process pair
    pairs: int  # process pairs
    ours: dict[str, list[list[float]]]  # {metric: [[run values of pair 1], ...]}: this row's
    theirs: dict[str, list[list[float]]]  # the peer's, run for run


class Row(BaseModel):
    """One stack's outcome: measured metrics, or why it was skipped or failed."""

    model_config = ConfigDict(extra="allow")

    runner: str  # the runner id (see runners/__init__.py)
    label: str  # the name on the page, e.g. "Linnet, generated PyTorch"
    group: str  # the page section, e.g. "PyTorch"
    status: Literal["ok", "skipped", "failed"]
    reason: str | None = None  # why skipped or failed (stderr tail for a crash)
    peer: str | None = None  # the runner id of the stack this row replaces
    quant: str | None = None  # the weights' quantization ("int8", "q8_0", "f16"); None: the run's dtype
    distance: float | None = None  # max |logits - reference logits|; None when not compared
    # max |logits - the float64 truth's| (runners/transformers_truth.py), and that over the reference row's own
    truth_distance: float | None = None
    truth_ratio: float | None = None
    kl_mean: float | None = None  # mean over the probe's positions of KL(reference || row), nats (harness/accuracy.py)
    kl_p99: float | None = None  # the 99th percentile of that KL over the positions
    top1_agree: float | None = None  # share of the probe's positions whose top-1 token is the reference's
    notes: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)  # ttft_ms, decode_tok_s, ... with *_min/*_max and *_ci
    # Schema 2: every timed value, {metric: [[run values of trial 1], [trial 2], ...]}; empty in version 1 files.
    samples: dict[str, list[list[float]]] = Field(default_factory=dict)
    unstable: list[str] = Field(default_factory=list)  # metrics whose trials disagree beyond stats.UNSTABLE_CV
    peer_duet: PeerDuet | None = None  # this row and its peer timed in turns (`run --peer-duets`), when asked


class ResultFile(BaseModel):
    """A whole run: where and how it ran, and a row per runner."""

    model_config = ConfigDict(extra="allow")

    schema_version: int
    model: str
    run_id: str
    created_at: str  # ISO 8601, UTC
    machine: dict[str, Any]  # cpu, gpu, driver, cuda, versions, git commit
    workload: dict[str, Any]  # prompt/new tokens, runs, warm-ups, seed, serving workload
    protocol: dict[str, Any]  # profile name, dtype, device, timeouts
    weights: str  # "synthetic" or the checkpoint path
    weights_recipe: str | None = None  # how synthetic weights were made (linnet_core.checkpoint.synthetic_recipe)
    architecture: dict[str, Any] | None = None  # model_type, layers, hidden_size, parameters (harness.bench.architecture)
    # the reference's distributions on the probe (harness.accuracy.distribution_shape): entropy, top-1 probability
    reference_distributions: dict[str, Any] | None = None
    complete: bool = True  # False while running or after an interruption: the rows so far are kept
    rows: list[Row] = Field(default_factory=list)


def write_result(result: ResultFile, path: Path) -> None:
    """Writes atomically: a reader sees the old file or the new one, never half of one; and only a file that
    load_result reads back (a header field of the wrong type or range is a one-line error, nothing written)."""
    if problem := header_problem(result.model_dump(mode="json")):
        raise UserError(f"{path}: not written: {problem}")
    try:
        text = result.model_dump_json(indent=2) + "\n"
    except ValueError as e:  # pydantic's serialization error: a lone surrogate has no UTF-8
        raise UserError(f"{path}: not written: {printable(str(e))[:200]}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # a file where a folder of the path should be, no permission, a full disk
        raise UserError(f"{path}: cannot be written ({e.strerror or e}); give a writable directory") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a result file is for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def model_named(data: dict) -> str:
    """The file's model id for a message, or MODEL when it does not hold one."""
    model = data.get("model")
    return model if isinstance(model, str) and MODEL_ID.fullmatch(model) else "MODEL"


def load_result(path: Path) -> ResultFile:
    """Reads one result file; a one-line error for a malformed file or a schema version this code does not know."""
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_dir()):  # reading a FIFO would wait for a writer forever
        raise UserError(f"{path}: not a regular file (a FIFO, socket or device); a result file is a plain file")
    try:
        text = path.read_text()
        data = json.loads(text)
        if "\\u" in text:  # an escape may be a lone surrogate ("\ud800"): valid JSON, but no text (UTF-8 has none)
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such result file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a result file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror})") from None
    except RecursionError:
        raise UserError(f"{path}: not a result file (JSON nested too deep)") from None
    except UnicodeEncodeError:
        raise UserError(f"{path}: not a result file (a lone surrogate escape, e.g. \\ud800: not Unicode text)") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, or an integer of more than 4300 digits
        raise UserError(f"{path}: not a JSON result file ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UserError(f"{path}: not a result file (no schema_version)")
    version = data["schema_version"]
    if type(version) is not int or version not in READABLE_VERSIONS:  # 2.0 and true equal 2 and 1
        raise UserError(
            f"{path}: result schema version {repr(version)[:20]} is not known to this Linnet Bench (it reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}); re-run `linnet-bench run {model_named(data)}` "
            "or use a matching release"
        )
    if problem := header_problem(data):
        raise UserError(f"{path}: malformed result file: {problem}")
    try:
        return ResultFile.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = printable(".".join(str(p) for p in first["loc"]))[:200]  # keys are the file's own text
        raise UserError(f"{path}: malformed result file: {where}: {printable(first['msg'])[:200]}") from None
    except RecursionError:  # pydantic walking a field nested thousands deep
        raise UserError(f"{path}: not a result file (a field nested too deep)") from None


def result_paths(directory: Path) -> list[Path]:
    """The result files under a directory: results/<model>/<run-id>.json, sorted by path."""
    return sorted(Path(directory).glob("*/*.json"))  # a directory named *.json too: load_result says what it is


def load_results(directory: Path) -> list[ResultFile]:
    """Every result file under a directory (results/<model>/<run-id>.json), oldest first."""
    return sorted((load_result(f) for f in result_paths(directory)), key=lambda r: r.created_at)
