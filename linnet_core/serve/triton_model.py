"""The Triton Inference Server Python-backend model that runs linnet.serve (copied as `1/model.py` by
`linnet export triton`). Decoupled: each request gets a response per engine step that made tokens when it
asks to stream (input `stream`), or one response at the end, and always a final flag.

Inputs (all optional but a prompt): input_ids INT32 [-1] or text_input STRING [1] (needs the checkpoint's
tokenizer), max_tokens INT32, temperature and top_p FP32, seed INT64, ignore_eos and stream BOOL.
Outputs: output_ids INT32 [-1] (the new tokens of this response) and text_output STRING [1].
A cancelled request (the client went away) gives its row back at the engine's next step."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from linnet_core.errors import UserError
from linnet_core.serve.engine_loop import EngineFailed
from linnet_core.serve.request import Event, Request, SamplingParams
from linnet_core.serve.scheduler import QueueFull
from linnet_core.serve.server import Served, ServerSettings, TextStream, build

try:
    import triton_python_backend_utils as pb_utils  # provided by Triton's Python backend
except ImportError:  # outside Triton: the parts below that do not touch pb_utils still import and run
    pb_utils = None


def settings_of(args: dict[str, str]) -> ServerSettings:
    """linnet.serve's settings from the model's config.pbtxt parameters; the checkpoint sits beside this file."""
    config = json.loads(args["model_config"])
    p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    version_dir = Path(args["model_repository"]) / args["model_version"]
    return ServerSettings(model=p["model"], checkpoint=version_dir / p["checkpoint"], backend=p["backend"],
                          rows=int(p["rows"]), positions=int(p["positions"]), dtype=p["dtype"], device=p["device"])  # fmt: skip


def request_inputs(get: Callable[[str], np.ndarray | None], served: Served) -> tuple[list[int], SamplingParams, bool]:
    """(prompt ids, sampling parameters, stream?) from a request's named inputs; UserError when unusable."""

    def scalar(name, default):
        value = get(name)
        return default if value is None else value.reshape(-1)[0].item()

    ids, text = get("input_ids"), get("text_input")
    if ids is not None:
        prompt = [int(t) for t in ids.reshape(-1)]
    elif text is not None:
        if served.tokenizer is None:
            raise UserError("text_input needs the checkpoint's tokenizer, which this model has not; send input_ids")
        raw = text.reshape(-1)[0]
        prompt = served.tokenizer.encode(raw.decode() if isinstance(raw, bytes) else str(raw))
    else:
        raise UserError("send the prompt as input_ids or text_input")
    bad = next((t for t in prompt if not 0 <= t < served.vocab_size), None)
    if bad is not None:
        raise UserError(f"input_ids: token id {bad} is outside the vocabulary [0, {served.vocab_size})")
    params = SamplingParams(
        max_tokens=int(scalar("max_tokens", 16)),
        temperature=float(scalar("temperature", served.defaults.temperature)),
        top_p=float(scalar("top_p", served.defaults.top_p)),
        seed=None if get("seed") is None else int(scalar("seed", 0)),
        ignore_eos=bool(scalar("ignore_eos", False)),
    )
    return prompt, params, bool(scalar("stream", False))


@dataclass
class Pending:
    """A request in flight: where its responses go, and what it has produced so far."""

    sender: Any  # Triton's response sender
    stream: bool
    text: TextStream
    tokens: list[int] = field(default_factory=list)


class TritonPythonModel:
    def initialize(self, args):
        self.served = build(settings_of(args))
        self.pending: dict[str, Pending] = {}
        self.lock = threading.Lock()  # execute() runs on Triton's thread, events arrive on the engine's
        self.served.engine.start(self.on_events)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()

            def get(name, request=request):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                return None if tensor is None else tensor.as_numpy()

            try:
                prompt, params, stream = request_inputs(get, self.served)
                item = Request(prompt, params)
                with self.lock:
                    self.pending[item.id] = Pending(sender, stream, TextStream(self.served.tokenizer))
                try:
                    self.served.engine.submit(item)
                except BaseException:
                    with self.lock:
                        del self.pending[item.id]
                    raise
            except (UserError, QueueFull, EngineFailed) as e:
                error = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(e)))
                sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None  # decoupled: responses go through the senders

    def on_events(self, events: list[Event]) -> None:
        """Called on the engine's thread with a step's events."""
        for event in events:
            with self.lock:
                pending = self.pending.get(event.request_id)
                if pending is not None and event.finish_reason is not None:
                    del self.pending[event.request_id]
            if pending is None:
                continue
            if event.finish_reason is None and is_cancelled(pending.sender):
                self.served.engine.cancel(event.request_id)  # the client has gone: free the row
            self.respond(pending, event)

    def respond(self, pending: Pending, event: Event) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if event.finish_reason is not None else 0
        if event.finish_reason == "error":
            pending.sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(event.error)), flags=final)
            return
        pending.tokens.extend(event.tokens)
        if pending.stream and event.tokens:
            pending.sender.send(self.response(event.tokens, pending.text.push(event.tokens)), flags=final)
        elif not pending.stream and final:
            pending.sender.send(self.response(pending.tokens, pending.text.push(pending.tokens)), flags=final)
        elif final:
            pending.sender.send(None, flags=final)  # the stream's end, with nothing new in it

    def response(self, tokens: list[int], text: str):
        ids = pb_utils.Tensor("output_ids", np.asarray(tokens, dtype=np.int32))
        out = pb_utils.Tensor("text_output", np.asarray([text.encode()], dtype=np.object_))
        return pb_utils.InferenceResponse(output_tensors=[ids, out])

    def finalize(self):
        self.served.engine.stop()


def is_cancelled(sender) -> bool:
    """Triton >= 23.10 tells a decoupled model when the client cancelled; older servers cannot."""
    check = getattr(sender, "is_cancelled", None)
    return bool(check()) if check is not None else False
