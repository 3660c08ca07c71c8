"""The ONNX emitter: checked models in every dtype, every weight stored once (the head reads the embedding), a cache
written at positions rather than grown, f32 statistics inside half graphs, and `linnet compile --target onnx`
artefacts that ONNX Runtime loads in a fresh process."""

from __future__ import annotations

import collections
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest

from linnet_core.emit_onnx import DATA_FILE, MODEL_FILE, write_onnx
from linnet_core.arch import build_decoder
from linnet_core.fuse import Fused, parallel_linears
from linnet_core.targets import CompileOptions, compile_function

ROWS, POSITIONS = 2, 64


@pytest.fixture(scope="module")
def models(tiny, tiny_checkpoint, tmp_path_factory):
    """dtype -> the tiny model's model.onnx, over a cache of 2 rows x 64 positions ("f32-fused", "f16-fused": with
    ONNX Runtime's GroupQueryAttention)."""
    out = tmp_path_factory.mktemp("onnx")
    decoder = build_decoder(tiny.config)
    paths = {}
    for name in ("f32", "f16", "bf16", "f32-fused", "f16-fused"):
        options = CompileOptions(name.split("-")[0], POSITIONS, ROWS, fused_attention=name.endswith("-fused"))
        files = write_onnx(decoder, tiny_checkpoint, out / name, options)
        assert [f.name for f in files] == [MODEL_FILE, DATA_FILE] and all(f.stat().st_size > 0 for f in files)
        paths[name] = files[0]
    return paths


def graph_of(path) -> onnx.GraphProto:
    return onnx.load(str(path), load_external_data=False).graph


def consumers(graph, value):
    return [n for n in graph.node if value in n.input]


def test_the_target_is_registered():
    assert compile_function("onnx") is write_onnx


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f32-fused", "f16-fused"])
def test_onnx_checker_passes(models, dtype):
    onnx.checker.check_model(str(models[dtype]), full_check=True)  # raises on an invalid model


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f32-fused"])
def test_every_weight_is_stored_once_and_the_head_reads_the_embedding(models, tiny, dtype):
    graph = graph_of(models[dtype])
    decoder = build_decoder(tiny.config)
    weights = {t.name: t for t in graph.initializer if not t.name.startswith(("const.", "rope."))}
    # parallel linears read one initializer: their weights concatenated ("layers.0.qkv_proj.weight")
    fused = {part: name for item in parallel_linears(decoder.block) if isinstance(item, Fused)
             for name, parts in item.weights.items() for part in parts}  # fmt: skip
    layers = {f"layers.{n}.{fused.get(w, w)}" for n in range(tiny.config.num_hidden_layers) for w in decoder.weights_of_layer(n)}
    assert set(weights) == {w.name for w in decoder.global_weights} | layers
    assert {"layers.0.qkv_proj.weight", "layers.0.qkv_proj.bias", "layers.0.gate_up_proj.weight"} <= set(weights)
    assert sum(math.prod(t.dims) for t in weights.values()) == tiny.config.num_parameters
    embed = weights["embed.weight"]
    assert list(embed.dims) == [tiny.config.vocab_size, tiny.config.hidden_size]
    assert sorted(n.op_type for n in consumers(graph, "embed.weight")) == ["Gather", "Gemm"]
    # nothing else is vocabulary-sized: no second copy of the head
    assert [t.name for t in graph.initializer if tiny.config.vocab_size in t.dims] == ["embed.weight"]


