"""scripts/crosscheck_serving.py's CPU split (the script itself needs guidellm and minutes: run by hand)."""

import importlib.util
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "crosscheck_serving.py"


@pytest.fixture(scope="module")
def crosscheck():
    spec = importlib.util.spec_from_file_location("crosscheck_serving", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_clients_get_the_last_cpu_and_the_server_the_rest(crosscheck, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert crosscheck.split_cpus(True) == ({0, 1, 2}, {3})
    assert crosscheck.split_cpus(False) == (None, None)
    assert crosscheck.cpu_line({0, 1, 2}, {3}) == "server pinned to CPU(s) 0,1,2, clients to CPU(s) 3"


def test_one_cpu_is_shared(crosscheck, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5})
    assert crosscheck.split_cpus(True) == (None, None)
    assert crosscheck.cpu_line(None, None) == "server and clients share every CPU"
