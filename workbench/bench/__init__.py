"""Benchmarks: ``python -m workbench.bench <command> [options]`` (see ``__main__.py``)."""
