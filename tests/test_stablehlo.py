"""Linnet's StableHLO export (linnet_core.export_stablehlo) and its runtime (linnet_core.stablehlo_engine): the
artefacts `linnet compile --target stablehlo` writes, the cache donation surviving the export, a fresh process
running them with no model code, and the linnet-stablehlo row against the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from harness.bench import BenchSettings, run_bench
from harness.results import load_result
from harness.workload import get_profile
from linnet_core.emit_jax import import_module, write_module
from linnet_core.errors import UserError
from linnet_core.arch import build_decoder
from linnet_core.stablehlo_engine import read_manifest
from runners import RUNNERS

ROWS, POSITIONS = 2, 64
PROMPTS = {0: [11, 22, 33, 44, 55], 1: list(range(100, 131))}  # rows at different positions


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory, private_cache):
    out = tmp_path_factory.mktemp("stablehlo")
    command = [sys.executable, "-m", "linnet_core.cli", "compile", "qwen2-tiny", "--target", "stablehlo", "--out", str(out),
               "--max-positions", str(POSITIONS), "--rows", str(ROWS)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_manifest_describes_the_calling_convention(artefacts, tiny):
    manifest = read_manifest(artefacts)
    assert sorted(p.name for p in artefacts.iterdir()) == ["decode_step.jaxexport", "decode_steps.jaxexport", "manifest.json", "prefill.jaxexport"]
    assert manifest["rows"] == ROWS and manifest["max_positions"] == POSITIONS and manifest["platforms"] == ["cpu", "cuda"]
    hf_names = [hf for w in manifest["weights"] for hf in w["hf_names"]]
    assert sorted(hf_names) == sorted(w.hf_name for w in build_decoder(tiny.config).all_weights())  # each once
    assert manifest["cache"]["layers"] == tiny.config.num_hidden_layers


def test_the_cache_donation_survives_the_export(artefacts):
    import jax

    manifest = read_manifest(artefacts)
    for name, entry in manifest["functions"].items():
        exported = jax.export.deserialize(bytearray((artefacts / entry["file"]).read_bytes()))
        main = next(line for line in exported.mlir_module().splitlines() if "func.func public @main" in line)
        # every cache array is an input aliased to an output: XLA may (and, donated, does) write it in place
        assert main.count("tf.aliasing_output") == 2 * manifest["cache"]["layers"], (name, main)
        assert entry["donate_argnums"] == [1]


FRESH_PROCESS = """
    import json, sys
    from linnet_core.stablehlo_engine import load_engine
    engine = load_engine(sys.argv[1], sys.argv[2])
    prompts = {int(k): v for k, v in json.loads(sys.argv[3]).items()}
    tokens = {row: [engine.prefill(row, prompt)] for row, prompt in prompts.items()}
    before = engine.cache[0][0]
    pointer = before.unsafe_buffer_pointer()
    for _ in range(5):
        ids = engine.step()
        for row in tokens:
            tokens[row].append(int(ids[row]))
    for ids in engine.generate(4):  # the exported while loop continues where the steps left off
        for row in tokens:
            tokens[row].append(int(ids[row]))
    in_place = before.is_deleted() and engine.cache[0][0].unsafe_buffer_pointer() == pointer
    model_code = [m for m in sys.modules if m in ("linnet_core.graph", "linnet_core.emit_jax", "linnet_core.export_stablehlo")]
    print(json.dumps({"tokens": tokens, "in_place": in_place, "model_code": model_code}))
"""


def test_a_fresh_process_runs_the_artefacts_without_model_code(artefacts, tiny, tiny_checkpoint, tmp_path):
    script = [sys.executable, "-c", textwrap.dedent(FRESH_PROCESS), str(artefacts), str(tiny_checkpoint), json.dumps(PROMPTS)]
    done = subprocess.run(script, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["in_place"] and result["model_code"] == []
    # The same tokens as the generated JAX module, one row at a time.
    module = import_module(write_module(build_decoder(tiny.config), tmp_path), "linnet_reference_jax")
    weights = module.load_weights(tiny_checkpoint)
    for row, prompt in PROMPTS.items():
        engine = module.Engine(weights, rows=1, max_positions=POSITIONS)
        expected = [engine.prefill(0, prompt), *(int(engine.step()[0]) for _ in range(9))]
        assert result["tokens"][str(row)] == expected


def test_an_unreadable_manifest_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match="run `linnet compile --target stablehlo`"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "linnet-stablehlo", "version": 99}))
    with pytest.raises(UserError, match="this Linnet reads linnet-stablehlo v2"):
        read_manifest(tmp_path)


def test_the_linnet_stablehlo_row_matches_the_reference(tiny, tmp_path):
    settings = BenchSettings(tiny, (RUNNERS["linnet-stablehlo"],), get_profile("quick"), "f32", "cpu", None, tmp_path)
    [row] = load_result(run_bench(settings)).rows
    assert row.status == "ok", row.reason
    assert row.group == "JAX" and row.peer == "kerashub" and row.label == "Linnet, XLA (StableHLO)"
    assert 0 < row.distance <= 1e-4
    assert row.tokens_agree == get_profile("quick").new_tokens
    assert row.metrics["compile_s"] > 0 and any("separate process" in n for n in row.notes)
    assert row.metrics["build_peak_mem_gib"] > 0.05  # the compile's memory, apart from the row's peak
