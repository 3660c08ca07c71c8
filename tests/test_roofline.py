"""The memory wall (harness/roofline.py): the bandwidth probe and the bytes a decode step reads, on known cases."""

from __future__ import annotations

import math

import pytest

from harness import roofline
from harness.registry import get_model


def test_bytes_per_token_of_the_qwen2_5_0_5b_shape():
    """494,032,768 parameters, the head tied to the embeddings (so every weight is read); K and V: 2 x 24 layers x 2
    heads x 64 = 6144 values a position, over 512 + 64 positions on average."""
    config = get_model("qwen2.5-0.5b-instruct").config
    kv = 6144 * (512 + 128 / 2)
    assert roofline.bytes_per_token(config, "bf16", None, 512, 128) == 494_032_768 * 2 + kv * 2
    assert roofline.bytes_per_token(config, "f32", "int8", 512, 128) == 494_032_768 * 1 + kv * 4
    assert roofline.bytes_per_token(config, "f32", "q8_0", 512, 128) == pytest.approx(494_032_768 * 34 / 32 + kv * 4)


def test_an_untied_head_leaves_the_embedding_table_unread():
    config = get_model("llama-tiny").config
    assert not config.tie_word_embeddings
    read = roofline.bytes_per_token(config, "f32", None, 0, 0)
    assert read == (config.num_parameters - config.vocab_size * config.hidden_size) * 4


def test_roofline_is_speed_times_bytes_over_bandwidth():
    assert roofline.roofline(decode_tok_s=13.0, bytes_per_token_=2e9, gb_s=26.0) == pytest.approx(1.0)
    assert roofline.roofline(10.0, 1e9, 20.0) == pytest.approx(0.5)


def test_the_probe_measures_this_machine_in_a_child():
    """A real read: somewhere between a slow VM's 1 GB/s and a server's 1000 GB/s."""
    figures = roofline.measure("cpu")
    assert 1 < figures["memory_bandwidth_gb_s"] < 1000 and math.isfinite(figures["memory_bandwidth_gb_s"])
    assert figures["memory_bandwidth_method"].startswith("torch read (max)")


def test_the_wall_is_the_larger_of_the_runs_probes():
    """A run probes at its start and its end and keeps the larger: a probe taken in one of this VM's slow phases put
    llama.cpp's f32 decode above the wall (roofline 1.12 and 1.28). The method names every figure."""
    method = "torch read (max), 2 threads, best of 5"
    start, end = ({"memory_bandwidth_gb_s": g, "memory_bandwidth_method": method} for g in (28.8, 44.5))
    wall = roofline.larger([start, end])
    assert wall["memory_bandwidth_gb_s"] == 44.5
    assert wall["memory_bandwidth_method"] == f"{method}; the larger of 2 probes, at the run's start and end (28.8, 44.5 GB/s)"
    assert roofline.larger([end, start])["memory_bandwidth_gb_s"] == 44.5
    assert roofline.larger([{}, start]) == start  # a probe that failed is left out
    assert roofline.larger([{}, {}]) == {}
