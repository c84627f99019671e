"""Slot bookkeeping with page size 1, torch-free.

One ``SlotAllocator`` hands out slot ids of a pool of ``S`` slots. One ``SlotTable`` maps each
request to the ordered slots of its committed tokens: entry ``i`` holds the K/V of position ``i``.
The target and the draft share both (two physical buffers, one set of ids), as in SGLang.

Rolling back a tree is a table edit, never a copy: verify writes the D nodes into fresh slots;
the slots of root + accepted drafts are appended to the table (their positions ``L + depth`` are
exactly ``L, L+1, ...`` along the accepted path) and the rest go back to the free list.

**Runs.** Attention reads a request's cache as a view of the pool when its slots are one
ascending run, and gathers the whole prefix at every layer otherwise (``attention/sdpa.py``).
Requests that take slots from one shared free list interleave them, so in a batch every
request's cache is gathered. ``reserve(owner, n)`` sets aside a run of ``n`` free slots for one
owner (a request, its worst case); ``alloc(n, owner)`` then hands out the lowest free slots of
that run, and ``free`` returns them to it, so the request's committed slots stay one run as it
grows and rolls back. A reservation is a placement, not a quota: another caller short of free
slots borrows the highest free slots of the runs (they come back to their run when freed), and
where no run of ``n`` free slots exists ``reserve`` declines and the owner takes slots from
the shared list as before. ``unreserve(owner)`` gives the run's free slots back.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator


class OutOfSlots(RuntimeError):
    """Raised before anything changes when a request for slots cannot be met."""


class SlotAllocator:
    def __init__(self, num_slots: int):
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # a stack: pop() gives the lowest id first
        self._used: set[int] = set()
        self._runs: dict[Hashable, list[int]] = {}  # owner -> the free slots of its run, ascending
        self._owner: dict[int, Hashable] = {}  # a slot of a run -> its owner

    @property
    def num_free(self) -> int:
        return len(self._free) + sum(map(len, self._runs.values()))

    @property
    def num_used(self) -> int:
        return len(self._used)

    def free_slots(self) -> Iterator[int]:
        """Every free slot: the shared list's, then each run's."""
        yield from self._free
        for run in self._runs.values():
            yield from run

    def reserve(self, owner: Hashable, n: int) -> bool:
        """Set aside the lowest run of ``n`` consecutive free slots of the shared list for
        ``owner``; False (nothing changes) where no such run exists."""
        if owner in self._runs:
            raise ValueError(f"{owner!r} already holds a run of slots")
        if n <= 0:
            raise ValueError(f"a run needs at least one slot, got {n}")
        free, start, length = sorted(self._free), None, 0
        for i, slot in enumerate(free):
            length = length + 1 if i and slot == free[i - 1] + 1 else 1
            if length == n:
                start = slot - n + 1
                break
        if start is None:
            return False
        taken = range(start, start + n)
        self._free = [s for s in self._free if not start <= s < start + n]
        self._runs[owner] = list(taken)
        self._owner.update((s, owner) for s in taken)
        return True

    def unreserve(self, owner: Hashable) -> None:
        """``owner``'s run ends: its free slots go back to the shared list, and a slot of it still
        in use goes there when freed."""
        run = self._runs.pop(owner, None)
        if run is None:
            return
        self._free.extend(reversed(run))
        for slot in [s for s, o in self._owner.items() if o == owner]:
            del self._owner[slot]

    def alloc(self, n: int, owner: Hashable | None = None) -> list[int]:
        """``n`` slots: the lowest free ones of ``owner``'s run where it holds one with room,
        else the shared list's, then slots borrowed from the runs (the highest of each first)."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} slots")
        run = self._runs.get(owner) if owner is not None else None
        if run is not None and len(run) >= n:
            slots = run[:n]
            del run[:n]
        else:
            if n > self.num_free:
                raise OutOfSlots(
                    f"KV cache full: {n} slots requested, {self.num_free} of {self.num_slots} free. "
                    "Use fewer or shorter requests, or a larger --kv-slots."
                )
            slots = [self._free.pop() for _ in range(min(n, len(self._free)))]
            for other in sorted(self._runs.values(), key=len, reverse=True):  # borrow: the fullest run first
                while len(slots) < n and other:
                    slots.append(other.pop())
        self._used.update(slots)
        return slots

    def free(self, slots: list[int]) -> None:
        bad = [s for s in slots if s not in self._used]
        if bad or len(set(slots)) != len(slots):
            raise ValueError(f"freeing slots that are not allocated (or twice): {sorted(bad or slots)[:8]}")
        self._used.difference_update(slots)
        shared = []
        for s in slots:
            owner = self._owner.get(s)
            if owner is None:
                shared.append(s)
            else:
                bisect.insort(self._runs[owner], s)
        self._free.extend(reversed(shared))

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

        for s in self.allocator.free_slots():
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
