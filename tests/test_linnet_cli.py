"""The `linnet` command line (linnet_core/cli.py): the export commands write their files; bad input is one line."""

from __future__ import annotations

import subprocess
import sys

import gguf
import pytest


def linnet(*args):
    return subprocess.run([sys.executable, "-m", "linnet_core.cli", *args], capture_output=True, text=True, timeout=300)


def test_export_hf_writes_a_checkpoint(tmp_path):
    out = linnet("export", "hf", "qwen2-tiny", str(tmp_path / "hf"))
    assert out.returncode == 0, out.stderr
    assert f"wrote {tmp_path / 'hf'}" in out.stdout
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                                   "tokenizer.json", "tokenizer_config.json"]  # fmt: skip


def test_export_gguf_writes_a_file_of_the_asked_dtype(tmp_path):
    out = linnet("export", "gguf", "qwen2-tiny", str(tmp_path / "m.gguf"), "--dtype", "q8_0")
    assert out.returncode == 0, out.stderr
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0
    assert reader.fields["general.name"].contents() == "qwen2-tiny"


def test_export_reads_a_local_checkpoint(tiny_tokenizer_checkpoint, tmp_path):
    out = linnet("export", "hf", "qwen2-tiny", str(tmp_path / "hf"), "--weights", str(tiny_tokenizer_checkpoint))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "hf" / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["hf", "llama-7b", "{tmp}/hf"], "unknown model 'llama-7b'; known models: qwen2.5-0.5b-instruct"),
        (["gguf", "llama-7b", "{tmp}/m.gguf"], "unknown model 'llama-7b'"),
        (["gguf", "qwen2-tiny", "{tmp}/m.gguf", "--dtype", "q4_k"], "unknown GGUF dtype 'q4_k'; use one of f32, f16, bf16, q8_0"),
        (["gguf", "qwen2-tiny", "{tmp}/file/m.gguf"], "cannot write the GGUF file"),
        (["hf", "qwen2-tiny", "{tmp}/file/hf"], "cannot write the export"),
        (["hf", "qwen2-tiny", "{tmp}"], "is not empty; export into a new or empty directory"),
        (["hf", "qwen2-tiny", "{tmp}/hf", "--weights", "/nonexistent/ckpt"], "/nonexistent/ckpt/config.json: no config.json"),
        (["hf", "qwen2-tiny", "{tmp}/hf", "--seed", "-1"], "--seed -1: give a whole number from 0 to 4294967295"),
        (["gguf", "qwen2-tiny", "{tmp}/m.gguf", "--seed", "99999999999999999999999"], "--seed 99999999999999999999999: give a whole"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, message):
    (tmp_path / "file").write_text("not a directory")
    out = linnet("export", *[a.format(tmp=tmp_path) for a in args])
    assert out.returncode == 1, out
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stdout
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written
