"""The pool of cache rows (nano-vllm's block manager, with one fixed block per request): a request is given a
free row when it is admitted and gives it back when it finishes, is cancelled, or fails."""

from __future__ import annotations

import heapq


class RowPool:
    def __init__(self, rows: int):
        self.rows = rows
        self._free = list(range(rows))  # a min-heap: the lowest free row first, so busy rows stay packed
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def can_allocate(self) -> bool:
        return bool(self._free)

    def allocate(self) -> int:
        assert self._free, "no free row; check can_allocate() first"
        row = heapq.heappop(self._free)
        self._used.add(row)
        return row

    def free(self, row: int) -> None:
        assert row in self._used, f"row {row} is not allocated"
        self._used.remove(row)
        heapq.heappush(self._free, row)

    def is_used(self, row: int) -> bool:
        return row in self._used
