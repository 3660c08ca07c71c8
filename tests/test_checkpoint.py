import json

import numpy as np
import pytest
import torch

from linnet_core import checkpoint
from linnet_core.errors import UserError


def test_synthetic_weights_are_deterministic(tiny, tmp_path):
    a = checkpoint.load_weights(checkpoint.synthetic_checkpoint(tiny.id, tiny.config, "float32", cache=tmp_path / "a"))
    b = checkpoint.load_weights(checkpoint.synthetic_checkpoint(tiny.id, tiny.config, "float32", cache=tmp_path / "b"))
    assert a.keys() == b.keys() == checkpoint.tensor_shapes(tiny.config).keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = checkpoint.load_weights(checkpoint.synthetic_checkpoint(tiny.id, tiny.config, "float32", seed=1, cache=tmp_path / "c"))
    assert not np.array_equal(a["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_synthetic_weights_are_not_trivial(tiny_checkpoint):
    w = checkpoint.load_weights(tiny_checkpoint)
    biases = [v for k, v in w.items() if k.endswith(".bias")]
    norms = [v for k, v in w.items() if k.endswith("norm.weight")]
    assert biases and all(np.abs(b).mean() > 0.03 for b in biases)
    assert norms and all(np.abs(n - 1).mean() > 0.05 for n in norms)


def test_transformers_reads_them_and_the_logits_spread(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    ids = torch.arange(100, 164)[None]
    logits = model(ids).logits[0]
    assert logits.std() > 1.0
    assert len(set(logits.argmax(-1).tolist())) > 16  # the prediction depends on the input
    generated = model.generate(ids[:, :16], max_new_tokens=24, do_sample=False)[0, 16:].tolist()
    assert len(set(generated)) > 8, generated  # greedy decoding does not collapse into one repeated token


def test_a_missing_config_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        checkpoint.read_config(tmp_path)


def test_a_broken_safetensors_file_names_the_file(tiny_checkpoint, tmp_path):
    (tmp_path / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="model.safetensors"):
        checkpoint.header_shapes(tmp_path)


def test_a_mismatched_checkpoint_names_the_tensor(tiny, tiny_checkpoint, tmp_path):
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["intermediate_size"] = 256
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((tiny_checkpoint / "model.safetensors").read_bytes())
    with pytest.raises(UserError, match="mlp.gate_proj.weight"):
        checkpoint.load_weights(tmp_path)
