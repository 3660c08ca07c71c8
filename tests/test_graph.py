"""The model description: its weights are exactly the checkpoint's, and the ops read only defined values."""

import pytest

from harness.registry import MODELS
from linnet_core.checkpoint import tensor_shapes
from linnet_core.arch import build_decoder


@pytest.mark.parametrize("model", list(MODELS))
def test_weights_are_the_checkpoints_exactly_once(model):
    config = MODELS[model].config
    decoder = build_decoder(config)
    hf = {w.hf_name: w.shape for w in decoder.all_weights()}
    assert hf == tensor_shapes(config)  # a tied head is not a second tensor
    assert len(decoder.all_weights()) == len(hf)
    assert sum(int(__import__("math").prod(s)) for s in hf.values()) == config.num_parameters


def test_every_op_reads_defined_values_and_known_weights(tiny):
    decoder = build_decoder(tiny.config)
    block_names = set(decoder.weights_of_layer(0))
    global_names = {w.name for w in decoder.global_weights}
    defined = {"tokens", "positions"}
    for ops, names in ((decoder.prologue, global_names), (decoder.block, block_names), (decoder.epilogue, global_names)):
        for op in ops:
            assert set(op.inputs) <= defined, (op, defined)
            assert set(op.weights) <= names, op
            defined |= set(op.out)
    assert decoder.epilogue[-1].out == ("next",)
    assert decoder.head_weight == "embed.weight"
