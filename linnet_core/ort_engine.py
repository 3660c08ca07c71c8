"""Linnet's ONNX Runtime engine: the graph of emit_onnx in one session, driven through the Engine contract
(linnet_core/engine.py) on the CPU, CUDA or TensorRT execution provider.

The KV cache, each row's last token and its position live in ONNX Runtime buffers on the provider's device. A
decode step reads one set of tokens and positions and writes the other (ping-pong), through two IO bindings
prepared once, so a step is one run call, no allocation and no transfer but the new token ids, int64 [rows], to
the host. On CUDA the two decode bindings are replayed as two captured CUDA graphs where ONNX Runtime can
capture them.

The cache is one buffer [L, 2, R, KV, P, D] (layers, k/v, rows, kv heads, positions, head dim), updated in place:
each layer's `past_key_values.{l}.key` input and `present.{l}.key` output (and .value) are bound to the same slice
of it, the B rows a call reads (every row in decode, one in prefill), so a step writes just its new keys and values.
ONNX Runtime's GroupQueryAttention is built for a past and present that share their buffer; the plain graph's
ScatterElements reads its past only to write its present, so the two aliasing changes nothing it reads. TensorRT
compiles the plain graph into kernels of its own, which promise nothing of the kind (untested: no machine here
has TensorRT)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from linnet_core.emit_onnx import past_name, present_name

FUSED_ATTENTION = {"cpu": ("f32", "f16"), "cuda": ("f16", "bf16")}  # provider -> the dtypes of its fused kernels


def fuses_attention(provider: str, dtype: str) -> bool:
    """Whether ONNX Runtime's GroupQueryAttention and RotaryEmbedding kernels run on `provider` in `dtype` (emit the
    graph with CompileOptions.fused_attention then)."""
    return dtype in FUSED_ATTENTION.get(provider, ())


# provider name -> ONNX Runtime's execution provider, and where its buffers live
PROVIDERS = {
    "cpu": ("CPUExecutionProvider", "cpu"),
    "cuda": ("CUDAExecutionProvider", "cuda"),
    "tensorrt": ("TensorrtExecutionProvider", "cuda"),
}
# ONNX element types: as sessions name them, and the numpy storage of our buffers of each
ELEMENT_TYPES = {"tensor(float)": 1, "tensor(float16)": 10, "tensor(bfloat16)": 16, "tensor(int64)": 7}
STORAGE = {1: np.float32, 10: np.float16, 16: np.uint16, 7: np.int64}
F32, BF16, I64 = ELEMENT_TYPES["tensor(float)"], ELEMENT_TYPES["tensor(bfloat16)"], ELEMENT_TYPES["tensor(int64)"]
PROVIDER_LABELS = {"cpu": "CPU", "cuda": "CUDA", "tensorrt": "TensorRT"}
DECODE_GRAPH_IDS = ("1", "2")  # CUDA graph annotations of the two decode bindings (0 is reserved by ONNX Runtime)


@dataclass(frozen=True)
class SessionSettings:
    provider: str = "cpu"  # "cpu" | "cuda" | "tensorrt"
    threads: int = 0  # intra-op threads on the CPU; 0: one per core
    cuda_graphs: bool = True  # on a GPU: capture the decode steps as CUDA graphs (falls back if refused)
    trt_cache: str | None = None  # directory for TensorRT's engine cache
    trt_dtype: str = "f32"  # the model's dtype, so TensorRT may build f16 / bf16 kernels for it

    def __post_init__(self):
        assert self.provider in PROVIDERS, self.provider


def why_unavailable(provider: str, dtype: str) -> str | None:
    """Why ONNX Runtime here cannot run a `dtype` model on `provider`, or None. Asked of ONNX Runtime itself: the
    provider must be listed and must build a one-MatMul session of that dtype without falling back."""
    name = PROVIDERS[provider][0]
    available = ort.get_available_providers()
    if name not in available:
        return f"ONNX Runtime here has no {name} (it has {', '.join(available)})"
    try:
        session = ort.InferenceSession(probe_model(dtype), providers=[name])
    # ONNX Runtime raises its own Fail / NotImplemented types, not Python's
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0]
        if "NOT_IMPLEMENTED" in first:
            return f"ONNX Runtime's {PROVIDER_LABELS[provider]} execution provider does not implement {dtype} compute (a {dtype} MatMul session fails: NOT_IMPLEMENTED)"
        return f"ONNX Runtime could not build a {dtype} session on {name}: {first[:200]}"
    if session.get_providers()[0] != name:
        return f"ONNX Runtime lists {name} but could not create it (it fell back to {session.get_providers()[0]}; its libraries may be missing)"
    return None


def probe_model(dtype: str) -> bytes:
    """y = x @ x in dtype: the smallest model that needs the provider to compute in that dtype."""
    from onnx import helper

    from linnet_core.emit_onnx import DTYPES, IR_VERSION, OPSET

    elem = DTYPES[dtype][0]
    x, y = (helper.make_tensor_value_info(n, elem, [2, 2]) for n in "xy")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "probe", [x], [y])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    ).SerializeToString()


def session_options(threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
    options.log_severity_level = 3  # errors only: ORT warns about every node it leaves on the CPU
    return options


def provider_list(settings: SessionSettings, cache_shape: tuple[int, ...], cuda_graphs: bool) -> list:
    """The providers a session is built with, most preferred first, with their options."""
    cuda = ("CUDAExecutionProvider", {"enable_cuda_graph": "1" if cuda_graphs else "0"})
    if settings.provider == "cpu":
        return ["CPUExecutionProvider"]
    if settings.provider == "cuda":
        return [cuda, "CPUExecutionProvider"]
    # TensorRT builds one engine for one profile covering prefill (1 x T) and decode (rows x 1).
    layers, _, rows, kv, max_positions, head_dim = cache_shape

    def shapes(b, t):
        caches = ",".join(f"past_key_values.{n}.{kind}:{b}x{kv}x{max_positions}x{head_dim}"
                          for n in range(layers) for kind in ("key", "value"))  # fmt: skip
        return f"tokens:{b}x{t},positions:{b}x{t},{caches}"

    trt = {
        "trt_fp16_enable": str(settings.trt_dtype == "f16"),
        "trt_bf16_enable": str(settings.trt_dtype == "bf16"),
        "trt_engine_cache_enable": str(settings.trt_cache is not None),
        "trt_engine_cache_path": settings.trt_cache or "",
        "trt_profile_min_shapes": shapes(1, 1),
        "trt_profile_opt_shapes": shapes(rows, 1),
        "trt_profile_max_shapes": shapes(rows, max_positions),
    }
    return [("TensorrtExecutionProvider", trt), ("CUDAExecutionProvider", {}), "CPUExecutionProvider"]


def read_cache_shape(path: str) -> tuple[int, ...]:
    """The engine's cache buffer [L, 2, R, KV, P, D] for a model file: rows and positions from its metadata, layers,
    kv heads and head dim from its cache inputs (the graph only; its weights stay on disk)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    caches = [i for i in model.graph.input if i.name.startswith("past_key_values.")]
    _, kv, _, head_dim = (d.dim_value for d in caches[0].type.tensor_type.shape.dim)
    return len(caches) // 2, 2, int(props["linnet.rows"]), kv, int(props["linnet.max_positions"]), head_dim


