"""vLLM on Linnet's export: the same vLLM row, on the Hugging Face checkpoint linnet_core.hf writes in the child
at load (its time is part of the load time and shown in the row's note)."""

from __future__ import annotations

import time

from linnet_core import hf
from runners import vllm_offline


class Runner(vllm_offline.Runner):
    def load(self):
        start = time.perf_counter()
        self.export_dir = hf.export(self.spec.checkpoint, self.spec.work / "hf")
        export_s = time.perf_counter() - start
        self.metrics["export_s"] = export_s
        self.notes.append(f"linnet.hf.export ({export_s:.1f} s, included in load time)")
        super().load()

    def model_dir(self):
        return self.export_dir
