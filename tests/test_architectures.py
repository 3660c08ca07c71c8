"""Architectures (linnet_core/arch): each registry model's config is transformers' own, its tensor layout is the
one transformers builds, every Linnet row on each tiny twin matches transformers eager in f32 through the real
harness, and a local checkpoint directory runs with no registry entry, its hostile variants refused in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from harness.bench import BenchSettings, run_bench
from harness.check import tolerance
from harness.results import load_result
from harness.workload import get_profile
from linnet_core import checkpoint
from linnet_core.arch import ARCHITECTURES, architecture, build_decoder
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError
from linnet_core.models import MODELS, get_model, local_entry
from linnet_core.rope import inverse_frequencies
from runners import RUNNERS

TWINS = ("llama-tiny", "qwen3-tiny")  # qwen2-tiny's rows are the other test files' subject
# The single-request rows every twin runs; the slow ones (compiles, serving) run on one twin each.
ROWS = ["transformers", "linnet-torch", "linnet-jax", "linnet-stablehlo", "linnet-ort-f32", "linnet-ort-f16",
        "llamacpp-linnet-gguf", "kerashub"]  # fmt: skip
SLOW_ROWS = {"llama-tiny": ["serve-linnet-cudagraphs", "serve-linnet-ort"], "qwen3-tiny": ["linnet-inductor", "serve-linnet-xla"]}


@pytest.mark.parametrize("model", list(MODELS))
def test_the_config_reads_as_transformers_reads_it(model):
    from transformers import AutoConfig

    config = MODELS[model].config
    hf = AutoConfig.for_model(**config.to_hf())
    assert type(hf).__name__ == config.architecture.HF_CLASS.replace("ForCausalLM", "Config")
    assert ModelConfig.from_hf(hf.to_dict()) == config
    assert hf.head_dim == config.head_dim if hasattr(hf, "head_dim") and hf.head_dim else True


@pytest.mark.parametrize("model", list(MODELS))
def test_the_tensor_layout_is_the_one_transformers_builds(model):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = MODELS[model].config
    with torch.device("meta"):
        hf_model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config.to_hf()))
    assert type(hf_model).__name__ == config.architecture.HF_CLASS
    shapes = {k: tuple(v.shape) for k, v in hf_model.state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    assert shapes == checkpoint.tensor_shapes(config)
    assert sum(p.numel() for p in hf_model.parameters()) == config.num_parameters  # tied: counted once by torch too


def test_each_architecture_module_holds_what_the_lookup_needs():
    for model_type in ARCHITECTURES:
        arch = architecture(model_type)
        assert arch.MODEL_TYPE == model_type and arch.HF_CLASS.endswith("ForCausalLM")
        assert callable(arch.build) and callable(arch.check) and callable(arch.hf_extras)


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = get_model("llama-3.2-1b-instruct").config
    hf = LlamaConfig(**config.to_hf())
    want = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")[0].numpy()
    got = inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)
    assert abs(got - want).max() <= 1e-6 * abs(want).max()
    assert (got < inverse_frequencies(config.head_dim, config.rope_theta)).any()  # the scaling changes something


@pytest.mark.parametrize("model", TWINS)
def test_the_twin_has_its_architecture(model):
    entry = get_model(model)
    ops = {op.kind for op in build_decoder(entry.config).block}
    names = {w.name for w in build_decoder(entry.config).all_weights()}
    if model == "llama-tiny":
        assert entry.config.rope_scaling["rope_type"] == "llama3" and "lm_head.weight" in names
        assert not any(n.endswith(".bias") for n in names)
    else:
        assert "head_norm" in ops and entry.config.head_dim * entry.config.num_attention_heads != entry.config.hidden_size


@pytest.fixture(scope="module", params=TWINS)
def twin_rows(request, tmp_path_factory, private_cache):
    entry = get_model(request.param)
    chosen = tuple(RUNNERS[r] for r in ROWS + SLOW_ROWS[entry.id])
    settings = BenchSettings(entry, chosen, get_profile("quick"), "f32", "cpu", None, tmp_path_factory.mktemp("results"))
    return entry, {r.runner: r for r in load_result(run_bench(settings)).rows}


def test_every_linnet_row_matches_transformers_on_each_twin(twin_rows):
    entry, rows = twin_rows
    new = get_profile("quick").new_tokens
    for runner, row in rows.items():
        if runner == "kerashub" and row.status == "skipped":
            assert "KerasHub" in row.reason, row.reason  # said why
            continue
        assert row.status == "ok", (runner, row.reason)
        if runner.startswith("serve-") or runner == "transformers":
            continue
        assert row.distance is not None and row.distance <= tolerance(runner, "f32", entry.id), (runner, row.distance)
        if not runner.endswith("-f16"):
            assert row.tokens_agree == new, (runner, row.tokens_agree)


def test_the_gguf_is_written_for_the_architecture(tmp_path):
    import gguf

    from linnet_core import gguf as linnet_gguf

    for model, arch, rope_freqs in (("llama-tiny", "llama", True), ("qwen3-tiny", "qwen3", False)):
        entry = get_model(model)
        source = checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
        reader = gguf.GGUFReader(linnet_gguf.export(source, tmp_path / f"{model}.gguf"))
        assert reader.fields["general.architecture"].contents() == arch
        names = {t.name for t in reader.tensors}
        assert ("rope_freqs.weight" in names) == rope_freqs
        assert ("blk.0.attn_q_norm.weight" in names) == (arch == "qwen3")
        assert ("output.weight" in names) == (not entry.config.tie_word_embeddings)


# ---- any local checkpoint ----------------------------------------------------------------------------------------


@pytest.fixture
def local_checkpoint(tmp_path, private_cache):
    """A copy of qwen3-tiny's synthetic checkpoint under a name no registry entry has."""
    entry = get_model("qwen3-tiny")
    source = checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    target = tmp_path / "My-Qwen3-Model"
    shutil.copytree(source, target)
    return target


