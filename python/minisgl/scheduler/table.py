"""Rows of the page table: one per running request, handed out and taken back."""

from __future__ import annotations


class TableManager:
    def __init__(self, max_running_reqs: int) -> None:
        self._free = list(range(max_running_reqs - 1, -1, -1))  # pop() gives row 0 first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free page-table row (max_running_reqs reached)")
        return self._free.pop()

    def free(self, row: int) -> None:
        self._free.append(row)
