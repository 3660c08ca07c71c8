"""Shared fixtures: a private cache for synthetic weights, and the tiny model's checkpoint."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Synthetic checkpoints go to a cache of this test session (children inherit the variable)."""
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def tiny():
    from harness.registry import get_model

    return get_model("qwen2-tiny")


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny, private_cache):
    from linnet_core.checkpoint import synthetic_checkpoint

    return synthetic_checkpoint(tiny.id, tiny.config, tiny.checkpoint_dtype)