def test_a_local_checkpoint_needs_no_registry_entry(local_checkpoint):
    entry = get_model(str(local_checkpoint))
    assert (entry.id, entry.config, entry.local_path) == ("my-qwen3-model", get_model("qwen3-tiny").config, local_checkpoint)
    config = json.loads((local_checkpoint / "config.json").read_text())
    (local_checkpoint / "config.json").write_text(json.dumps({**config, "_name_or_path": "Org/Some-Model-1B"}))
    entry = local_entry(local_checkpoint)
    assert entry.id == "some-model-1b" and entry.links == {"Hugging Face": "https://huggingface.co/Org/Some-Model-1B"}


def test_linnet_bench_runs_a_local_checkpoint(local_checkpoint, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(local_checkpoint), "--runner", "transformers",
                          "--runner", "linnet-torch", "--profile", "quick", "--out", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    [path] = (tmp_path / "results" / "my-qwen3-model").glob("*.json")
    result = load_result(path)
    assert result.weights == str(local_checkpoint)
    rows = {r.runner: r for r in result.rows}
    assert rows["linnet-torch"].status == "ok" and rows["linnet-torch"].distance <= 1e-4


def test_linnet_compiles_and_exports_a_local_checkpoint(local_checkpoint, tmp_path):
    for args in (["compile", str(local_checkpoint), "--target", "onnx", "--out", str(tmp_path / "onnx")],
                 ["export", "gguf", str(local_checkpoint), str(tmp_path / "m.gguf")]):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "linnet_core.cli", *args], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "onnx" / "model.onnx").is_file() and (tmp_path / "m.gguf").is_file()


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: (p / "config.json").unlink(), "no config.json"),
        (lambda p: (p / "config.json").write_text("{not json"), "not valid JSON"),
        (lambda p: (p / "config.json").write_text("[1, 2]"), "holds a list, not an object"),
        (lambda p: edit_config(p, model_type="mamba"),
         "architecture 'mamba' is not supported; Linnet supports qwen2, llama, qwen3"),
        (lambda p: edit_config(p, model_type=None, architectures=["GPT2LMHeadModel"]), "names no model_type"),
        (lambda p: edit_config(p, hidden_size=96), "has shape"),
        (lambda p: edit_config(p, head_dim=16), "has shape"),
        (lambda p: edit_config(p, num_hidden_layers=3), "checkpoint lacks tensor model.layers.2."),
        (lambda p: edit_config(p, num_hidden_layers=1), "checkpoint has tensor model.layers.1."),
        (lambda p: edit_config(p, attention_bias=True), "checkpoint lacks tensor model.layers.0.self_attn.q_proj.bias"),
        (lambda p: edit_config(p, num_attention_heads=3), "not a multiple of num_key_value_heads"),
        (lambda p: edit_config(p, hidden_size=-64), "hidden_size must be a positive integer"),
        (lambda p: edit_config(p, rope_theta=float("nan")), "rope_theta must be a finite number"),
        (lambda p: edit_config(p, rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling of type 'yarn'"),
        (lambda p: edit_config(p, rope_scaling={"rope_type": "llama3", "factor": "x"}), "needs a positive number factor"),
        (lambda p: edit_config(p, use_sliding_window=True), "use_sliding_window is not supported"),
        (lambda p: [f.unlink() for f in p.glob("*.safetensors")], "no .safetensors files"),
    ],
)
def test_a_hostile_local_checkpoint_is_one_line(local_checkpoint, damage, message):
    damage(local_checkpoint)
    with pytest.raises(UserError) as e:
        get_model(str(local_checkpoint))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_cli_says_an_unsupported_architecture_in_one_line(local_checkpoint):
    edit_config(local_checkpoint, model_type="gpt2")
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(local_checkpoint)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1
    assert "architecture 'gpt2' is not supported; Linnet supports qwen2, llama, qwen3" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_a_missing_directory_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint directory"):
        get_model(str(tmp_path / "nothing-here"))
