import pytest

from harness.registry import MODELS, get_model
from linnet_core.config import ModelConfig
from linnet_core.errors import UserError


def test_qwen_config_is_the_real_one():
    m = get_model("qwen2.5-0.5b")  # the alias
    c = m.config
    assert m.id == "qwen2.5-0.5b-instruct"
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (896, 24, 14, 2)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (4864, 151936, 32768)
    assert c.tie_word_embeddings and c.rope_theta == 1e6 and c.rms_norm_eps == 1e-6
    assert round(m.parameters / 1e6, 1) == 494.0
    assert m.license == "Apache-2.0"


@pytest.mark.parametrize("model", list(MODELS))
def test_config_round_trips_through_hf_json(model):
    config = MODELS[model].config
    assert ModelConfig.from_hf(config.to_hf()) == config


def test_config_round_trips_through_transformers(tmp_path):
    from transformers import Qwen2Config

    config = MODELS["qwen2-tiny"].config
    hf = Qwen2Config(**config.to_hf())
    assert ModelConfig.from_hf(hf.to_dict()) == config


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(UserError) as e:
        get_model("llama-7b")
    assert "qwen2-tiny" in str(e.value) and "qwen2.5-0.5b-instruct" in str(e.value)
    assert "\n" not in str(e.value)
