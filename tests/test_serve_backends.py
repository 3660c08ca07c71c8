"""Each linnet.serve backend on qwen2-tiny, and each other architecture's twin on one backend (CPU, f32): the engine it makes keeps the contract with the optional
logits methods, chunked prefill included, against the tests' reference engine; and a request served by it
through the engine loop gets the tokens transformers generates for it alone."""

from __future__ import annotations

import numpy as np
import pytest

from linnet_core import devices
from linnet_core.engine import Chunk, prefill_batch, prefill_batch_logits
from linnet_core.serve.backends import BACKENDS, EngineSpec, make_engine, unavailable
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import ServeEngine
from linnet_core.serve.request import Request, SamplingParams
from tests.serve_reference_engine import ReferenceEngine
from tests.test_serve_engine import prompts, run_to_end, single_request_tokens

ROWS, POSITIONS = 4, 64


# (backend, model): every backend on qwen2-tiny; every other architecture on one backend, every backend on one
CASES = [*((b, "qwen2-tiny") for b in sorted(BACKENDS)), ("torch", "gemma3-tiny"), ("ort", "llama-tiny"),
         ("xla", "qwen3-tiny"), ("torch", "olmo2-tiny"), ("torch", "phi3-tiny")]  # fmt: skip


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def case(request, private_cache):
    from linnet_core.checkpoint import synthetic_checkpoint
    from linnet_core.models import get_model

    backend, model = request.param
    entry = get_model(model)
    return backend, synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)


@pytest.fixture(scope="module")
def built(case, tmp_path_factory):
    backend, checkpoint = case
    reason = unavailable(backend)
    if reason:
        pytest.skip(reason)
    spec = EngineSpec(checkpoint, ROWS, POSITIONS, work_dir=tmp_path_factory.mktemp(backend))
    return backend, make_engine(backend, spec)


@pytest.fixture(scope="module")
def reference(case):
    return ReferenceEngine(case[1], ROWS, POSITIONS)


def test_the_engine_keeps_the_contract_with_logits(built, reference):
    name, b = built
    engine, prompt = b.engine, list(range(100, 121))
    assert (engine.rows, engine.max_positions) == (ROWS, POSITIONS) and b.notes
    engine.prefill(1, prompt[:13])  # a chunked prefill: the second chunk continues at 13
    assert engine.prefill(1, prompt[13:], 13) == reference.prefill(1, prompt)
    assert np.abs(engine.prefill_logits(2, prompt[:9]) - reference.prefill_logits(2, prompt[:9])).max() <= 1e-4
    fed = np.array([3, 5, 7, 9])  # rows 1 and 2 consume these instead of their last tokens
    logits, expected = engine.step_logits(fed), reference.step_logits(fed)
    assert logits.shape == (ROWS, 1024) and logits.dtype == np.float32
    assert np.abs(logits[1:3] - expected[1:3]).max() <= 1e-4
    assert list(engine.step()[1:3]) == list(reference.step()[1:3])  # the argmax became their last tokens


def test_a_served_request_gets_its_single_request_tokens(built, case):
    tiny_checkpoint = case[1]
    name, b = built
    serve = ServeEngine(b.engine, ServeConfig(rows=ROWS, max_positions=POSITIONS, prefill_chunk=16, prefill_budget=32), 1001, name)
    requests = [Request(p, SamplingParams(max_tokens=8, ignore_eos=True)) for p in prompts(6, seed=11, low=10, high=40)]
    sampled = Request(requests[0].prompt, SamplingParams(max_tokens=8, temperature=0.8, seed=5, ignore_eos=True))
    for r in (*requests, sampled):
        serve.submit(r)
    run_to_end(serve)
    assert (serve.times.rider_tokens > 0) == (name in DECODES_IN_PREFILL)  # decode rows rode in prefill calls
    for r in requests[:3]:
        assert r.output == single_request_tokens(tiny_checkpoint, r.prompt, 8), (name, r.prompt)
    assert all(len(r.output) == 8 for r in (*requests, sampled))
    assert sampled.output != requests[0].output


# the backends whose engines prefill a batch of chunks in one call; ort keeps engine.py's fallback (a call per chunk)
BATCH_PREFILL = {"torch", "xla"}
# ... and those whose batched prefill also carries the decoding rows (one-token chunks in one batched attention)
DECODES_IN_PREFILL = {"torch", "xla"}


