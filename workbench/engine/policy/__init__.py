"""Speculation policies: which setting (a ``SpecConfig``, or plain decoding) each decode step runs.

The engine asks its policy before every decode step, with the running batch, and tells it
afterwards what the step accepted; it never reads a fixed ``SpecConfig`` of its own. A policy
is anything with the four members of ``SpecPolicy`` (``base.py``: ``name``, ``settings()``,
``choose(batch)`` -> a ``Choice``, ``observe(choice, batch)``).

One module per policy (``fixed.py``: ``Off`` and ``Fixed``; ``schedule.py``: ``Schedule``, as
vLLM's speculative tokens per batch size; ``adaptive.py``: ``Adaptive``, as SGLang's adaptive
speculation; ``auto.py``: ``Auto``, by expected tokens/s from the measured step cost), and one
grammar that names them all (``grammar.py``), read alike by ``generate --policy``, ``bench load
--policies``, the app's Load tab and ``Workbench.engine``. Everything is importable from
``workbench.engine.policy``.
"""

from workbench.engine.policy.adaptive import DEFAULT_LADDER, Adaptive
from workbench.engine.policy.auto import AUTO_CANDIDATES, Auto, StepCost
from workbench.engine.policy.base import OFF, Choice, SpecPolicy, draft_source_of, parse_setting, setting_label
from workbench.engine.policy.fixed import Fixed, Off, policy_for
from workbench.engine.policy.grammar import (KINDS, POLICIES, POLICY_GRAMMAR, NamedPolicy, parse_policies,
                                             parse_policy, read_policy)
from workbench.engine.policy.schedule import BatchRange, Schedule

__all__ = ["AUTO_CANDIDATES", "DEFAULT_LADDER", "KINDS", "OFF", "POLICIES", "POLICY_GRAMMAR", "Adaptive", "Auto",
           "BatchRange", "Choice", "Fixed", "NamedPolicy", "Off", "Schedule", "SpecPolicy", "StepCost",
           "draft_source_of", "parse_policies", "parse_policy", "parse_setting", "policy_for", "read_policy",
           "setting_label"]
