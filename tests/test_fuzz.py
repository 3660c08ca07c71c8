"""Property tests with hypothesis over what strangers hand the project: requests to `linnet serve` (through the real
ASGI app, its guard and the engine loop on the reference engine; text and chat prompts with lone surrogates, tiny
temperatures, Host headers), result files to `check` and `site` (and the report printed through rich), any text
printed through rich (linnet_core.errors.literal) and any --seed. Whatever arrives, the answer is a 4xx or a one-line
UserError, never a 500 or a traceback. Bounded: a few hundred examples in all, no deadline (the machine is shared),
well under a minute."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.check import check
from harness.results import SCHEMA_VERSION, ResultFile, Row, load_result, write_result
from harness.site import build_site
from linnet_core.errors import UserError

# No deadline (a shared machine), no example database left in the checkout.
FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip

# Text as a hostile file, flag or client writes it: rich markup, lone surrogates, control characters.
odd_text = st.lists(st.sampled_from(["[/]", "[/x]", "[bold]", "[old]", "\\", "\\[", "]", "\ud800", "\udfff", "\n",
                                     "\x1b[31m", "é", " ", "a", "{"]), max_size=8).map("".join)  # fmt: skip
# JSON values as a hostile client writes them: NaN and Infinity (Python's json reads them), integers beyond any
# machine type, deep-ish nesting, odd text.
leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.just("\ud800"), odd_text,
)  # fmt: skip
anything = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                        max_leaves=8)  # fmt: skip


def dumps(value) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")  # NaN, Infinity and lone surrogates, as sent


# ---- requests -------------------------------------------------------------------------------------------------------

FIELDS = {
    "prompt": st.lists(st.integers(0, 1023), max_size=12) | st.lists(st.integers() | leaf, max_size=4) | anything | odd_text,
    "max_tokens": st.integers(-2, 6) | leaf,
    "temperature": st.floats(0, 2) | st.sampled_from([1e-320, 5e-324, 1e-6, 1e-5]) | leaf,
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


messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]) | leaf,
                                           "content": odd_text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": odd_text}), max_size=2) | leaf}),
                    max_size=3)  # fmt: skip
chats = st.fixed_dictionaries({"messages": messages},
                              optional={k: v for k, v in FIELDS.items() if k in ("max_tokens", "temperature", "seed", "stream")}).map(dumps)  # fmt: skip


@settings(FUZZ, max_examples=60)
@given(body=chats)
def test_no_chat_body_gets_a_500(client, body):
    r = client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (body[:300], r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert r.json()["error"]["message"], r.text


host_parts = st.sampled_from(["localhost", "127.0.0.1", "[::1]", "::1", "evil.com", "127.0.0.1.nip.io", ":", "80", "@",
                              "/", "[", "]", ".", "%2e", " ", "\t", "x"])  # fmt: skip


@settings(FUZZ, max_examples=150)
@given(host=st.lists(host_parts, max_size=5).map("".join))
def test_a_host_header_is_accepted_only_when_it_names_this_machine_as_a_url_would(host):
    """The oracle is urllib's reading of http://HOST/: a header the guard accepts must name a loopback host there."""
    from urllib.parse import urlsplit

    from linnet_core.serve.guard import Guard, Refused, settings_for

    guard = Guard(None, settings_for("127.0.0.1", None))
    try:
        guard.check_host({"host": host})
    except Refused as e:
        assert e.status == 400
        return
    parts = urlsplit(f"http://{host}/")
    assert parts.hostname in ("localhost", "127.0.0.1", "::1") and parts.port is None or 0 <= parts.port < 100_000, host
    assert parts.netloc == host, host  # nothing beyond a host and a port: no user info, no path


@settings(FUZZ, max_examples=60)
@given(text=odd_text | st.text(max_size=40) | st.text(min_size=300, max_size=2000))
def test_any_text_prints_through_rich_as_written(text):
    """literal(): one line, at most its limit, and rich prints it as written (no MarkupError, no style eaten)."""
    from rich.console import Console

    from linnet_core.errors import literal, printable

    console = Console(width=10_000, record=True, color_system=None)
    console.print(f"[bold]x[/] {literal(text)}[red] y[/] {literal(text[::-1])}", highlight=False, soft_wrap=True)
    shown = console.export_text().rstrip("\n")

    def expected(t, last=False):  # see literal(): backslashes before a "[" that starts no tag, or at the end, twice
        line = printable(t)
        line = line if len(line) <= 300 else f"{line[:300]}… ({len(line)} characters)"
        tag = re.compile(r"\[[a-z#/@][^[]*?]")  # what rich reads as a tag (rich.markup.RE_TAGS)
        line = re.sub(r"(\\+)\[", lambda m: m.group(1) * (1 if tag.match(line, m.end() - 1) else 2) + "[", line)
        return re.sub(r"(\\+)$", lambda m: m.group(1) * 2, line) if last else line

    assert shown == f"x {expected(text)} y {expected(text[::-1], last=True)}".rstrip("\n"), (text, shown)


@settings(FUZZ, max_examples=60)
@given(seed=st.integers() | st.integers(min_value=-(10**30), max_value=10**30))
def test_a_seed_is_refused_in_one_line_or_taken_by_every_generator(seed):
    import numpy as np
    import torch

    from linnet_core.checkpoint import check_seed

    try:
        check_seed(seed)
    except UserError as e:
        assert "\n" not in str(e) and len(str(e)) < 200
        return
    np.random.default_rng(seed + 3)  # harness/workload.py's largest offset
    torch.Generator().manual_seed(seed * 1_000_003 + 2**32 - 1)  # checkpoint.synthetic_tensor's largest


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
    ("rows", "*", "metrics", "decode_tok_s_ci"), ("rows", "*", "quant"), ("rows", "*", "runner"), ("rows", "*", "group"),
]  # fmt: skip
mutation = st.tuples(st.sampled_from(PLACES), st.integers(0, 2),
                     anything | st.text(min_size=200, max_size=400) | odd_text | st.sampled_from(["transformers", "2026-12-02"]))  # fmt: skip


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
        printed(report)
    try:  # a file that loads is one that write_result writes again, and that loads again
        loaded = load_result(bad)
    except UserError:
        return
    write_result(loaded, tmp_path / "again.json")
    load_result(tmp_path / "again.json")


def printed(report) -> None:
    """The report as `check` prints it, through rich: text from the files must not be taken for markup."""
    from rich.console import Console

    from harness.check_report import print_comparisons, verdict

    console = Console(width=120, record=True, color_system=None)
    print_comparisons(console, report)
    console.print(verdict(report), highlight=False, soft_wrap=True)


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