@pytest.mark.parametrize("form, writer", [("f32", "ScatterElements"), ("f32-fused", "GroupQueryAttention")])
def test_each_layers_cache_is_an_input_and_an_output_written_by_one_node(models, tiny, form, writer):
    graph = graph_of(models[form])
    c = tiny.config
    shape = [0, c.num_key_value_heads, POSITIONS, c.head_dim]  # 0: B, the rows the caller binds

    def dims(v):
        return [d.dim_value for d in v.type.tensor_type.shape.dim]

    names = [f"{layer}.{kv}" for layer in range(c.num_hidden_layers) for kv in ("key", "value")]
    assert [i.name for i in graph.input] == ["tokens", "positions", *(f"past_key_values.{n}" for n in names)]
    assert [o.name for o in graph.output][3:] == [f"present.{n}" for n in names]
    assert all(dims(v) == shape for v in [*graph.input[2:], *graph.output[3:]])
    # each past is read by one node, the one that writes its present (so the two may share a buffer)
    for n in names:
        [reader] = consumers(graph, f"past_key_values.{n}")
        assert reader.op_type == writer and f"present.{n}" in reader.output
    # one token id per row leaves the graph as an int64 argmax; logits only for scoring
    [argmax] = [n for n in graph.node if "next_tokens" in n.output]
    assert argmax.op_type == "ArgMax"


def test_half_graphs_keep_norm_and_softmax_statistics_in_f32(models):
    for dtype in ("f16", "bf16"):
        model = onnx.shape_inference.infer_shapes(onnx.load(str(models[dtype]), load_external_data=False))
        types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.input]}
        stats = [n for n in model.graph.node if n.op_type in ("Softmax", "ReduceMean")]
        assert len(stats) == 2 + 5  # a softmax per layer, a norm twice per layer and once at the end
        assert all(types[n.input[0]] == onnx.TensorProto.FLOAT for n in stats), dtype
        matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
        assert all(types[n.input[0]] != onnx.TensorProto.FLOAT for n in matmuls), dtype  # the compute is half


FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np, onnxruntime as ort
    assert "linnet_core" not in sys.modules
    path, tokens = sys.argv[1], json.loads(sys.argv[2])
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {"tokens": np.array([tokens]), "positions": np.arange(len(tokens))[None]}
    for cache in session.get_inputs()[2:]:
        dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}[cache.type]
        feeds[cache.name] = np.zeros([1, *cache.shape[1:]], dtype)
    next_tokens, next_positions, logits = session.run(None, feeds)[:3]
    print(json.dumps({"next": int(next_tokens[0, 0]), "position": int(next_positions[0, 0]), "argmax": int(logits[0].argmax())}))
