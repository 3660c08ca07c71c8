"""The one table of compute dtypes: the short names Linnet and Linnet Bench use on the command line and in
result files, and the long names torch, numpy, JAX, Keras, vLLM and config.json files use for them."""

from __future__ import annotations

from linnet_core.errors import UserError

LONG_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}  # short -> long
NAMES = tuple(LONG_NAMES)


def long_name(dtype: str) -> str:
    """"f16" -> "float16" (torch.float16, jnp.float16, keras's "float16", vLLM's "float16")."""
    return LONG_NAMES[dtype]


def check(dtype: str) -> str:
    """The dtype, or a one-line error naming the valid ones."""
    if dtype not in LONG_NAMES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(NAMES)}")
    return dtype
