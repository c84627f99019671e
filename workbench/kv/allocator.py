"""Slot bookkeeping with page size 1, torch-free.

One ``SlotAllocator`` hands out slot ids of a pool of ``S`` slots. One ``SlotTable`` maps each
request to the ordered slots of its committed tokens: entry ``i`` holds the K/V of position ``i``.
The target and the draft share both (two physical buffers, one set of ids), as in SGLang.

Rolling back a tree is a table edit, never a copy: verify writes the D nodes into fresh slots;
the slots of root + accepted drafts are appended to the table (their positions ``L + depth`` are
exactly ``L, L+1, ...`` along the accepted path) and the rest go back to the free list.
"""

from __future__ import annotations


class OutOfSlots(RuntimeError):
    """Raised before anything changes when a request for slots cannot be met."""


class SlotAllocator:
    def __init__(self, num_slots: int):
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # a stack: pop() gives the lowest id first
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def alloc(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(f"cannot allocate {n} slots")
        if n > len(self._free):
            raise OutOfSlots(
                f"KV cache full: {n} slots requested, {len(self._free)} of {self.num_slots} free. "
                "Use fewer or shorter requests, or a larger --kv-slots."
            )
        slots = [self._free.pop() for _ in range(n)]
        self._used.update(slots)
        return slots

    def free(self, slots: list[int]) -> None:
        bad = [s for s in slots if s not in self._used]
        if bad or len(set(slots)) != len(slots):
            raise ValueError(f"freeing slots that are not allocated (or twice): {sorted(bad or slots)[:8]}")
        self._used.difference_update(slots)
        self._free.extend(reversed(slots))

    def used(self) -> set[int]:
        return set(self._used)


class SlotTable:
    """Request id -> slots of its committed tokens, over one allocator."""

    def __init__(self, allocator: SlotAllocator):
        self.allocator = allocator
        self.tables: dict[int, list[int]] = {}

    def add_request(self, rid: int) -> None:
        if rid in self.tables:
            raise ValueError(f"request {rid} already has a slot table")
        self.tables[rid] = []

    def length(self, rid: int) -> int:
        return len(self.tables[rid])

    def slots(self, rid: int) -> list[int]:
        return self.tables[rid]

    def commit(self, rid: int, slots: list[int]) -> None:
        """Append already-allocated slots (the next positions of request rid)."""
        self.tables[rid].extend(slots)

    def rollback(self, rid: int, length: int) -> list[int]:
        """Drop positions >= length and free their slots; returns the freed slots."""
        table = self.tables[rid]
        if not 0 <= length <= len(table):
            raise ValueError(f"cannot roll request {rid} back to {length}: it holds {len(table)}")
        dropped = table[length:]
        del table[length:]
        self.allocator.free(dropped)
        return dropped

    def release(self, rid: int) -> list[int]:
        freed = self.rollback(rid, 0)
        del self.tables[rid]
        return freed

    def check_integrity(self, scratch: list[int] | tuple[int, ...] = ()) -> None:
        """Every slot is in exactly one place: the free list, one table, or ``scratch``
        (allocated for the step in flight). Raises AssertionError with the first violation."""
        seen: dict[int, str] = {}

        def claim(slot: int, where: str) -> None:
            if slot in seen:
                raise AssertionError(f"slot {slot} is in {seen[slot]} and in {where}")
            if not 0 <= slot < self.allocator.num_slots:
                raise AssertionError(f"slot {slot} out of range in {where}")
            seen[slot] = where

        for s in self.allocator._free:
            claim(s, "the free list")
        for rid, table in self.tables.items():
            for s in table:
                claim(s, f"request {rid}")
        for s in scratch:
            claim(s, "scratch")
        if len(seen) != self.allocator.num_slots:
            leaked = set(range(self.allocator.num_slots)) - set(seen)
            raise AssertionError(f"{len(leaked)} slots leaked (allocated, owned by nobody): {sorted(leaked)[:8]}")
        owned = {s for t in self.tables.values() for s in t} | set(scratch)
        if owned != self.allocator.used():
            raise AssertionError("the allocator's used set differs from the tables + scratch")
