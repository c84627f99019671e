"""Figures and tables of one decoding step, built from the engine's step traces only.

Every function here takes trace dicts (``workbench/engine/trace.py`` lists the keys) and returns
a plotly figure, an HTML string or plain rows: no model, no tokenizer, no engine state; what a
step was worth comes from ``workbench/analysis``. The app (``workbench/app``) and the notebooks
render what these return. One module per view (docs/code.md names each).
"""