def test_a_batched_prefill_makes_the_tokens_of_prefills_one_by_one(built, reference):
    name, b = built
    engine, prompt = b.engine, list(range(200, 240))
    for row, length in ((2, 13), (1, 5)):
        engine.prefill(row, prompt[:length])
        reference.prefill(row, prompt[:length])
    # a continued prompt, a fresh one, a one-token prompt and a row's decode step (a one-token chunk at its
    # position: the engines that batch those put them last in the sequence), in rows out of order
    chunks = [Chunk(2, prompt[13:31], 13), Chunk(3, [7]), Chunk(0, prompt[3:24]), Chunk(1, [9], 5)]
    assert callable(getattr(engine, "prefill_batch", None)) == (name in BATCH_PREFILL)
    assert list(prefill_batch(engine, chunks)) == [reference.prefill(*c) for c in chunks]
    assert list(engine.step()) == list(reference.step())  # the rows read on from there
    chunks = [Chunk(1, prompt[:9]), Chunk(3, prompt[20:37])]
    logits = prefill_batch_logits(engine, chunks)
    assert logits.shape == (2, 1024) and logits.dtype == np.float32
    assert np.abs(logits - np.stack([reference.prefill_logits(*c) for c in chunks])).max() <= 1e-4
    if name in BATCH_PREFILL:  # one chunk per row, at least one, each within its row: else a clear error
        for bad in ([Chunk(1, [5]), Chunk(1, [6], 1)], [Chunk(0, [5] * 8, POSITIONS - 4)], [Chunk(ROWS, [5])], [Chunk(0, [])], []):
            with pytest.raises(ValueError, match="prefill"):
                engine.prefill_batch(bad)


class CountingEngine:
    """An engine as it is, recording the calls linnet.serve makes to it: (method, chunks for a batched prefill)."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def __getattr__(self, name):
        value = getattr(self.engine, name)
        if name in ("prefill", "prefill_logits", "prefill_batch", "prefill_batch_logits", "prefill_batch_sampled", "step",
                    "step_logits", "step_sampled"):  # fmt: skip
            return lambda *args: self.calls.append((name, len(args[0]) if name.startswith("prefill_batch") else 1)) or value(*args)
        return value


def test_an_engine_step_prefills_every_request_in_one_call(built):
    """One model call for all of a step's prompt chunks; where the engine batches one-token chunks (the torch
    backend), the decoding requests ride in it too and a step with prompt work makes no other call."""
    name, b = built
    if name not in BATCH_PREFILL:
        pytest.skip(f"the {name} engine keeps the fallback: one call per chunk")
    mixes = name in DECODES_IN_PREFILL
    assert getattr(b.engine, "decodes_in_prefill_batch", False) == mixes
    engine = CountingEngine(b.engine)
    serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=POSITIONS, prefill_chunk=16, prefill_budget=64), 1001, name)
    greedy, sampled = SamplingParams(max_tokens=4, ignore_eos=True), SamplingParams(max_tokens=4, temperature=0.7, seed=2, ignore_eos=True)
    requests = [Request(p, sampled if i == 1 else greedy) for i, p in enumerate(prompts(4, seed=5, low=10, high=40))]
    for r in requests:  # one samples: its last chunk's call returns logits
        serve.submit(r)
    per_step = []
    while serve.scheduler.has_work:
        engine.calls.clear()
        serve.step()
        per_step.append(list(engine.calls))
    prefills = [[call for call in calls if call[0].startswith("prefill")] for calls in per_step]
    assert all(len(calls) <= 1 for calls in prefills), per_step  # one model call for all of a step's chunks...
    assert prefills[0] == [("prefill_batch", 4)], per_step  # ...the four requests' first chunks in the first step
    sampled_call = "prefill_batch_sampled" if callable(getattr(b.engine, "step_sampled", None)) else "prefill_batch_logits"
    assert {call[0] for calls in prefills for call in calls} == {"prefill_batch", sampled_call}
    if mixes:  # and nothing else in a step that prefills: the decoding requests rode in that call
        assert all(len(calls) == 1 for calls in per_step), per_step
        assert serve.times.rider_tokens > 0
    else:
        assert serve.times.rider_tokens == 0
    assert all(len(r.output) == 4 for r in requests)


class StepLog:
    """An engine as it is, recording the rows each decode step covers (None: every row)."""

    def __init__(self, engine):
        self.engine, self.covered = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, rows=None):
        self.covered.append(rows)
        return self.engine.step(*(() if rows is None else (rows,)))


def test_a_decode_step_covers_the_smallest_bucket_of_rows_in_use(built, case):
    """Requests take the lowest free rows, and a decode step covers the smallest of the engine's buckets that holds
    every decoding request's row: three requests step four rows; once the two short ones have ended, the long one
    steps one row alone. Each gets the tokens transformers generates for it alone."""
    name, b = built
    if not hasattr(b.engine, "step_row_buckets"):
        pytest.skip(f"every {name} engine step covers every row")
    engine = StepLog(b.engine)
    serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=POSITIONS, prefill_chunk=16, prefill_budget=64), 1001, name)
    lengths = (10, 3, 3)
    requests = [Request(p, SamplingParams(max_tokens=n, ignore_eos=True)) for p, n in zip(prompts(3, seed=7, low=6, high=16), lengths)]
    for r in requests:
        serve.submit(r)
    run_to_end(serve)
    assert engine.covered == [4, 4, 1, 1, 1, 1, 1, 1, 1]  # the first tokens came from the one prefill call
    for r, n in zip(requests, lengths):
        assert r.output == single_request_tokens(case[1], r.prompt, n)


class OverlapLog:
    """An engine as it is, recording the order of its decode steps' starts and waits: ("start", k), ("wait", k)."""

    overlaps_steps = True  # as on a GPU: the loop overlaps even where the step has run when start_step returns

    def __init__(self, engine):
        self.engine, self.order = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def start_step(self, *rows):
        k = sum(1 for what, _ in self.order if what == "start")
        self.order.append(("start", k))
        wait = self.engine.start_step(*rows)
        return lambda: self.order.append(("wait", k)) or wait()


