"""The model description: its weights are exactly the checkpoint's, and the ops read only defined values."""

import math

import pytest

from harness.registry import MODELS
from linnet_core.checkpoint import tensor_shapes
from linnet_core.arch import build_decoder


@pytest.mark.parametrize("model", list(MODELS))
def test_weights_are_the_checkpoints_exactly_once(model):
    config = MODELS[model].config
    decoder = build_decoder(config)
    sources = {w.source: w.shape for w in decoder.all_weights()}  # a fused tensor's parts: its rows, each once
    assert {w.hf_name for w in decoder.all_weights()} == set(tensor_shapes(config))  # a tied head is no second tensor
    assert len(decoder.all_weights()) == len(sources)
    size = [sum(int(math.prod(s)) for s in shapes.values()) for shapes in (sources, tensor_shapes(config))]
    assert size == [config.num_parameters] * 2  # the parts of a fused tensor tile it


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
