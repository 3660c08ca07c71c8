"""The CLI's user errors: one line, exit status 1, nothing run."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import load_result

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_models_lists_both():
    out = cli("models")
    assert out.returncode == 0 and "qwen2.5-0.5b-instruct" in out.stdout and "qwen2-tiny" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "llama-7b"], "unknown model 'llama-7b'; known models: qwen2.5-0.5b-instruct"),
        (["run", "qwen2-tiny", "--runner", "nope"], "unknown runner 'nope'; known runners: transformers"),
        (["run", "qwen2-tiny", "--profile", "huge"], "unknown profile 'huge'; known profiles: default"),
        (["run", "qwen2-tiny", "--dtype", "f8"], "unknown dtype 'f8'"),
        (["run", "qwen2-tiny", "--weights", "/nonexistent/ckpt"], "/nonexistent/ckpt/config.json: no config.json"),
        (["run", "qwen2-tiny", "--seed", "-1"], "--seed -1: give a whole number from 0 to 4294967295"),
        (["run", "qwen2-tiny", "--seed", "99999999999999999999999"], "--seed 99999999999999999999999: give a whole number"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch"], "--peer 'linnet-torch': write RUNNER=PEER"),
        (["run", "qwen2-tiny", "--peer", "=llamacpp-linnet-gguf"], "write RUNNER=PEER"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch=" + "x" * 100_000], "write RUNNER=PEER"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch=nope\x1b[31m"], "unknown runner 'nope\\x1b[31m'"),
        (["run", "qwen2-tiny", "--peer", "transformers=linnet-torch"], "RUNNER is one of Linnet's rows and PEER another"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch=linnet-torch"], "RUNNER is one of Linnet's rows and PEER another"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch=serve-vllm"], "linnet-torch is a single row and serve-vllm a serving one"),
        (["run", "qwen2-tiny", "--peer", "linnet-torch=vllm", "--peer", "linnet-torch=llamacpp-linnet-gguf"],
         "linnet-torch already has the peer vllm"),
        (["run", "qwen2-tiny", "-r", "linnet-torch", "--peer", "linnet-torch=llamacpp-linnet-gguf"],
         "llamacpp-linnet-gguf is not among this run's rows (add --runner llamacpp-linnet-gguf)"),
    ],
)
def test_bad_input_is_one_line(args, message, tmp_path):
    out = cli(*args, "--out", str(tmp_path))
    assert out.returncode == 1, out
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stdout
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir())  # no result file for a run that never started


def test_a_checkpoint_of_another_model_is_refused(tiny_checkpoint, tmp_path):
    out = cli("run", "qwen2.5-0.5b", "--weights", str(tiny_checkpoint), "--out", str(tmp_path))
    assert out.returncode == 1 and "does not match qwen2.5-0.5b-instruct" in out.stdout


def test_the_closing_table_is_readable_at_80_columns():
    """Every row id, status and figure of a full qwen2-tiny run whole at 80 columns, intervals and flags included."""
    from rich.console import Console

    from harness.cli import summary_table
    from harness.results import Row
    from runners import RUNNERS

    rows = []
    for i, info in enumerate(RUNNERS.values()):
        status = ("ok", "skipped", "failed")[i % 3]
        metrics = {} if status != "ok" else {
            "decode_tok_s": 22914.2, "decode_tok_s_ci": [14000.0, 27000.0], "ttft_ms": 7235.1, "ttft_ms_ci": [7000.0, 7400.0],
            "serving_tok_s": 1136.2, "serving_ttft_ms": 178.3, "load_s": 0.0234567, "peak_mem_gib": 2.35}  # fmt: skip
        if info.kind != "serving":
            metrics.pop("serving_tok_s", None)
        rows.append(Row(runner=info.id, label=info.label, group=info.group, status=status, metrics=metrics,
                        distance=1.234567e-05 if status == "ok" else None, unstable=["decode_tok_s"] if i % 2 else [],
                        truth_ratio=1.0754 if status == "ok" else None))
    console = Console(width=80, record=True)
    console.print(summary_table(rows))
    text = console.export_text()
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines())
    for r in rows:
        assert any(line.startswith(f"{r.runner} ") and f" {r.status} " in line for line in text.splitlines()), r.runner
    assert "22914 ±28%!" in text and "unstable" in text and " 1.1x" in text
    measured = load_result(ROOT / "results" / "qwen2-tiny" / "20261206T071204Z.json")  # every CPU row, 3 trials
    console = Console(width=80, record=True)
    console.print(summary_table(measured.rows, "f32"))
    text = console.export_text()
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines()), text
    # 8-bit weights and f16 in an f32 run: their ratio over the f32 reference's rounding (35,000x) is not judged
    assert all(" n/a" in line for line in text.splitlines() if line.startswith(("linnet-ort-int8 ", "linnet-ort-f16 ")))
    assert " 1.9x" in next(line for line in text.splitlines() if line.startswith("linnet-torch "))


def test_the_run_display_prints_markup_from_paths_and_rows_as_written(tmp_path, monkeypatch):
    """`run --out` or `--weights` with "[/]" in it crashed after writing an empty result file; a runner id or a
    reason with "[/x]" crashed at the row's line."""
    from rich.console import Console

    import harness.cli as cli_module
    from harness.results import ResultFile, Row
    from runners import RUNNERS

    console = Console(width=400, record=True)
    monkeypatch.setattr(cli_module, "console", console)
    result = ResultFile(schema_version=2, model="qwen2-tiny", run_id="r", created_at="2026-12-04T00:00:00+00:00",
                        machine={}, workload={}, protocol={"trials": 1, "profile": "quick", "dtype": "f32", "device": "cpu"},
                        weights="/ckpt/[/]weights")  # fmt: skip
    display = cli_module.RichDisplay((RUNNERS["transformers"],))
    display.bar = cli_module.Progress(console=console)
    display.begin(result, tmp_path / "[old]" / "[/x].json")
    rows = [Row(runner="[/x]r", label="x", group="PyTorch", status="failed", reason="[/] boom\nmore"),
            Row(runner="[bold]b", label="y", group="PyTorch", status="ok", metrics={"decode_tok_s": 5.0})]  # fmt: skip
    for r in rows:
        display.finish(r)
    console.print(cli_module.summary_table(rows))
    text = console.export_text()
    assert "weights: /ckpt/[/]weights" in text and f"writing {tmp_path / '[old]' / '[/x].json'}" in text, text
    assert "failed [/x]r: [/] boom" in text and "ok [bold]b: 5.0 tok/s" in text, text
    assert "[/x]r " in text.split("runner", 1)[1] and "[bold]b " in text.split("runner", 1)[1], text


def test_a_weights_symlink_loop_and_an_out_under_a_file_are_one_line_errors(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("not a directory")
    for args, message in (
        (["--weights", tmp_path / "loop", "--out", tmp_path / "results"], f"--weights {tmp_path / 'loop'}: cannot be followed"),
        (["--runner", "transformers", "--out", tmp_path / "file" / "results"], "cannot be written (Not a directory)"),
    ):  # fmt: skip
        out = cli("run", "qwen2-tiny", *map(str, args))
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop"]


def test_the_closing_table_names_a_row_measured_on_a_busy_machine():
    from rich.console import Console

    from harness.cli import summary_table
    from harness.results import Row

    rows = [Row(runner=r, label=r, group="PyTorch", status="ok", metrics={"decode_tok_s": 100.0, "other_cpu_share": share})
            for r, share in (("linnet-torch", 0.37), ("transformers", 0.04))]  # fmt: skip
    console = Console(width=80, record=True)
    console.print(summary_table(rows))
    text = console.export_text()
    assert "linnet-torch: measured while other processes used 37% of the cores" in " ".join(text.split()), text
    assert "transformers: measured" not in text and all(len(line) <= 80 for line in text.splitlines())
