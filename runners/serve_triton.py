"""Triton Inference Server rows: a tritonserver process on a model repository, each request streamed over HTTP
(the generate_stream extension, server-sent events) and timed at the client. `serve-triton-linnet` serves the
repository `linnet export triton` writes (linnet.serve in the Python backend); `serve-triton-vllm` serves the
same checkpoint with Triton's vLLM backend. Skipped where tritonserver is not installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from linnet_core.dtypes import long_name
from runners import base

READY_TIMEOUT_S = 900  # model loading inside the server (weights, compilation, CUDA-graph capture)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServing(base.ServingRunner):
    model_name = ""

    @classmethod
    def unavailable(cls, spec):
        if shutil.which("tritonserver") is None:
            return "tritonserver is not installed"
        return None

    def write_repository(self, repo: Path) -> None:
        raise NotImplementedError

    def request_body(self, prompt: list[int], max_tokens: int) -> dict:
        raise NotImplementedError

    def new_tokens(self, event: dict) -> list[int]:
        raise NotImplementedError

    def load(self):
        repo = self.spec.work / "model-repository"
        self.write_repository(repo)
        http, grpc, metrics = free_port(), free_port(), free_port()
        self.log = open(self.spec.work / "tritonserver.log", "w")
        self.server = subprocess.Popen(
            ["tritonserver", f"--model-repository={repo}", f"--http-port={http}", f"--grpc-port={grpc}",
             f"--metrics-port={metrics}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{http}"
        import httpx  # here, not at the top: a machine without httpx still says "tritonserver is not installed"

        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.server.poll() is None, f"tritonserver exited with {self.server.returncode}; see {self.log.name}"
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            raise TimeoutError(f"tritonserver was not ready after {READY_TIMEOUT_S} s")
        self.notes.append("over HTTP, streamed (generate_stream), first tokens timed at the client")

    async def start(self):
        import httpx

        limits = httpx.Limits(max_connections=self.rows, max_keepalive_connections=self.rows)
        self.client = httpx.AsyncClient(base_url=self.url, limits=limits, timeout=httpx.Timeout(600.0))

    async def generate(self, prompt, max_tokens):
        path = f"/v2/models/{self.model_name}/generate_stream"
        async with self.client.stream("POST", path, json=self.request_body(prompt, max_tokens)) as r:
            if r.status_code != 200:
                raise RuntimeError(f"tritonserver answered {r.status_code}: {(await r.aread()).decode()[:500]}")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[len("data: ") :])
                    if "error" in event:
                        raise RuntimeError(f"tritonserver: {event['error']}")
                    new = self.new_tokens(event)
                    if new:
                        yield new

    async def stop(self):
        await self.client.aclose()

    def close(self):
        os.killpg(self.server.pid, signal.SIGTERM)
        try:
            self.server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
        self.log.close()


class Linnet(TritonServing):
    """Triton with the linnet.serve backend: the repository of `linnet export triton`."""

    model_name = "linnet"

    def write_repository(self, repo):
        from linnet_core.serve.triton import TritonExport, write_repository

        backend = "torch"
        write_repository(TritonExport(self.spec.model, Path(self.spec.checkpoint), repo, backend, self.rows,
                                      self.max_positions, self.spec.dtype, self.spec.device))  # fmt: skip
        self.notes.append(f"linnet export triton (backend {backend}), {self.rows} rows x {self.max_positions} positions")

    def request_body(self, prompt, max_tokens):
        return {"input_ids": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}

    def new_tokens(self, event):
        return list(event.get("output_ids", []))


class Vllm(TritonServing):
    """Triton with its vLLM backend, on the same checkpoint. The backend takes text, so the prompt is sent as the
    checkpoint tokenizer's text of the token ids and new tokens are counted by the backend."""

    model_name = "vllm_model"
    token_ids = False  # the vLLM backend returns text and a token count

    @classmethod
    def unavailable(cls, spec):
        if TritonServing.unavailable(spec):
            return TritonServing.unavailable(spec)
        if spec.device != "cuda":
            return "Triton's vLLM backend serves on a GPU; this run is on the CPU"
        if not (Path(spec.checkpoint) / "tokenizer.json").exists():
            return "Triton's vLLM backend takes text prompts, and this checkpoint has no tokenizer (synthetic weights)"
        return None

    def write_repository(self, repo):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.spec.checkpoint)
        model = repo / self.model_name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n')
        engine = {"model": self.spec.checkpoint, "dtype": long_name(self.spec.dtype), "max_model_len": self.max_positions,
                  "max_num_seqs": self.rows, "gpu_memory_utilization": 0.85, "enable_prefix_caching": False}  # fmt: skip
        (model / "1" / "model.json").write_text(json.dumps(engine, indent=2))
        self.notes.append("Triton's vLLM backend; KV-cache pool at gpu_memory_utilization 0.85")

    def request_body(self, prompt, max_tokens):
        sampling = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        return {"text_input": self.tokenizer.decode(prompt), "stream": True, "exclude_input_in_output": True,
                "return_num_output_tokens": True, "sampling_parameters": json.dumps(sampling)}  # fmt: skip

    def new_tokens(self, event):
        """The vLLM backend reports how many tokens each response carries, not their ids."""
        return [-1] * int(event.get("num_output_tokens", 0))
