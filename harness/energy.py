"""Energy on a GPU: NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver
loaded, Volta and later) read around the timed runs, so a row's `energy_j_per_tok` is the board's energy over its
timed runs divided by the tokens they generated. It counts the whole board (another process on the same GPU would be
counted too: the bench runs one child at a time) and includes each run's prefill, as a user's request does."""

from __future__ import annotations

from harness.memory import nvml_handles


class EnergyCounter:
    """The first GPU's energy counter, in joules; reads None on a CPU, without NVML, or where the board has none."""

    def __init__(self, device: str):
        handles = nvml_handles() if device == "cuda" else []
        self.handle = handles[0] if handles else None

    def joules(self) -> float | None:
        if self.handle is None:
            return None
        import pynvml

        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0
        except pynvml.NVMLError:  # NOT_SUPPORTED before Volta, or on a virtual GPU
            self.handle = None
            return None


def joules_between(before: float | None, after: float | None) -> float | None:
    """The energy of one interval, or None when either end was not read (or the counter went backwards: reset)."""
    if before is None or after is None or after < before:
        return None
    return after - before
