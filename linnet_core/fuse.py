"""Parallel projections: consecutive linear ops that read the same value, all with a bias or all without (q, k and v;
gate and up), run as one matmul over their weights concatenated along the output dim. Decode is memory-bound, and
one pass over a fused weight beats several over its parts. This pass finds them, and names them once for every
emitter: q_proj, k_proj, v_proj -> qkv_proj; gate_proj, up_proj -> gate_up_proj."""

from __future__ import annotations

from dataclasses import dataclass

from linnet_core.graph import Op


@dataclass(frozen=True)
class Fused:
    """Parallel linears run as one: their output is `output`, split along its last dim into theirs, in order."""

    ops: tuple[Op, ...]

    @property
    def output(self) -> str:
        """The fused output's value name: "qkv", "gate_up"."""
        return self.name.removesuffix("_proj")

    @property
    def name(self) -> str:
        """The fused projection: "qkv_proj", "gate_up_proj"."""
        stems = [op.weights[0].split(".")[0].removesuffix("_proj") for op in self.ops]
        return ("".join(stems) if all(len(s) == 1 for s in stems) else "_".join(stems)) + "_proj"

    @property
    def weights(self) -> dict[str, tuple[str, ...]]:
        """Each fused weight ("qkv_proj.weight", then "qkv_proj.bias") -> the weights it concatenates, in order."""
        return {f"{self.name}.{parts[0].rsplit('.', 1)[1]}": parts for parts in zip(*(op.weights for op in self.ops))}


def parallel_linears(ops: tuple[Op, ...] | list[Op]) -> list[Op | Fused]:
    """The ops in order, each run of two or more parallel linears replaced by one Fused."""
    out: list[Op | Fused] = []
    for op in ops:
        last = out[-1] if out else None
        first = last.ops[0] if isinstance(last, Fused) else last
        if op.kind == "linear" and first is not None and first.kind == "linear" and parallel(first, op):
            out[-1] = Fused((*last.ops, op) if isinstance(last, Fused) else (last, op))
        else:
            out.append(op)
    return out


def parallel(a: Op, b: Op) -> bool:
    """Two linears that can share a matmul: the same input, both biased or neither."""
    return a.inputs == b.inputs and len(a.weights) == len(b.weights)
