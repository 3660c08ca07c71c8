"""Linnet, generated PyTorch: the module Linnet emits from its model description, run eagerly over its static
KV cache, greedy argmax on the device."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "eager"


class Int8(Runner):
    """linnet-torch-int8: the module compiled with weight-only int8 (linnet compile --quant int8)."""

    quant = "int8"
