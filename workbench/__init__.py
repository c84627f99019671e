"""EAGLE-2 Workbench: see and measure how EAGLE-2 speculative decoding works.

Legend used in docstrings and beside reshapes across the package:
    B  requests in a batch          T  query tokens in one forward (all requests)
    N  tree nodes of one request    D  num_draft_tokens (nodes incl. the root)
    Hq query heads   Hkv key/value heads   Dh head dim   H hidden size
    S  KV slots in the pool         V  vocabulary size    L committed length
In index tensors -1 means "none" (no child, no sibling, no parent).
"""

__version__ = "0.1.0"