class WaitsForEachStep:
    """An engine as it is, without start_step: the loop then waits for each decode step."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        if name == "start_step":
            raise AttributeError(name)
        return getattr(self.engine, name)


def serve_through_the_loop(engine, name, prompts_and_lengths, eos):
    """Serves the requests through the engine's loop thread, as the server does; returns (tokens, finish reason)
    for each, from the events the loop handed out, after checking that each request's events end with exactly one
    finish and that its tokens are the request's output. Also returns the serving engine."""
    import threading

    serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=POSITIONS, prefill_chunk=16, prefill_budget=32), eos, name)
    requests = [Request(p, SamplingParams(max_tokens=n)) for p, n in prompts_and_lengths]
    events, done = {r.id: [] for r in requests}, threading.Event()

    def listen(batch):
        for event in batch:
            events[event.request_id].append(event)
        if all(e and e[-1].finish_reason for e in events.values()):
            done.set()

    serve.start(listen)
    try:
        for r in requests:
            serve.submit(r)
        assert done.wait(timeout=120), "the requests did not all finish"
    finally:
        serve.stop()
    served = []
    for r in requests:
        stream = events[r.id]
        assert [e.finish_reason is not None for e in stream] == [False] * (len(stream) - 1) + [True], stream
        served.append(([t for e in stream for t in e.tokens], stream[-1].finish_reason))
        assert served[-1][0] == r.output
    return served, serve


def test_the_loop_overlapping_steps_serves_the_tokens_of_the_loop_waiting_for_each(built):
    """Where the engine starts a step without waiting (start_step, on a GPU: forced here), the loop launches decode
    step k + 1 before it hands out step k's tokens; requests that end by EOS or length in the middle of that get the
    same tokens and reasons as when each step is waited for, and the rows come back."""
    name, b = built
    if not callable(getattr(b.engine, "start_step", None)):
        pytest.skip(f"the {name} engine waits for each step")
    assert not b.engine.overlaps_steps  # on a CPU the loop waits for each step: a lag would only delay its events
    check_overlapping_serves_as_waiting(b.engine, name)


