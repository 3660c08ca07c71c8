"""vLLM on Linnet's export: the same vLLM row, on the Hugging Face checkpoint linnet_core.hf writes in the child
at load (its time is part of the load time and shown in the row's note)."""

from __future__ import annotations

from runners import _vllm, vllm_offline


class Runner(vllm_offline.Runner):
    def load(self):
        self.export_dir = _vllm.export_hf_at_load(self)
        super().load()

    def model_dir(self):
        return self.export_dir
