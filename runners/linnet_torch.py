"""Linnet, generated PyTorch: the module Linnet emits from its model description, run eagerly over its static
KV cache, greedy argmax on the device."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "eager"
