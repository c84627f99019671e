"""Draft sources: one module per source (``head``, ``ngram``, ``exit``, ``model``), the interface
they share (``base.py``) and the registry that lists them (``registry.py``)."""
