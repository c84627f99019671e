"""Allocator and slot-table property tests: random allocate / commit / free / roll back."""

import random

import pytest
import torch

from workbench.kv import OutOfSlots, SlotAllocator, SlotTable
from workbench.kv.pool import KVPool


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_never_lose_or_share_a_slot(seed):
    rng = random.Random(seed)
    table = SlotTable(SlotAllocator(64))
    scratch: list[int] = []
    next_rid = 0
    for _ in range(400):
        op = rng.choice(["add", "commit", "scratch", "drop_scratch", "rollback", "release"])
        rids = list(table.tables)
        if op == "add" or not rids:
            table.add_request(next_rid)
            table.allocator.reserve(next_rid, rng.randint(1, 12))  # a run where one is free, else none
            next_rid += 1
        elif op == "commit":
            n, rid = rng.randint(0, 6), rng.choice(rids)
            try:
                table.commit(rid, table.allocator.alloc(n, owner=rid))
            except OutOfSlots:
                assert n > table.allocator.num_free
        elif op == "scratch":
            n = min(rng.randint(0, 4), table.allocator.num_free)
            scratch.extend(table.allocator.alloc(n))
        elif op == "drop_scratch" and scratch:
            keep = rng.randint(0, len(scratch))
            table.allocator.free(scratch[keep:])
            del scratch[keep:]
        elif op == "rollback":
            rid = rng.choice(rids)
            table.rollback(rid, rng.randint(0, table.length(rid)))
        elif op == "release":
            rid = rng.choice(rids)
            table.release(rid)
            table.allocator.unreserve(rid)
        table.check_integrity(scratch)
        assert table.allocator.num_used + table.allocator.num_free == 64


def test_a_run_keeps_its_owners_slots_ascending_and_lends_what_others_lack():
    alloc = SlotAllocator(16)
    alloc.alloc(2)  # slots 0, 1 taken from the shared list
    assert alloc.reserve("a", 6) and alloc.reserve("b", 4)  # the lowest runs: 2-7, 8-11
    with pytest.raises(ValueError, match="already holds a run"):
        alloc.reserve("a", 2)
    first = alloc.alloc(3, owner="a")
    assert first == [2, 3, 4] and alloc.alloc(1, owner="b") == [8]
    tree = alloc.alloc(3, owner="a")  # a step's nodes right after the committed ones
    assert tree == [5, 6, 7]
    alloc.free(tree[1:])  # the rejected nodes go back to the run, so the next step starts at 6
    assert alloc.alloc(1, owner="a") == [6]
    # no run of 8 free slots is left (12-15 are the shared list's): declined, nothing changes
    assert not alloc.reserve("c", 8) and alloc.num_free == 8  # 0, 1, 2-6 and 8 in use
    # the shared list short: the rest borrowed from the runs, the fullest first, its highest slots first
    lent = alloc.alloc(6)
    assert lent == [12, 13, 14, 15, 11, 10]
    alloc.free(lent)
    assert alloc.alloc(3, owner="b") == [9, 10, 11]
    alloc.unreserve("a")  # its free slot goes back to the shared list, its used ones when freed
    alloc.free([2, 3, 4])
    assert alloc.reserve("d", 3) and alloc.alloc(3, owner="d") == [2, 3, 4]
    assert alloc.num_used + alloc.num_free == 16
    with pytest.raises(ValueError, match="at least one slot"):
        alloc.reserve("e", 0)


def test_out_of_slots_is_clear_and_changes_nothing():
    alloc = SlotAllocator(4)
    got = alloc.alloc(3)
    with pytest.raises(OutOfSlots, match="KV cache full: 2 slots requested, 1 of 4 free"):
        alloc.alloc(2)
    assert alloc.num_free == 1 and alloc.used() == set(got)


def test_double_free_and_bad_rollback_are_refused():
    table = SlotTable(SlotAllocator(8))
    table.add_request(0)
    slots = table.allocator.alloc(3)
    table.commit(0, slots)
    with pytest.raises(ValueError, match="not allocated"):
        table.allocator.free([7])
    with pytest.raises(ValueError, match="cannot roll request 0 back to 5"):
        table.rollback(0, 5)
    assert table.rollback(0, 1) == slots[1:]
    table.check_integrity()


def test_integrity_check_catches_a_leak_and_a_shared_slot():
    table = SlotTable(SlotAllocator(8))
    table.add_request(0)
    table.add_request(1)
    leaked = table.allocator.alloc(2)
    with pytest.raises(AssertionError, match="leaked"):
        table.check_integrity()
    table.commit(0, leaked)
    table.commit(1, leaked[:1])
    with pytest.raises(AssertionError, match="is in request 0 and in request 1"):
        table.check_integrity()


def test_move_reads_every_row_before_writing_any():
    """Chained moves (4 -> 2 while 2 -> 1): each target gets its source's rows as they were."""
    pool = KVPool(2, 6, num_kv_heads=1, head_dim=2, dtype=torch.float32, device="cpu")
    for layer in range(2):
        pool.k[layer][:] = torch.arange(6.0)[:, None, None] + 10 * layer
        pool.v[layer][:] = -pool.k[layer]
    pool.move([(2, 1), (4, 2)])
    for layer in range(2):
        assert pool.k[layer][:, 0, 0].tolist() == [10 * layer + s for s in (0, 2, 4, 3, 4, 5)]
        assert torch.equal(pool.v[layer], -pool.k[layer])
    pool.move([])  # nothing to move: nothing changes
    assert pool.k[0][:, 0, 0].tolist() == [0, 2, 4, 3, 4, 5]
