"""Measuring on this machine: the library the benchmark commands, the CLI, the app, training and
the lessons import (the Spec-Bench questions, what a forward costs, the roofline, the step cost,
a load run, the methods by name, the figures from per-question records).

Nothing here parses a command line or writes a report; the commands are in ``workbench/bench``.
"""