""")


@pytest.mark.parametrize("dtype, flags", [("f32", []), ("f16", []), ("f32", ["--fused-attention"])])
def test_linnet_compile_writes_models_that_onnx_runtime_loads_in_a_fresh_process(tiny_checkpoint, tmp_path, dtype, flags):
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "artefacts"
    compile_ = subprocess.run(
        [sys.executable, "-m", "linnet_core.cli", "compile", "qwen2-tiny", "--target", "onnx", "--dtype", dtype,
         "--out", str(out), "--max-positions", "32", *flags],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert compile_.returncode == 0, compile_.stderr
    assert f"wrote {out / MODEL_FILE}" in compile_.stdout.replace("\n", "")
    tokens = [3, 141, 59, 265, 358, 979, 323, 846]
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(out / MODEL_FILE), json.dumps(tokens)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        expected = int(model(torch.tensor([tokens])).logits[0, -1].argmax())
    assert result == {"next": expected, "position": len(tokens), "argmax": expected}


def test_weights_in_bf16_checkpoints_are_read_without_torch(tiny, tmp_path, untrained):
    """A bf16 checkpoint (as the 0.5B's is) emits the same f32 model as its f32 values do."""
    from linnet_core.checkpoint import load_weights, synthetic_checkpoint

    ckpt = synthetic_checkpoint(tiny.id, tiny.config, "bfloat16", cache=tmp_path)
    tensors = load_weights(ckpt, "np")
    assert str(tensors["model.embed_tokens.weight"].dtype) == "bfloat16"
    [path, _] = write_onnx(build_decoder(tiny.config), ckpt, tmp_path / "out", CompileOptions("f32", 32, 1))
    embed = onnx.numpy_helper.to_array(
        next(t for t in onnx.load(str(path)).graph.initializer if t.name == "embed.weight")
    )
    np.testing.assert_array_equal(embed, tensors["model.embed_tokens.weight"].astype(np.float32))


def test_fused_attention_is_refused_for_another_target_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "linnet_core.cli", "compile", "qwen2-tiny", "--target", "torch", "--out",
         str(tmp_path / "out"), "--fused-attention"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 1 and out.stdout.strip() == "error: --fused-attention is for the onnx target, not torch", out
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()


def test_the_fused_graph_has_a_few_contrib_nodes_a_layer_where_the_plain_one_has_many(models, tiny):
    """Per layer: one GroupQueryAttention, a RotaryEmbedding for q and one for k, and each residual add with the
    RMSNorm after it as one SkipSimplifiedLayerNormalization (all but the last, which the head's Gather reads)."""
    layers = tiny.config.num_hidden_layers
    fused = collections.Counter(n.op_type for n in graph_of(models["f32-fused"]).node)
    plain = collections.Counter(n.op_type for n in graph_of(models["f32"]).node)
    assert fused["GroupQueryAttention"] == layers and fused["RotaryEmbedding"] == 2 * layers
    assert fused["SkipSimplifiedLayerNormalization"] == 2 * layers - 1
    assert not {"GroupQueryAttention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization"} & set(plain)
    assert sum(fused.values()) < sum(plain.values()) / 2


EMIT_MEMORY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import psutil
    from harness.memory import own_peak_rss_bytes
    from linnet_core.arch import build_decoder
    from linnet_core.checkpoint import read_config
    from linnet_core.emit_onnx import write_onnx
    from linnet_core.targets import CompileOptions

    checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2])
    decoder = build_decoder(read_config(checkpoint))
    before = psutil.Process().memory_info().rss
    write_onnx(decoder, checkpoint, out, CompileOptions("f32", 64, 1))
    print(json.dumps({"growth": own_peak_rss_bytes() - before}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak resident memory from /proc")
def test_emitting_a_model_takes_a_fraction_of_its_weights_in_memory(tiny, tmp_path):
    """write_onnx streams each tensor to the data file as it is made: its peak memory in a fresh process grows by
    well under the weights' size. Holding them (the arrays, their initializers, onnx.helper's copies into the graph
    and the model) grew it by about 3.5x the weights on the full-size shapes, more than the running session needs."""
    import dataclasses

    from linnet_core.checkpoint import synthetic_checkpoint

    # ~80M parameters in f32 (308 MiB) over 6 layers: the largest tensor (a fused gate/up) is a tenth of the weights
    config = dataclasses.replace(tiny.config, vocab_size=8192, hidden_size=1024, intermediate_size=3072,
                                 num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, head_dim=None)  # fmt: skip
    checkpoint = synthetic_checkpoint("emit-memory", config, "float32", cache=tmp_path)
    weights = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors"))
    run = subprocess.run([sys.executable, "-c", EMIT_MEMORY, str(checkpoint), str(tmp_path / "onnx")],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    growth = json.loads(run.stdout)["growth"]
    assert (tmp_path / "onnx" / DATA_FILE).stat().st_size >= weights * 0.95
    assert growth < 0.5 * weights, f"emitting {weights / 2**20:.0f} MiB of weights grew the process by {growth / 2**20:.0f} MiB"


def test_an_emit_that_fails_part_way_leaves_no_model_over_its_data(tiny, tiny_checkpoint, tmp_path):
    """A second emit into the same directory truncates model.onnx.data first; when it then fails (here a checkpoint
    whose weights file was cut short), the earlier model.onnx must not stay behind reading the half-written data. The
    error is the checkpoint's, in one line."""
    import shutil

    from linnet_core.errors import UserError

    decoder, options, out = build_decoder(tiny.config), CompileOptions("f32", 32, 1), tmp_path / "onnx"
    write_onnx(decoder, tiny_checkpoint, out, options)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UserError, match="unreadable safetensors file") as error:
        write_onnx(decoder, broken, out, options)
    assert "\n" not in str(error.value)
    assert not (out / MODEL_FILE).exists()
