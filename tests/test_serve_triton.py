"""`linnet export triton`: the model repository's layout and config, and its model.py driving linnet.serve through
a stand-in for Triton's Python-backend module (tritonserver itself is not installed here)."""

from __future__ import annotations

import json
import py_compile
import re
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from linnet_core.serve.triton import INPUTS, OUTPUTS, TritonExport, write_repository
from tests.test_serve_engine import single_request_tokens

BACKEND = "tests.serve_reference_engine:make_engine"


@pytest.fixture(scope="module")
def repository(tmp_path_factory, tiny_checkpoint):
    out = tmp_path_factory.mktemp("triton")
    write_repository(TritonExport("qwen2-tiny", tiny_checkpoint, out, BACKEND, rows=2, positions=64, device="cpu"))
    return out


def test_the_cli_writes_the_repository_and_refuses_to_overwrite(tmp_path, tiny_checkpoint):
    def export():
        return subprocess.run([sys.executable, "-m", "linnet_core.cli", "export", "triton", "qwen2-tiny", str(tmp_path), "--device", "cpu"],
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    first = export()
    assert first.returncode == 0, first.stderr
    written = {str(Path(line.removeprefix("wrote ")).relative_to(tmp_path)) for line in first.stdout.split("\n") if line.startswith("wrote")}
    assert {"linnet/config.pbtxt", "linnet/1/model.py", "linnet/1/checkpoint/config.json",
            "linnet/1/checkpoint/model.safetensors", "linnet/1/checkpoint/generation_config.json"} <= written  # fmt: skip
    again = export()
    assert again.returncode == 1 and "already exists; remove it or choose another OUT" in again.stdout


def test_the_config_is_a_decoupled_python_model_with_linnets_settings(repository):
    text = (repository / "linnet" / "config.pbtxt").read_text()
    assert 'name: "linnet"' in text and 'backend: "python"' in text
    assert "model_transaction_policy { decoupled: true }" in text and "max_batch_size: 0" in text
    for name, dtype, _, _ in INPUTS:
        assert re.search(rf'name: "{name}" data_type: {dtype} dims: \[ -?1 \] optional: true', text), name
    for name, dtype, _ in OUTPUTS:
        assert f'name: "{name}" data_type: {dtype}' in text
    assert parameters(text) == {"model": "qwen2-tiny", "backend": BACKEND, "rows": "2", "positions": "64",
                                "dtype": "f32", "device": "cpu", "checkpoint": "checkpoint"}  # fmt: skip
    assert text.count("{") == text.count("}") and text.count("[") == text.count("]")


def parameters(pbtxt: str) -> dict[str, str]:
    return dict(re.findall(r'parameters: \{ key: "([^"]+)" value: \{ string_value: "([^"]*)" \} \}', pbtxt))


def test_model_py_compiles_and_imports_without_triton(repository):
    model_py = repository / "linnet" / "1" / "model.py"
    py_compile.compile(str(model_py), doraise=True)
    module = load_model_module(model_py)
    assert module.pb_utils is None and callable(module.TritonPythonModel)


def load_model_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"triton_model_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as Triton's loader does: dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Sender:
    """Stands in for Triton's decoupled response sender: records what was sent, and whether it was final."""

    def __init__(self, cancel_after: int | None = None):
        self.responses, self.final, self.cancel_after = [], threading.Event(), cancel_after

    def send(self, response=None, flags=0):
        self.responses.append(response)
        if flags & FakeTriton.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.final.set()

    def is_cancelled(self):
        return self.cancel_after is not None and len(self.responses) >= self.cancel_after

    def tokens(self) -> list[int]:
        return [int(t) for r in self.responses if r is not None and r.error is None for t in r.outputs["output_ids"]]


class FakeTriton(types.SimpleNamespace):
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

        def as_numpy(self):
            return self.array

    class TritonError:
        def __init__(self, message):
            self.message = message

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None):
            self.outputs, self.error = {t.name: t.array for t in output_tensors}, error

    @staticmethod
    def get_input_tensor_by_name(request, name):
        return request.inputs.get(name)


class FakeRequest:
    def __init__(self, sender: Sender, **inputs):
        self.sender = sender
        self.inputs = {name: FakeTriton.Tensor(name, np.asarray(value)) for name, value in inputs.items()}

    def get_response_sender(self):
        return self.sender


def test_model_py_streams_through_linnet_serve(repository, tiny_checkpoint):
    model_dir = repository / "linnet"
    module = load_model_module(model_dir / "1" / "model.py")
    module.pb_utils = FakeTriton
    model = module.TritonPythonModel()
    config = {"parameters": {k: {"string_value": v} for k, v in parameters((model_dir / "config.pbtxt").read_text()).items()}}
    model.initialize({"model_config": json.dumps(config), "model_repository": str(model_dir), "model_version": "1"})
    try:
        prompt = np.arange(40, 60, dtype=np.int32)
        streamed, whole, bad, cancelled = Sender(), Sender(), Sender(), Sender(cancel_after=2)
        model.execute([
            FakeRequest(streamed, input_ids=prompt, max_tokens=[6], ignore_eos=[True], stream=[True]),
            FakeRequest(whole, input_ids=prompt, max_tokens=[4], ignore_eos=[True]),
            FakeRequest(bad, max_tokens=[4]),
            FakeRequest(cancelled, input_ids=prompt, max_tokens=[40], ignore_eos=[True], stream=[True]),
        ])  # fmt: skip
        for sender in (streamed, whole, bad, cancelled):
            assert sender.final.wait(timeout=120), "no final response"
        expected = single_request_tokens(tiny_checkpoint, prompt.tolist(), 6)
        assert streamed.tokens() == expected and len(streamed.responses) >= 3  # several responses, one per step
        assert whole.tokens() == expected[:4] and len(whole.responses) == 1
        assert bad.responses[0].error.message == "send the prompt as input_ids or text_input"
        assert 2 <= len(cancelled.tokens()) < 40  # the client went away: its row was freed early
        deadline = time.monotonic() + 30
        while model.served.engine.load()["rows_busy"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model.served.engine.load() == {"rows": 2, "rows_busy": 0, "waiting": 0}
    finally:
        model.finalize()
