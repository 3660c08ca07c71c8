"""The device table (linnet_core/devices.py) and each runner entry's dtype (runners/__init__.py): the command lines
check devices and dtypes through them, JAX finds its device through them, and the ONNX rows take their dtype from the
registry, not from their id."""

from __future__ import annotations

import pytest

from harness.bounds import own_dtype, tolerance, truth_ratio_bound
from linnet_core import devices
from linnet_core.errors import UserError
from runners import RUNNERS
from runners.base import RunSpec


def test_the_table_knows_cpu_and_cuda_and_refuses_others_in_one_line():
    assert devices.check("cpu").default_dtype == "f32" and not devices.check("cpu").gpu
    assert devices.check("cuda").default_dtype == "bf16" and devices.check("cuda").jax_platform == "gpu"
    with pytest.raises(UserError, match=r"^unknown device 'tpu'; use cpu or cuda$"):
        devices.check("tpu")


def test_jax_finds_the_cpu_through_the_table():
    assert devices.jax_missing("cpu") is None and devices.jax_device("cpu").platform == "cpu"
    if not devices.jax_devices("cuda"):  # this machine: no GPU JAX can use
        assert devices.jax_missing("cuda") == "CUDA requested but JAX sees no GPU"
        with pytest.raises(UserError, match=r"install jax\[cuda12\]"):
            devices.jax_device("cuda")


def test_every_fixed_dtype_row_says_so_in_its_entry():
    """A row whose id names a dtype it computes in carries it as its entry's dtype; quantized rows name their storage
    in `quant` instead."""
    fixed = {i.id: i.dtype for i in RUNNERS.values() if i.dtype}
    assert fixed == {f"linnet-{e}-{d}": d for e in ("ort", "trt") for d in ("f32", "f16", "bf16")}
    assert all(i.quant is None for i in RUNNERS.values() if i.dtype)


def spec(runner: str, dtype: str) -> RunSpec:
    return RunSpec(runner, "runners.linnet_ort", "qwen2-tiny", "", dtype, "cpu", [1], 2, 0, 1, [1, 2], 1, 64, "")


def test_onnx_rows_read_their_dtype_from_the_registry():
    from runners.linnet_ort import Int8, Runner

    assert Runner.dtype_for(spec("linnet-ort-f16", "f32")) == "f16"
    assert Runner.dtype_for(spec("linnet-ort-bf16", "f16")) == "bf16"
    assert Int8.dtype_for(spec("linnet-ort-int8", "bf16")) == "bf16"  # int8 weights compute in the run's dtype
    assert Runner.dtype_for(spec("not-registered-f16", "f32")) == "f32"  # no entry: the run's dtype


def test_the_bounds_read_a_row_s_own_dtype_from_the_registry():
    assert own_dtype("linnet-ort-f16", "f32") == "f16" and own_dtype("linnet-torch", "bf16") == "bf16"
    assert own_dtype("someone-elses-f16", "f32") == "f16"  # a file from a runner this code does not know
    assert tolerance("linnet-ort-f16", "f32") == 0.25 and truth_ratio_bound(None, "f32", "linnet-ort-f16") == float("inf")
    assert truth_ratio_bound(None, "f32", "linnet-ort-f32") == 10.0
