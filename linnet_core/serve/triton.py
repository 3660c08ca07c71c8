"""`linnet export triton MODEL OUT`: a Triton Inference Server model repository whose Python-backend model runs
linnet.serve, streaming (decoupled transaction policy: any number of responses per request).

    OUT/linnet/config.pbtxt        backend "python", decoupled, the inputs and outputs, linnet.serve's settings
    OUT/linnet/1/model.py          triton_model.py, verbatim
    OUT/linnet/1/checkpoint/       the Hugging Face checkpoint it serves (hard links where the file system allows)

The server's Python environment needs linnet installed (`pip install linnet[serve]` plus the backend's extra)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from linnet_core.errors import UserError

MODEL_FILE = Path(__file__).with_name("triton_model.py")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
                    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json")  # fmt: skip


@dataclass(frozen=True)
class TritonExport:
    model: str  # the model id, reported in responses
    checkpoint: Path  # the Hugging Face checkpoint directory to copy in
    out: Path  # the model repository directory
    backend: str = "torch"  # the linnet.serve backend the model runs
    rows: int = 64  # S: cache rows
    positions: int = 640  # L: positions per row
    dtype: str = "f32"  # "f32" | "f16" | "bf16"
    device: str = "cuda"  # "cuda" | "cpu"
    name: str = "linnet"  # the Triton model name (the directory under out)


# (name, Triton data type, dims, optional): prompts as token ids or text, and the sampling settings
INPUTS = (
    ("input_ids", "TYPE_INT32", "[ -1 ]", True),
    ("text_input", "TYPE_STRING", "[ 1 ]", True),
    ("max_tokens", "TYPE_INT32", "[ 1 ]", True),
    ("temperature", "TYPE_FP32", "[ 1 ]", True),
    ("top_p", "TYPE_FP32", "[ 1 ]", True),
    ("seed", "TYPE_INT64", "[ 1 ]", True),
    ("ignore_eos", "TYPE_BOOL", "[ 1 ]", True),
    ("stream", "TYPE_BOOL", "[ 1 ]", True),
)
OUTPUTS = (("output_ids", "TYPE_INT32", "[ -1 ]"), ("text_output", "TYPE_STRING", "[ 1 ]"))


def config_pbtxt(export: TritonExport) -> str:
    inputs = ",\n".join(
        f'  {{ name: "{n}" data_type: {t} dims: {d}{" optional: true" if opt else ""} }}' for n, t, d, opt in INPUTS
    )
    outputs = ",\n".join(f'  {{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in OUTPUTS)
    parameters = {"model": export.model, "backend": export.backend, "rows": export.rows, "positions": export.positions,
                  "dtype": export.dtype, "device": export.device, "checkpoint": "checkpoint"}  # fmt: skip
    params = "\n".join(f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items())
    return (
        f'name: "{export.name}"\n'
        'backend: "python"\n'
        "max_batch_size: 0  # linnet.serve batches across requests itself (continuous batching over its rows)\n"
        "model_transaction_policy { decoupled: true }  # streaming: one response per engine step that makes tokens\n"
        f"input [\n{inputs}\n]\n"
        f"output [\n{outputs}\n]\n"
        "instance_group [ { count: 1 kind: KIND_MODEL } ]  # one engine owns the device and all its rows\n"
        f"{params}\n"
    )


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def write_repository(export: TritonExport) -> list[Path]:
    """Writes the repository; returns the files written. Refuses to write over an existing model directory."""
    model_dir = Path(export.out) / export.name
    if model_dir.exists():
        raise UserError(f"{model_dir} already exists; remove it or choose another OUT")
    version = model_dir / "1"
    (version / "checkpoint").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt(export))
    shutil.copy2(MODEL_FILE, version / "model.py")
    files = [model_dir / "config.pbtxt", version / "model.py"]
    for pattern in CHECKPOINT_FILES:
        for src in sorted(Path(export.checkpoint).glob(pattern)):
            link_or_copy(src, version / "checkpoint" / src.name)
            files.append(version / "checkpoint" / src.name)
    return files
