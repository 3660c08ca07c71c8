"""Linnet, XLA (StableHLO): `linnet compile --target stablehlo` runs first in a separate process (timed, in the
notes), then this process deserializes the artefacts and calls them with the checkpoint's weights. It imports no
model code: only linnet_core.stablehlo_engine, the small loader of serialized functions and weights."""

from __future__ import annotations

import sys

from linnet_core.stablehlo_engine import load_engine
from runners import _jax, base

MODEL_CODE = ("linnet_core.graph", "linnet_core.emit_jax", "linnet_core.export_stablehlo")


class Runner(base.EngineRunner):
    @classmethod
    def unavailable(cls, spec):
        return _jax.unavailable(spec)

    def compile(self):
        """Writes the artefacts with the `linnet` CLI in a process of its own (base.run_build); returns (directory,
        seconds)."""
        out = self.spec.work / "stablehlo"
        # the checkpoint directory stands for the model: its config.json says what to compile
        seconds = base.run_build(["compile", self.spec.checkpoint, "--target", "stablehlo", "--out", str(out),
                                  "--dtype", self.spec.dtype, "--max-positions", str(self.spec.max_positions)])  # fmt: skip
        return out, seconds

    def load(self):
        self.device = _jax.device(self)
        self.notes.append(_jax.LOOP_NOTE)
        artefacts, compile_s = self.compile()
        self.engine = load_engine(artefacts, self.spec.checkpoint, self.device)
        leaked = [m for m in MODEL_CODE if m in sys.modules]
        assert not leaked, f"the StableHLO row imported model code: {leaked}"
        self.metrics["compile_s"] = compile_s
        self.notes.append(
            f"artefacts written by `linnet compile --target stablehlo` in a separate process in {compile_s:.1f} s "
            "(included in load time); this process deserializes and runs them, with no model code"
        )

    def close(self):
        _jax.record_allocator_peak(self, self.device)
