"""Property tests with hypothesis over what strangers hand the project: requests to `linnet serve` (through the real
ASGI app, its guard and the engine loop on the reference engine) and result files to `check` and `site`. Whatever
arrives, the answer is a 4xx or a one-line UserError, never a 500 or a traceback. Bounded: a few hundred examples
in all, no deadline (the machine is shared), well under a minute."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.check import check
from harness.results import SCHEMA_VERSION, ResultFile, Row, write_result
from harness.site import build_site
from linnet_core.errors import UserError

# No deadline (a shared machine), no example database left in the checkout.
FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip

# JSON values as a hostile client writes them: NaN and Infinity (Python's json reads them), integers beyond any
# machine type, deep-ish nesting, odd text.
leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.just("\ud800"),
)  # fmt: skip
anything = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                        max_leaves=8)  # fmt: skip


def dumps(value) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")  # NaN, Infinity and lone surrogates, as sent


# ---- requests -------------------------------------------------------------------------------------------------------

FIELDS = {
    "prompt": st.lists(st.integers(0, 1023), max_size=12) | st.lists(st.integers() | leaf, max_size=4) | anything,
    "max_tokens": st.integers(-2, 6) | leaf,
    "temperature": st.floats(0, 2) | leaf,
    "top_p": st.floats(0, 1) | leaf,
    "seed": st.integers(-(2**70), 2**70) | leaf,
    "stream": st.booleans() | leaf,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | anything,
    "ignore_eos": st.booleans() | leaf,
    "n": st.integers(0, 2) | leaf,
    "user": st.text(max_size=8) | leaf,
    "model": st.just("qwen2-tiny") | leaf,
    "logprobs": anything,  # not supported: a 400
}
requests = st.one_of(
    st.fixed_dictionaries({"prompt": st.lists(st.integers(0, 1023), min_size=1, max_size=8)},
                          optional={k: v for k, v in FIELDS.items() if k != "prompt"}).map(dumps),
    st.fixed_dictionaries({}, optional=FIELDS).map(dumps),
    anything.map(dumps),
    st.binary(max_size=40),
)  # fmt: skip


@pytest.fixture(scope="module")
def client(tiny_checkpoint):
    from starlette.testclient import TestClient

    from linnet_core.serve.guard import settings_for
    from linnet_core.serve.server import ServerSettings, build, create_app

    served = build(ServerSettings("qwen2-tiny", tiny_checkpoint, "tests.serve_reference_engine:make_engine", rows=2,
                                  positions=24, max_waiting=4))  # fmt: skip
    # raise_server_exceptions: an exception a route does not turn into a response fails the test, with its traceback
    with TestClient(create_app(served, settings_for("127.0.0.1", None)), base_url="http://127.0.0.1") as c:
        yield c
    served.work.cleanup()


@settings(FUZZ, max_examples=150)
@given(body=requests)
def test_no_request_body_gets_a_500(client, body):
    r = client.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (body[:300], r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert r.json()["error"]["message"], r.text
    elif r.headers["content-type"].startswith("text/event-stream"):
        assert r.text.rstrip().endswith("data: [DONE]") and '"code": 500' not in r.text, r.text[-300:]
    else:
        assert r.json()["choices"][0]["finish_reason"] in ("length", "stop"), r.text


# ---- result files ---------------------------------------------------------------------------------------------------


def base_run() -> ResultFile:
    metrics = {"decode_tok_s": 50.0, "decode_tok_s_min": 49.0, "decode_tok_s_max": 51.0, "ttft_ms": 40.0,
               "ttft_ms_min": 39.0, "ttft_ms_max": 41.0, "load_s": 4.0, "peak_mem_gib": 0.5, "mem_kind": "host"}  # fmt: skip
    rows = [Row(runner=r, label=r, group="PyTorch", status="ok", distance=d, metrics=dict(metrics), peer=p)
            for r, d, p in (("transformers", 0.0, None), ("transformers-compiled", 1e-5, None),
                            ("linnet-torch", 1e-5, "transformers-compiled"))]  # fmt: skip
    return ResultFile(schema_version=SCHEMA_VERSION, model="qwen2-tiny", run_id="r1", created_at="2026-12-02T00:00:00+00:00",
                      machine={"cpu": "AMD EPYC", "cpu_cores": 2, "versions": {"python": "3.11", "torch": "2.13"}},
                      workload={"prompt_tokens": 32, "new_tokens": 8, "batch": 1, "warmups": 1, "runs": 2},
                      protocol={"profile": "quick", "dtype": "f32", "device": "cpu"}, weights="synthetic",
                      rows=rows)  # fmt: skip


# Where a mutation lands: a path of keys into the file's JSON ("*" picks a row by the drawn index).
PLACES = [
    ("schema_version",), ("model",), ("run_id",), ("created_at",), ("machine",), ("machine", "cpu"),
    ("machine", "versions"), ("machine", "cpu_cores"), ("workload",), ("workload", "runs"), ("workload", "prompt_tokens"),
    ("protocol",), ("protocol", "dtype"), ("protocol", "device"), ("weights",), ("complete",), ("rows",),
    ("rows", "*"), ("rows", "*", "status"), ("rows", "*", "reason"), ("rows", "*", "distance"), ("rows", "*", "label"),
    ("rows", "*", "peer"), ("rows", "*", "notes"), ("rows", "*", "metrics"), ("rows", "*", "samples"),
    ("rows", "*", "metrics", "decode_tok_s"), ("rows", "*", "metrics", "decode_tok_s_max"),
    ("rows", "*", "metrics", "ttft_ms"), ("rows", "*", "metrics", "peak_mem_gib"), ("rows", "*", "metrics", "mem_kind"),
    ("rows", "*", "metrics", "decode_tok_s_ci"), ("rows", "*", "quant"),
]  # fmt: skip
mutation = st.tuples(st.sampled_from(PLACES), st.integers(0, 2), anything | st.text(min_size=200, max_size=400))


def mutated(mutations) -> str:
    data = json.loads(base_run().model_dump_json())
    for place, row, value in mutations:
        target = data
        for key in place[:-1]:
            key = row if key == "*" else key
            if isinstance(target, dict) and key in target or isinstance(target, list) and isinstance(key, int) and key < len(target):
                target = target[key]
            else:
                break
        else:
            last = row if place[-1] == "*" else place[-1]
            if isinstance(target, dict):
                target[last] = value
            elif isinstance(target, list) and isinstance(last, int) and last < len(target):
                target[last] = value
    return json.dumps(data)


files = st.lists(mutation, min_size=1, max_size=3).map(mutated)


@settings(FUZZ, max_examples=80)
@given(text=files)
def test_check_answers_any_result_file_with_a_verdict_or_one_line(tmp_path, text):
    good = tmp_path / "good.json"
    if not good.exists():
        write_result(base_run(), good)
    bad = tmp_path / "bad.json"
    bad.write_bytes(text.encode("utf-8", "surrogatepass"))
    for candidate, baseline in ((bad, good), (good, bad)):
        try:
            report = check(candidate, baseline)
        except UserError as e:
            assert "\n" not in str(e) and len(str(e)) < 1000, str(e)
            continue
        for comparison in report.comparisons:  # a verdict that compared a non-finite figure would be a lie
            for row in comparison.rows:
                assert all(math.isfinite(c) for c in row.changes.values()), row


@settings(FUZZ, max_examples=20)
@given(text=files)
def test_site_renders_beside_any_result_file(tmp_path, text):
    results = tmp_path / "results"
    if not results.exists():
        write_result(base_run(), results / "qwen2-tiny" / "good.json")
    (results / "qwen2-tiny" / "bad.json").write_bytes(text.encode("utf-8", "surrogatepass"))
    warnings: list[str] = []
    pages = build_site(results, tmp_path / "site", warnings.append)
    assert all("\n" not in w for w in warnings), warnings
    index = pages[0].read_text()
    assert "nan " not in index and "inf " not in index
    assert Path(tmp_path / "site" / "models" / "qwen2-tiny.html").exists()
