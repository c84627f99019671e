"""Figures and tables of one decoding step, built from the engine's step traces only.

Every function here takes trace dicts (``workbench/engine/trace.py`` lists the keys) and returns
a plotly figure, an HTML string or plain rows: no model, no tokenizer, no engine state; what a
step was worth comes from ``workbench/analysis``. The app (``workbench/app``) and the notebooks
render what these return.

================  ==========================================================================
``tree.py``       the draft tree: every kept node named, "+n dropped" per parent, and the walk
``candidates.py`` every candidate by level and path score, and the rerank's cut-off
``mask.py``       the tree mask as a heatmap: query nodes x (prefix band + tree nodes)
``logits.py``     shifted by one: the target's top next tokens after each node vs its children
``walk.py``       the retrieve_* pointer arrays and the accept walk as ordered moves
``kv.py``         target and draft KV slots: committed, written, kept, rolled back, scratch
``output.py``     the output so far, coloured by provenance, and τ per step
``compare.py``    linear vs eagle2 on the same prompt: τ, tokens per target forward, cost;
                  τ against speedup per setting
``sampling.py``   the coins of a sampled walk; p as the stack min(p, q) + (1 − β)·r
``style.py``      one palette (Okabe-Ito, colour-blind safe) and one glyph per status
``layout.py``     where text goes: estimated sizes, label boxes that never overlap, wrapped titles
``labels.py``     names beside scatter points, placed by ``layout.place_labels``
``tokens.py``     how a token's text is shown (visible spaces and newlines), and a table's numbers
================  ==========================================================================
"""