@pytest.mark.parametrize("backend", ["torch", "xla"])
def test_the_loop_overlapping_steps_serves_the_tokens_of_the_loop_waiting_for_each_on_a_gpu(backend, tiny_checkpoint,
                                                                                           tmp_path):  # fmt: skip
    """The same on a GPU, where the engines overlap on their own: the torch engine's start_step copies the tokens to
    pinned memory behind an event, after a CUDA-graph replay; JAX's returns before XLA has run the step."""
    from runners._torch import cuda_unavailable

    spec = EngineSpec(tiny_checkpoint, ROWS, POSITIONS, device="cuda", work_dir=tmp_path)
    reason = unavailable(backend) or (devices.jax_missing(spec.device) if backend == "xla" else cuda_unavailable(spec))
    if reason:
        pytest.skip(reason)
    b = make_engine(backend, spec)
    assert b.engine.overlaps_steps
    check_overlapping_serves_as_waiting(b.engine, backend)


def check_overlapping_serves_as_waiting(engine, name) -> None:
    work = [(p, n) for p, n in zip(prompts(7, seed=21, low=5, high=30), (9, 3, 12, 6, 1, 10, 7))]
    waited, _ = serve_through_the_loop(WaitsForEachStep(engine), name, work, eos=None)
    eos = waited[0][0][2]  # a token the first request makes third: with it as EOS, some requests stop early
    waited, _ = serve_through_the_loop(WaitsForEachStep(engine), name, work, eos)
    log = OverlapLog(engine)
    overlapped, serve = serve_through_the_loop(log, name, work, eos)
    assert overlapped == waited
    assert "stop" in {reason for _, reason in waited} and "length" in {reason for _, reason in waited}
    started = [k for what, k in log.order if what == "start"]
    assert started and any(log.order.index(("start", k + 1)) < log.order.index(("wait", k)) for k in started[:-1])
    assert serve.scheduler.pool.num_used == 0


@pytest.mark.parametrize("backend", ["torch", "ort"])
def test_an_int8_backend_serves_its_own_single_request_tokens(backend, tiny, tiny_checkpoint, tmp_path):
    """--quant int8: the engine's rows agree with the same int8 engine run for one request alone (quantized weights
    change the tokens, never their independence from the other rows)."""
    if unavailable(backend):
        pytest.skip(unavailable(backend))
    built = make_engine(backend, EngineSpec(tiny_checkpoint, ROWS, POSITIONS, work_dir=tmp_path / "many", quant="int8"))
    alone = make_engine(backend, EngineSpec(tiny_checkpoint, 1, POSITIONS, work_dir=tmp_path / "one", quant="int8"))
    assert any("int8" in note for note in built.notes), built.notes
    serve = ServeEngine(built.engine, ServeConfig(rows=ROWS, max_positions=POSITIONS), 1001, backend)
    requests = [Request(p, SamplingParams(max_tokens=6, ignore_eos=True)) for p in prompts(5, seed=3, low=10, high=40)]
    for r in requests:
        serve.submit(r)
    run_to_end(serve)
    for r in requests[:2]:
        expected = [alone.engine.prefill(0, r.prompt)] + [int(alone.engine.step()[0]) for _ in range(5)]
        assert r.output == expected, (backend, r.prompt)


def test_the_xla_backend_refuses_quantized_weights(tiny_checkpoint):
    from linnet_core.errors import UserError

    if unavailable("xla"):
        pytest.skip(unavailable("xla"))
    with pytest.raises(UserError, match="xla backend has no quantized weights"):
        make_engine("xla", EngineSpec(tiny_checkpoint, 1, POSITIONS, quant="int8"))


