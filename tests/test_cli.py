"""The CLI's user errors: one line, exit status 1, nothing run."""

import subprocess
import sys

import pytest


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
