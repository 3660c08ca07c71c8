"""Architectures (linnet_core/arch): each registry model's config is transformers' own, its tensor layout is the
one transformers builds, every Linnet row on each tiny twin matches transformers eager in f32 through the real
harness, and a local checkpoint directory runs with no registry entry, its hostile variants refused in one line."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.check import tolerance
from harness.results import load_result
from linnet_core import checkpoint
from linnet_core.arch import ARCHITECTURES, OPTIONAL, architecture, build_decoder, declared
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError
from linnet_core.models import MODELS, get_model, local_entry
from linnet_core.rope import inverse_frequencies
from linnet_core.targets import CompileOptions
from runners import RUNNERS

TWINS = ("llama-tiny", "qwen3-tiny", "gemma3-tiny", "olmo2-tiny", "phi3-tiny")  # qwen2-tiny's: other files' subject
# Every single-request row that runs on a CPU; the serving rows' engines are test_serve_backends' subject.
ROWS = ["linnet-torch", "linnet-inductor", "linnet-jax", "linnet-stablehlo", "linnet-ort-f32", "linnet-ort-f16",
        "llamacpp-linnet-gguf", "kerashub", "transformers-compiled"]  # fmt: skip
# compiles: one twin each (and OLMo 2 for inductor: norms over other widths than hidden; Phi-3: partial rotary), and
# Gemma 3 for transformers compiled (its sliding-window offset once made it recompile every step past the window,
# until the recompile limit failed the row)
SLOW_ROWS = {"linnet-inductor": ("qwen3-tiny", "olmo2-tiny", "phi3-tiny"),
             "transformers-compiled": ("llama-tiny", "gemma3-tiny")}
PEERS = {"kerashub", "transformers-compiled"}
MAY_SKIP = {"kerashub", "llamacpp-linnet-gguf"}  # may lack the architecture (the reason says so)
# Rows measured beyond their bound whose cause is not found yet: they must stay beyond it (else the test fails and
# asks to take them out), and the gap is reported here rather than hidden by a looser bound.
# (model, row) -> why it is beyond its bound, for a gap known and not yet closed. Empty: llama.cpp on llama-tiny sat
# 1.9e-4 from transformers (bound 1e-4) on random weights and is within it (4.7e-5) on the trained twin.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("model", list(MODELS))
def test_the_config_reads_as_transformers_reads_it(model):
    from transformers import AutoConfig

    config = MODELS[model].config
    hf = AutoConfig.for_model(**config.to_hf())
    assert type(hf).__name__.removesuffix("TextConfig").removesuffix("Config") == config.architecture.HF_CLASS.removesuffix("ForCausalLM")
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


@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_the_keys_a_config_json_leaves_out_default_as_transformers_defaults_them(model_type):
    from transformers import AutoConfig

    given = dict(model_type=model_type, vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
    ours, theirs = ModelConfig.from_hf(given), ModelConfig.from_hf(AutoConfig.for_model(**given).to_dict())
    computed = [f for f in vars(ours) if f not in ("bos_token_id", "eos_token_id")]  # token ids are not computed
    assert {f: getattr(ours, f) for f in computed} == {f: getattr(theirs, f) for f in computed}


def test_each_architecture_module_holds_what_the_lookup_needs():
    for model_type in ARCHITECTURES:
        arch = architecture(model_type)
        assert arch.MODEL_TYPE == model_type and arch.HF_CLASS.endswith("ForCausalLM")
        assert callable(arch.build) and callable(arch.check) and callable(arch.hf_extras)
        for name in OPTIONAL:  # each optional attribute a module declares has its default's kind
            value, default = declared(arch, name), OPTIONAL[name]
            assert callable(value) if callable(default) else value is None or isinstance(value, (str, tuple)), name


def test_a_module_may_leave_out_what_its_architecture_lacks(bare_architecture, tmp_path):
    """Without the optional attributes: the config reads, and llama.cpp's row and the GGUF export refuse in one line."""
    pytest.importorskip("llama_cpp")
    from linnet_core import gguf as linnet_gguf
    from runners.llamacpp_linnet_gguf import Runner
    from tests.exports_helpers import run_spec

    entry = get_model("qwen2-tiny")
    config = dataclasses.replace(entry.config, model_type="bare")
    assert ModelConfig.from_hf(config.to_hf()) == config
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf()))
    reason = "Linnet has no GGUF export for the bare architecture"
    assert linnet_gguf.llama_cpp_mismatch(config) == reason
    assert Runner.unavailable(run_spec(entry, "llamacpp-linnet-gguf", tmp_path, tmp_path)) == reason
    with pytest.raises(UserError, match=reason):
        linnet_gguf.export(tmp_path, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


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
    elif model == "olmo2-tiny":  # no norm before a sublayer; q and k normalised over the whole projection
        c = entry.config
        norms = {n: w.shape for n, w in build_decoder(c).weights_of_layer(0).items() if "norm" in n}
        assert norms == {"q_norm.weight": (c.num_attention_heads * c.head_dim,),
                         "k_norm.weight": (c.num_key_value_heads * c.head_dim,),
                         "post_attn_norm.weight": (c.hidden_size,), "post_mlp_norm.weight": (c.hidden_size,)}
        assert "head_norm" not in ops and c.num_key_value_heads < c.num_attention_heads and "lm_head.weight" in names
    elif model != "phi3-tiny":
        assert "head_norm" in ops and entry.config.head_dim * entry.config.num_attention_heads != entry.config.hidden_size
    if model == "phi3-tiny":  # fused q/k/v and gate/up tensors in the checkpoint, RoPE on 12 of 16 dims, LongRoPE
        decoder = build_decoder(entry.config)
        rope = next(op for op in decoder.block if op.kind == "rope").attrs
        assert rope["rotary_dim"] == 12 and rope["scaling"]["rope_type"] == "longrope"
        assert set(checkpoint.tensor_shapes(entry.config)) >= {"model.layers.0.self_attn.qkv_proj.weight",
                                                                "model.layers.0.mlp.gate_up_proj.weight"}  # fmt: skip
        assert "model.layers.0.self_attn.q_proj.weight" not in checkpoint.tensor_shapes(entry.config)
    if model == "gemma3-tiny":  # both kinds of layer, each with its own window and RoPE base
        decoder = build_decoder(entry.config)
        attention = [next(op for op in ops if op.kind == "attention").attrs for ops in decoder.blocks()]
        assert [a.get("window") for a in attention] == [8, None] and decoder.variant_of_layer() == (0, 0, 0, 0, 0, 1)
        assert "gelu_mul" in ops and decoder.prologue[0].attrs["scale"] == 8.0


def in_process(entry, runner_id, tmp_path_factory):
    """`runner_id`'s Runner for `entry`'s synthetic checkpoint under the quick profile, loaded in this process
    (the harness runs each in a child; the same calls, without a process per row)."""
    import importlib

    from tests.exports_helpers import run_spec

    ckpt = checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    spec = run_spec(entry, runner_id, ckpt, tmp_path_factory.mktemp(runner_id))
    runner_class = importlib.import_module(RUNNERS[runner_id].module).Runner
    reason = runner_class.unavailable(spec)
    if reason is not None:
        return spec, reason
    runner = runner_class(spec)
    # The StableHLO row asserts its process imported no model code; this test process has, so hide it meanwhile.
    hidden = {m: sys.modules.pop(m) for m in getattr(importlib.import_module(RUNNERS[runner_id].module), "MODEL_CODE", ())
              if m in sys.modules}  # fmt: skip
    try:
        runner.load()
    finally:
        sys.modules.update(hidden)
    return spec, runner


@pytest.fixture(scope="module")
def trained_twins(private_cache):
    """The twins' checkpoints written ahead by two child processes at once, their layers shared out evenly: each
    trains on one thread (checkpoint.train_on_corpus), so that the two use both of a 2-core machine's cores (about 35 s
    against 60 one after the other)."""
    from concurrent.futures import ThreadPoolExecutor

    halves = ([], [])
    for model in sorted(TWINS, key=lambda m: -get_model(m).config.num_hidden_layers):
        min(halves, key=lambda half: sum(get_model(m).config.num_hidden_layers for m in half)).append(model)
    code = ("import sys; from harness.registry import get_model; from linnet_core.checkpoint import synthetic_checkpoint\n"
            "for e in map(get_model, sys.argv[1:]): synthetic_checkpoint(e.id, e.config, e.checkpoint_dtype)")  # fmt: skip

    def write(models):
        done = subprocess.run([sys.executable, "-c", code, *models], cwd=Path(__file__).parent.parent, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, f"{models}: {done.stderr[-2000:]}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(write, halves))


@pytest.fixture(scope="module")
def references(trained_twins, tmp_path_factory):
    """transformers eager on each twin: its greedy tokens and its logits on the probe."""
    out = {}
    for model in TWINS:
        spec, runner = in_process(get_model(model), "transformers", tmp_path_factory)
        out[model] = greedy(runner, spec), runner.score(spec.probe, spec.probe_prefill)
    return out


def greedy(runner, spec) -> list[int]:
    return [runner.prefill(spec.prompt), *runner.decode(spec.new_tokens - 1)]


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("model", TWINS)
def test_every_linnet_row_matches_transformers_on_each_twin(model, row, references, tmp_path_factory):
    """f32: the row's logits through the cache path within the depth-scaled tolerance, its greedy tokens equal."""
    if row in SLOW_ROWS and model not in SLOW_ROWS[row]:
        pytest.skip(f"{row} runs on {', '.join(SLOW_ROWS[row])} only (its compile is slow)")
    spec, runner = in_process(get_model(model), row, tmp_path_factory)
    if isinstance(runner, str):  # unavailable: a reason, said in one line
        assert row in MAY_SKIP and "\n" not in runner, runner
        pytest.skip(runner)
    tokens, logits = references[model]
    if not row.endswith("-f16"):  # f16 rounding may flip a near tie; its distance is bounded below
        assert greedy(runner, spec) == tokens
    # scored for every row: the probe's 256 single steps run a peer's decode path well past a sliding window too
    distance = float(abs(runner.score(spec.probe, spec.probe_prefill) - logits).max())
    if row in PEERS:
        return  # a peer is measured against transformers, not held to Linnet's bound
    if (model, row) in KNOWN_GAPS:
        pytest.xfail(KNOWN_GAPS[model, row]) if distance > tolerance(row, "f32", model) else pytest.fail(
            f"{row} on {model} is within its bound ({distance:.2g}): take it out of KNOWN_GAPS")
    assert distance <= tolerance(row, "f32", model), distance
    runner.close()


def test_the_gguf_is_written_for_the_architecture(tmp_path):
    """Each architecture's llama.cpp quirks, as its module declares them: Llama's q/k rows in adjacent RoPE pairs
    and its rope_freqs, Gemma 3's norms of (1 + w) and its sliding-window keys, each family's pre-tokenizer."""
    import gguf

    from linnet_core import gguf as linnet_gguf

    for model, arch, rope_freqs, pre in (("llama-tiny", "llama", True, "llama-bpe"),
                                         ("qwen3-tiny", "qwen3", False, "qwen2"),
                                         ("gemma3-tiny", "gemma3", False, "qwen2"),
                                         ("olmo2-tiny", "olmo2", False, "qwen2")):  # fmt: skip
        entry = get_model(model)
        c = entry.config
        source = checkpoint.synthetic_checkpoint(entry.id, c, entry.checkpoint_dtype)
        reader = gguf.GGUFReader(linnet_gguf.export(source, tmp_path / f"{model}.gguf"))
        fields = {k: f.contents() for k, f in reader.fields.items()}
        assert fields["general.architecture"] == arch and fields["tokenizer.ggml.pre"] == pre
        found = {t.name: t.data.reshape(tuple(reversed(t.shape))) for t in reader.tensors}  # back to [out, in]
        assert ("rope_freqs.weight" in found) == rope_freqs
        assert ("blk.0.attn_q_norm.weight" in found) == (arch in ("qwen3", "gemma3", "olmo2"))
        assert ("blk.0.attn_norm.weight" in found) == (arch != "olmo2")  # OLMo 2: norms after, none before
        assert ("blk.0.post_ffw_norm.weight" in found) == (arch in ("gemma3", "olmo2"))
        assert ("output.weight" in found) == (not c.tie_word_embeddings)
        hf = checkpoint.load_weights(source)
        q = hf["model.layers.0.self_attn.q_proj.weight"]
        if arch == "llama":  # head 0's first pair: rows 0 and D/2 in Hugging Face's order, 0 and 1 in llama.cpp's
            assert (found["blk.0.attn_q.weight"][1] == q[c.head_dim // 2]).all()
            plain = inverse_frequencies(c.head_dim, c.rope_theta)
            divisors = plain / inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
            assert (found["rope_freqs.weight"] == divisors).all() and (divisors > 1).any()
        else:
            assert (found["blk.0.attn_q.weight"] == q).all()
        if arch != "olmo2":
            norm = hf["model.layers.0.input_layernorm.weight"]
            assert (found["blk.0.attn_norm.weight"] == (norm + 1 if arch == "gemma3" else norm)).all()
        if arch == "gemma3":
            assert fields["gemma3.attention.sliding_window"] == c.sliding_window
            sliding = [t == "sliding_attention" for t in c.layer_types]
            assert fields["gemma3.attention.sliding_window_pattern"] == sliding
            assert fields["gemma3.rope.freq_base_swa"] == c.rope_local_base_freq


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


@pytest.fixture
def transformers_olmo2(tmp_path):
    """A checkpoint written by transformers' own Olmo2ForCausalLM.save_pretrained (its config.json in transformers'
    layout: rope_parameters, dtype, no head_dim; no tokenizer), its norm weights scattered so that a misplaced norm
    shows, its weights wide enough that the logits spread over several units."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    torch.manual_seed(0)
    config = Olmo2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=0.1, bos_token_id=1000, eos_token_id=1001)  # fmt: skip
    model = Olmo2ForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(tmp_path / "OLMo-2-Local")
    return tmp_path / "OLMo-2-Local"


def test_linnet_bench_runs_a_checkpoint_transformers_wrote_for_olmo2(transformers_olmo2, tmp_path):
    config = ModelConfig.from_hf(json.loads((transformers_olmo2 / "config.json").read_text()))
    assert (config.model_type, config.rms_norm_eps, config.rope_theta, config.head_dim) == ("olmo2", 1e-5, 10_000.0, 16)
    rows = ["transformers", "linnet-torch", "linnet-jax", "linnet-ort-f32", "llamacpp-linnet-gguf", "serve-linnet-ort"]
    runners = [a for r in rows for a in ("--runner", r)]
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(transformers_olmo2), *runners, "--profile",
                          "quick", "--out", str(tmp_path / "results")], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    [path] = (tmp_path / "results" / "olmo-2-local").glob("*.json")
    result = {r.runner: r for r in load_result(path).rows}
    assert [result[r].status for r in rows] == ["ok"] * len(rows)
    assert all(result[r].distance <= 1e-4 for r in rows[1:]), {r: result[r].distance for r in rows}


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
         "architecture 'mamba' is not supported; Linnet supports qwen2, llama, qwen3, gemma3_text, olmo2, phi3"),
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
    assert "architecture 'gpt2' is not supported; Linnet supports qwen2, llama, qwen3, gemma3_text, olmo2, phi3" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_a_missing_directory_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint directory"):
        get_model(str(tmp_path / "nothing-here"))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping is not supported"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention is not supported"),
        ({"hidden_activation": "relu"}, "hidden activation 'relu' is not supported"),
        ({"layer_types": ["full_attention"]}, "layer_types must name 6 layers"),
        ({"layer_types": ["sliding_attention", "local", *["full_attention"] * 4]}, "layer_types must name"),
        ({"sliding_window": 0}, "need a positive integer sliding_window"),
        ({"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}}}, "scaled RoPE is not supported"),
    ],
)
def test_a_gemma3_config_linnet_cannot_compute_is_refused(changes, message):
    hf = {**get_model("gemma3-tiny").config.to_hf(), **changes}
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(hf)


def test_gemma3_configs_without_layer_types_follow_the_sliding_window_pattern():
    hf = get_model("gemma-3-270m-it").config.to_hf()
    del hf["layer_types"]
    assert ModelConfig.from_hf(hf) == get_model("gemma-3-270m-it").config  # every sixth layer global
    assert ModelConfig.from_hf({**hf, "sliding_window_pattern": 2}).layer_types[:2] == ("sliding_attention", "full_attention")


def test_gemma3_layouts_the_twin_does_not_cover_match_transformers(tmp_path, private_cache):
    """Alternating layers and a query_pre_attn_scalar unlike head_dim: every emitter takes them from the config."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from harness.workload import probe_ids
    from linnet_core.emit_torch import load_engine
    from linnet_core.targets import CompileOptions

    base = get_model("gemma3-tiny").config
    config = dataclasses.replace(base, num_hidden_layers=4, query_pre_attn_scalar=24,
                                 layer_types=("sliding_attention", "full_attention") * 2)  # fmt: skip
    ckpt = checkpoint.synthetic_checkpoint("gemma3-variant", config, "float32")
    probe = probe_ids(1000, 0)
    reference = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        want = reference(torch.tensor([probe])).logits[0, 23:].numpy()
    engine = load_engine(build_decoder(config), ckpt, tmp_path, CompileOptions("f32", 512, 1))
    assert abs(engine.score(probe, 24) - want).max() <= 2e-4


# ---- Phi-3: fused checkpoint tensors, partial rotary, LongRoPE ---------------------------------------------------------


@pytest.mark.parametrize("model", ["phi-4-mini-instruct", "phi3-tiny"])
def test_longrope_and_partial_rotary_match_transformers(model):
    """The inverse frequencies over the rotated dims and the attention factor on cos and sin, as transformers' rope
    init computes them for a sequence within original_max_position_embeddings (its short factors)."""
    from transformers import Phi3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from linnet_core.rope import rotation

    config = get_model(model).config
    want, want_factor = ROPE_INIT_FUNCTIONS["longrope"](Phi3Config(**config.to_hf()), "cpu")
    rope = next(op for op in build_decoder(config).block if op.kind == "rope").attrs
    got, factor = rotation(rope)
    assert got.shape == (config.rotary_dim // 2,) and config.rotary_dim < config.head_dim
    assert abs(got - want.numpy()).max() <= 1e-6 * want.numpy().max() and factor == pytest.approx(want_factor, rel=1e-12)
    assert factor > 1.0  # the factor changes something


def phi3_checkpoint(directory, **changes):
    """A checkpoint written by transformers' own Phi3ForCausalLM (its own initialisation, no tokenizer): RoPE on half
    of each head's dims, LongRoPE, an untied head."""
    from transformers import Phi3Config, Phi3ForCausalLM

    settings = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=8192, original_max_position_embeddings=2048,
                    partial_rotary_factor=0.5, pad_token_id=None, bos_token_id=256, eos_token_id=257,
                    rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [4.0] * 4})  # fmt: skip
    torch.manual_seed(0)
    model = Phi3ForCausalLM(Phi3Config(**{**settings, **changes}))
    model.save_pretrained(directory)
    return model


def test_linnet_bench_runs_a_checkpoint_transformers_wrote(tmp_path):
    """A Phi-3 directory saved by transformers runs through `linnet-bench run DIR`, its Linnet rows within 1e-4."""
    directory = tmp_path / "Tiny-Phi3"
    phi3_checkpoint(directory)
    rows = ["transformers", "linnet-torch", "linnet-jax", "linnet-ort-f32", "llamacpp-linnet-gguf"]
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(directory), *[a for r in rows for a in ("--runner", r)],
                          "--profile", "quick", "--out", str(tmp_path / "results")], capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    [path] = (tmp_path / "results" / "tiny-phi3").glob("*.json")
    result = {r.runner: r for r in load_result(path).rows}
    for row in ("linnet-torch", "linnet-jax", "linnet-ort-f32"):
        assert result[row].status == "ok" and result[row].distance <= 1e-4, (row, result[row])
    assert result["llamacpp-linnet-gguf"].status != "ok"  # refused in one line: Linnet's GGUF writes no Phi-3


def test_a_sliding_window_phi3_matches_transformers(tmp_path):
    """Phi-3-mini-4k's layout: a sliding window shorter than the model limits every layer's attention."""
    from harness.workload import probe_ids
    from linnet_core.emit_torch import load_engine
    from linnet_core.targets import CompileOptions

    model = phi3_checkpoint(tmp_path / "ckpt", sliding_window=16, rope_scaling=None, max_position_embeddings=4096)
    config = checkpoint.read_config(tmp_path / "ckpt")
    assert next(op for op in build_decoder(config).block if op.kind == "attention").attrs["window"] == 16
    probe = probe_ids(256, 0)
    with torch.no_grad():
        want = model.eval()(torch.tensor([probe])).logits[0, 23:].numpy()
    engine = load_engine(build_decoder(config), tmp_path / "ckpt", tmp_path / "out", CompileOptions("f32", 512, 1))
    assert abs(engine.score(probe, 24) - want).max() <= 1e-4


def test_the_hf_export_of_phi3_is_fused_again(tmp_path, private_cache):
    from transformers import AutoModelForCausalLM

    from linnet_core import hf

    entry = get_model("phi3-tiny")
    source = checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    out = hf.export(source, tmp_path / "export")
    assert checkpoint.header_shapes(out) == checkpoint.tensor_shapes(entry.config)  # qkv_proj and gate_up_proj whole
    ids = torch.tensor([list(range(100, 140))])
    with torch.no_grad():
        a, b = (AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)(ids).logits for d in (source, out))
    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "Phi3ForCausalLM" and torch.equal(a, b)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 5, "long_factor": [1.0] * 6}},
         "longrope needs short_factor: a list of 6 positive numbers"),
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 6, "long_factor": [1.0] * 6},
          "original_max_position_embeddings": None}, "needs an integer original_max_position_embeddings"),
        ({"partial_rotary_factor": 0.1}, "partial_rotary_factor must be in (0, 1]"),
        ({"sliding_window": "wide"}, "sliding_window must be a positive integer"),
        ({"attention_bias": True}, "Phi-3 with biases is not supported"),
    ],
)
def test_a_phi3_config_linnet_cannot_compute_is_refused(changes, message):
    hf = {**get_model("phi3-tiny").config.to_hf(), **changes}
    with pytest.raises(ValueError) as e:
        ModelConfig.from_hf({k: v for k, v in hf.items() if v is not None})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_cache_past_longropes_short_range_is_refused(tmp_path, private_cache):
    """Past original_max_position_embeddings transformers turns to the long factors; every target refuses."""
    from linnet_core.targets import compile_function

    entry = get_model("phi3-tiny")
    source = checkpoint.synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
    for target in ("torch", "jax", "onnx"):
        with pytest.raises(UserError, match="give at most 1024"):
            compile_function(target)(build_decoder(entry.config), source, tmp_path / target, CompileOptions(max_positions=2048))


def test_the_gguf_export_refuses_phi3_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "linnet_core.cli", "export", "gguf", "phi3-tiny", str(tmp_path / "m.gguf")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr
    assert "Linnet has no GGUF export for the phi3 architecture" in out.stdout + out.stderr