def test_linnet_serve_on_xla_compiles_every_prefill_shape_its_budget_allows_ahead(tiny_checkpoint, tmp_path, monkeypatch):
    """linnet.serve on the xla backend counts each chunk in whole blocks of 32 against its step's budget (the backend's
    serve options), so that a step's blocks never pass the budget's: once the loop compiled ahead (the decode step,
    and 1, 2 and 4 blocks for a budget of 96, and the one-token prefill that parks a row at the end of its positions),
    serving prompts of 20-90 tokens and one that fills its row compiles nothing, no call has more than 3 blocks of
    prompt (chunks of 40 and 40 would have taken 4, and 16 tokens more a fifth), and each request gets its
    single-request tokens."""
    if unavailable("xla"):
        pytest.skip(unavailable("xla"))
    import sys

    from jax import monitoring

    b = make_engine("xla", EngineSpec(tiny_checkpoint, ROWS, 128, work_dir=tmp_path))
    assert b.serve_options == {"prefill_granule": 32}
    config = ServeConfig(rows=ROWS, max_positions=128, prefill_chunk=64, prefill_budget=96, **b.serve_options)
    serve = ServeEngine(b.engine, config, 1001, "xla")
    compiles, blocks = [], []
    monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: compiles.append(event) if "backend_compile" in event else None
    )
    assert serve.model.compile_ahead(config.prefill_budget) == 5  # and the decode step and the parking prefill
    assert compiles, "the compiles ahead were not seen"
    compiles.clear()
    module = sys.modules[type(b.engine).__module__]
    layout = module.batch_layout

    def counted(chunks, *args):
        blocks.append(sum(-(-len(tokens) // 32) for _, tokens, _ in chunks if len(tokens) > 1))
        return layout(chunks, *args)

    monkeypatch.setattr(module, "batch_layout", counted)
    parked = []
    prefill = b.engine.prefill
    monkeypatch.setattr(b.engine, "prefill", lambda row, tokens, start=0: parked.append(row) or prefill(row, tokens, start))
    requests = [Request(p, SamplingParams(max_tokens=8, ignore_eos=True)) for p in prompts(8, seed=3, low=20, high=90)]
    for r in requests:
        serve.submit(r)
    run_to_end(serve)
    # then a request that fills its row to its 127th position, and one that decodes on: the first's free row is
    # stepped on with the others (XLA steps every row) to the end of its positions, and parked
    full = Request(prompts(1, seed=4, low=126, high=127)[0], SamplingParams(max_tokens=2, ignore_eos=True))
    serve.submit(full)
    serve.submit(Request(requests[0].prompt, SamplingParams(max_tokens=8, ignore_eos=True)))
    run_to_end(serve)
    assert parked and compiles == [], (parked, compiles)
    assert 0 < max(blocks) <= 3, blocks
    for r in requests[:3]:
        assert r.output == single_request_tokens(tiny_checkpoint, r.prompt, 8), r.prompt


class HostSampling:
    """An engine as it is, without its device sampler: linnet.serve then samples on the host from its logits."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        if name in ("step_sampled", "prefill_batch_sampled"):
            raise AttributeError(name)
        return getattr(self.engine, name)


def test_the_torch_engine_samples_on_the_device_as_the_host_would(built):
    """The device sampler (the generated module's sample_rows, float64) draws the host sampler's tokens from the same
    logits and uniforms; and requests served with it get the tokens they get when the host samples."""
    import sys

    from linnet_core.serve.sampling import sample

    name, b = built
    if not callable(getattr(b.engine, "step_sampled", None)):
        pytest.skip(f"the {name} engine samples on the host")
    import torch

    sample_rows = sys.modules[type(b.engine).__module__].sample_rows
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((40, 1024)).astype(np.float32) * 3
    temperature, top_p, uniform = rng.uniform(0.2, 1.5, 40), rng.choice([1.0, 0.9, 0.5, 0.05], 40), rng.random(40)
    on_device = sample_rows(torch.from_numpy(logits), temperature.tolist(), top_p.tolist(), uniform.tolist())
    on_host = [sample(row, t, p, FixedDraw(u)) for row, t, p, u in zip(logits, temperature, top_p, uniform)]
    assert on_device.tolist() == on_host
    assert len(set(on_host)) > 20  # the draws spread: not one token every time

    outputs = []
    for engine in (b.engine, HostSampling(b.engine)):
        engine.reset()
        serve = ServeEngine(engine, ServeConfig(rows=ROWS, max_positions=POSITIONS, prefill_chunk=16, prefill_budget=32), 1001, name)
        requests = [Request(p, SamplingParams(max_tokens=8, temperature=0.9, top_p=0.8, seed=i, ignore_eos=True))
                    for i, p in enumerate(prompts(6, seed=13, low=10, high=40))]  # fmt: skip
        for r in requests:
            serve.submit(r)
        run_to_end(serve)
        outputs.append([r.output for r in requests])
    assert outputs[0] == outputs[1]


class FixedDraw:
    """A random stream that returns one given uniform."""

    def __init__(self, u: float):
        self.u = u

    def random(self) -> float:
        return self.u
