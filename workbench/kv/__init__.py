"""KV cache: bookkeeping (``allocator.py``, plain Python) apart from storage (``pool.py``, tensors)."""

from workbench.kv.allocator import OutOfSlots, SlotAllocator, SlotTable
from workbench.kv.pool import KVPool

__all__ = ["KVPool", "OutOfSlots", "SlotAllocator", "SlotTable"]