class Buffer:
    """One ONNX Runtime value on the device, read and written from the host. On the CPU it wraps the memory of a
    numpy array, so reading it is a view, not a copy."""

    def __init__(self, shape: Sequence[int], elem: int, device: str):
        # bf16 has no numpy dtype: its zeros are uint16 zeros, handed to ONNX Runtime as bf16
        self.host = np.zeros(shape, STORAGE[elem])
        host_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(self.host, elem)
        self.device = device
        if device == "cpu":
            self.value = host_value
        else:
            self.value = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), elem, device, 0)
            # zeros, not whatever the allocator held: NaN in an unwritten cache slot would leak through the mask
            self.value.update_inplace(host_value if elem == BF16 else self.host)

    @property
    def itemsize(self) -> int:
        return self.host.itemsize

    def read(self) -> np.ndarray:
        return self.host if self.device == "cpu" else self.value.numpy()

    def write(self, array: np.ndarray) -> None:
        self.value.update_inplace(np.ascontiguousarray(array, dtype=self.host.dtype))


class OrtEngine:
    """The Engine contract over one ONNX Runtime session of a Linnet ONNX model (model.onnx)."""

    def __init__(self, model_path: Path, settings: SessionSettings = SessionSettings()):
        self.settings = settings
        self.path = str(model_path)
        self.provider, self.device = PROVIDERS[settings.provider]
        self.notes: list[str] = []
        self.use_cuda_graphs = settings.cuda_graphs and self.device == "cuda" and settings.provider == "cuda"
        # read from the file before the session exists (TensorRT's profile needs it)
        self.cache_shape = read_cache_shape(self.path)  # [L, 2, R, KV, P, D]
        self.layers, _, self.rows, _, self.max_positions, _ = self.cache_shape
        self.session = self.new_session()
        first = next(i for i in self.session.get_inputs() if i.name == past_name(0, "key"))
        self.vocab = next(o for o in self.session.get_outputs() if o.name == "logits").shape[1]
        self.allocate(ELEMENT_TYPES[first.type])

    # ---- sessions and buffers --------------------------------------------------------------------------------

    def new_session(self) -> ort.InferenceSession:
        """A session on the wanted provider; with CUDA graphs if ONNX Runtime accepts them (it refuses when some
        node cannot run on the GPU), else without, saying why."""
        options = session_options(self.settings.threads)
        providers = provider_list(self.settings, self.cache_shape, self.use_cuda_graphs)
        try:
            session = ort.InferenceSession(self.path, options, providers=providers)
        except Exception as e:  # ONNX Runtime raises its own Fail / RuntimeException types, re-raised below
            if not self.use_cuda_graphs:
                raise
            self.use_cuda_graphs = False
            self.notes.append(f"CUDA graphs refused by ONNX Runtime ({str(e).splitlines()[0][:160]})")
            return self.new_session()
        if session.get_providers()[0] != self.provider:
            raise RuntimeError(
                f"ONNX Runtime could not create the {self.provider} (it fell back to {session.get_providers()})"
            )
        return session

    def allocate(self, cache_elem: int) -> None:
        """Two of each fed-back buffer (tokens, positions), the cache (updated in place: see the module's docstring),
        the decode logits, and the two decode bindings: binding p reads buffers p, writes 1 - p."""
        r, device = self.rows, self.device
        self.cache = Buffer(self.cache_shape, cache_elem, device)
        self.cache_elem = cache_elem
        self.tokens = [Buffer((r, 1), I64, device) for _ in range(2)]
        self.positions = [Buffer((r, 1), I64, device) for _ in range(2)]
        self.logits = Buffer((r, self.vocab), F32, device)
        self.parity = 0  # which set holds the current state
        self.decode_bindings = [self.decode_binding(p) for p in (0, 1)]
        self.decode_runs = [self.run_options(graph_id) for graph_id in DECODE_GRAPH_IDS]
        self.prefill_run = self.run_options("-1")  # prefill shapes vary: never captured

    def without_cuda_graphs(self, error: Exception) -> None:
        """A new session without CUDA graphs, bound to the same buffers (they belong to no session)."""
        self.use_cuda_graphs = False
        self.notes.append(f"CUDA graph capture failed, steps run without ({str(error).splitlines()[0][:160]})")
        self.session = self.new_session()
        self.decode_bindings = [self.decode_binding(p) for p in (0, 1)]
        self.decode_runs = [None, None]
        self.prefill_run = None

    def decode_binding(self, p: int) -> ort.IOBinding:
        io = self.session.io_binding()
        for name, buffer in (("tokens", self.tokens[p]), ("positions", self.positions[p])):
            io.bind_ortvalue_input(name, buffer.value)
        for name, buffer in (("next_tokens", self.tokens[1 - p]), ("next_positions", self.positions[1 - p]),
                             ("logits", self.logits)):  # fmt: skip
            io.bind_ortvalue_output(name, buffer.value)
        self.bind_cache(io, 0, self.rows)
        return io

    def bind_cache(self, io: ort.IOBinding, first_row: int, rows: int) -> None:
        """Binds every layer's past and present keys and values to rows [first_row, first_row + rows) of the one
        cache buffer: each a contiguous [rows, KV, P, D] slice of it."""
        _, _, r, kv, p, d = self.cache_shape
        slab = kv * p * d * self.cache.itemsize  # one row of one layer's keys (or values), in bytes
        base = self.cache.value.data_ptr()
        shape = [rows, kv, p, d]
        for layer in range(self.layers):
            for k, kind in enumerate(("key", "value")):
                pointer = base + ((layer * 2 + k) * r + first_row) * slab
                io.bind_input(past_name(layer, kind), self.device, 0, self.cache_elem, shape, pointer)
                io.bind_output(present_name(layer, kind), self.device, 0, self.cache_elem, shape, pointer)

    def run_options(self, graph_id: str) -> ort.RunOptions | None:
        if not self.use_cuda_graphs:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", graph_id)
        return options

    # ---- the Engine contract -----------------------------------------------------------------------------------

    def prefill(self, row: int, tokens: Sequence[int], start: int = 0) -> int:
        return self.prefill_with_logits(row, tokens, start)[0]

    def prefill_with_logits(self, row: int, tokens: Sequence[int], start: int = 0) -> tuple[int, np.ndarray]:
        """prefill, also returning the last position's logits, f32 [vocab] on the host."""
        n = len(tokens)
        if not 0 <= row < self.rows or n == 0 or not 0 <= start <= start + n <= self.max_positions:
            raise ValueError(
                f"prefill of {n} tokens at {start} into row {row} does not fit {self.rows} rows of {self.max_positions} positions"
            )
        p = self.parity
        io = self.session.io_binding()
        io.bind_cpu_input("tokens", np.asarray(tokens, dtype=np.int64).reshape(1, n))
        io.bind_cpu_input("positions", np.arange(start, start + n, dtype=np.int64).reshape(1, n))
        self.bind_cache(io, row, 1)
        io.bind_output("next_tokens", "cpu")
        io.bind_output("logits", "cpu")
        self.session.run_with_iobinding(io, self.prefill_run)
        next_tokens, logits = (value.numpy() for value in io.get_outputs()[-2:])  # bound last, after the cache
        token = int(next_tokens[0, 0])
        # The other rows keep their tokens and positions; this row's become the prefill's.
        for buffers, value in ((self.tokens, token), (self.positions, start + n)):
            state = buffers[p].read().copy()
            state[row, 0] = value
            buffers[1 - p].write(state)
        self.parity = 1 - p
        return token, logits[0]

    def step(self) -> np.ndarray:
        p = self.parity
        try:
            self.session.run_with_iobinding(self.decode_bindings[p], self.decode_runs[p])
        except Exception as e:  # ONNX Runtime's own types; only a refused CUDA graph capture is recovered from
            if not self.use_cuda_graphs:
                raise
            self.without_cuda_graphs(e)  # the run wrote nothing: the buffers still hold this step's input
            self.session.run_with_iobinding(self.decode_bindings[p], self.decode_runs[p])
        self.parity = 1 - p
        return self.tokens[1 - p].read()[:, 0].copy()

    def prefill_logits(self, row: int, tokens: Sequence[int], start: int = 0) -> np.ndarray:
        """prefill(), returning the last position's f32 logits [vocab] on the host (for sampling)."""
        return self.prefill_with_logits(row, tokens, start)[1]

    def step_logits(self, tokens: np.ndarray) -> np.ndarray:
        """step(), except that row r reads tokens[r] (e.g. a sampled token) instead of its last token; returns f32
        logits [rows, vocab] on the host. The decode step writes them into a buffer anyway."""
        self.tokens[self.parity].write(np.asarray(tokens, dtype=np.int64).reshape(self.rows, 1))
        self.step()
        return self.logits.read().astype(np.float32, copy=True)

    def set_token(self, row: int, token: int) -> None:
        """Replaces the token `row` consumes next (teacher forcing)."""
        state = self.tokens[self.parity].read().copy()
        state[row, 0] = token
        self.tokens[self.parity].write(state)

    def score(self, tokens: Sequence[int], n_prefill: int) -> np.ndarray:
        if len(tokens) > self.max_positions:  # the decode step would keep rewriting the last position
            raise ValueError(f"cannot score {len(tokens)} tokens: the cache has {self.max_positions} positions")
        logits = self.prefill_with_logits(0, tokens[:n_prefill])[1]
        rows = [logits]
        for token in tokens[n_prefill:]:
            self.set_token(0, token)
            self.step()
            rows.append(self.logits.read()[0].copy())
        return np.stack(rows).astype(np.float32)
