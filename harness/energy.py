"""Energy on a GPU: NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver
loaded, Volta and later) read once before a row's first timed run and once after its last, so a row's
`energy_j_per_tok` is the board's energy over all its timed runs divided by the tokens they generated. One window,
not one per run: the counter moves in steps of tens of milliseconds, about a single-request run's length on a GPU, so
a run's own reading could be zero or double. It counts the whole board (another process on the same GPU would be
counted too: the bench runs one child at a time) and includes each run's prefill, as a user's request does."""

from __future__ import annotations

from harness.memory import nvml_handles


class EnergyCounter:
    """The first GPU's energy counter, in joules; reads None on a CPU, without NVML, or where the board has none
    (`missing` then says why, on a GPU)."""

    def __init__(self, device: str):
        handles = nvml_handles() if device == "cuda" else []
        self.handle = handles[0] if handles else None
        self.missing = "NVML sees no GPU" if device == "cuda" and self.handle is None else None

    def joules(self) -> float | None:
        if self.handle is None:
            return None
        import pynvml

        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0
        except pynvml.NVMLError as e:  # NOT_SUPPORTED before Volta, or on a virtual GPU
            self.handle, self.missing = None, f"NVML's energy counter answered {e}"
            return None


def joules_between(before: float | None, after: float | None) -> float | None:
    """The energy of one interval, or None when either end was not read, the counter went backwards (reset) or it did
    not move (the interval was shorter than its steps): a zero is no measurement."""
    if before is None or after is None or after <= before:
        return None
    return after - before


def per_token(counter: EnergyCounter, before: float | None, tokens: int, notes: list[str]) -> list[float]:
    """[joules per token] over the window since `before` (counter.joules()), or [] with a note on why, on a GPU."""
    joules = joules_between(before, counter.joules())
    if joules is not None and tokens > 0:
        return [joules / tokens]
    if counter.missing or before is not None:
        notes.append(f"no energy figure: {counter.missing or 'the energy counter did not move over the timed runs'}")
    return []
