"""Linnet, XLA (generated JAX): the module linnet_core.emit_jax writes from the model description, imported from
the row's work directory and driven through its Engine (one row; the decode is one jitted call, a while loop over
the decode step)."""

from __future__ import annotations

from linnet_core.checkpoint import read_config
from linnet_core.emit_jax import load_engine
from linnet_core.arch import build_decoder
from linnet_core.targets import CompileOptions
from runners import _jax, base  # _jax configures JAX; none of the modules above imports it


class Runner(base.EngineRunner):
    @classmethod
    def unavailable(cls, spec):
        return _jax.unavailable(spec)

    def load(self):
        self.device = _jax.device(self)
        self.notes.append(_jax.LOOP_NOTE)
        options = CompileOptions(dtype=self.spec.dtype, max_positions=self.spec.max_positions, batch=1)
        decoder = build_decoder(read_config(self.spec.checkpoint))
        self.engine = load_engine(decoder, self.spec.checkpoint, self.spec.work / "generated", options, self.device)
        self.notes.append(f"static cache of {self.spec.max_positions} positions, donated to each jitted step")

    def close(self):
        _jax.record_allocator_peak(self, self.device)
