"""Every prediction a notebook prints, from the project's one cost model.

A notebook measures this machine's step cost once (``workbench.measure.step_cost.step_cost_for``:
the verify and draft curves and the step's overhead, cached per CPU, threads and dtype) and asks
``StepCost.predict(spec, tau, batch)`` for what a setting is worth; a prediction is then printed
beside the measurement it predicts, with the gap in words (``takeaways.gap``). What a notebook
varies the cost model does not measure (a longer context, a verify that costs one decode step
whatever its size, an early exit as the draft) it feeds to the same model as a ``StepCost`` built
here from the one measurement, never through a second formula or interpolator.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.cost_model import StepCost


def step_cost(wb, source=None) -> StepCost:
    """This machine's step cost for ``wb``'s target with the draft ``source`` (default: the
    draft loaded, the shipped head), at the notebook's torch threads: cached, or measured now
    (seconds) without printing the measurement's log lines. A cached entry the measuring code
    would time again for a part it adds (``step_cost._current``; here the per-level overhead)
    is read as it is, its curves at today's sizes (``_readable``): the notebooks of one refresh
    then read one measurement, and a part the entry lacks prices as it did when it was made."""
    from workbench.cache_file import read_entries
    from workbench.measure.step_cost import CACHE_FILE, _cache_key, _model, _readable, step_cost_for
    from workbench.store import default_cache_dir

    source = source if source is not None else wb.loaded_draft
    entry = read_entries(default_cache_dir() / CACHE_FILE).get(_cache_key(wb, source))
    if _readable(entry):
        return _model(entry, source=f"cached in {CACHE_FILE}")
    return step_cost_for(wb, source, log=lambda msg: None)


def cached_at_threads(wb, source, threads: int) -> StepCost | None:
    """The step cost cached for the same CPU, torch, dtype, target and draft measured with
    ``threads`` torch threads (whatever few-row linear order was chosen at those threads), or
    None when none is cached: nothing is measured, since this process runs at its own threads."""
    from workbench.cache_file import read_entries
    from workbench.measure.step_cost import CACHE_FILE, _cache_key, _model, _readable
    from workbench.store import default_cache_dir

    here = _cache_key(wb, source).split(" | ")

    def same(key: str) -> bool:
        parts = key.split(" | ")
        if len(parts) != len(here):
            return False
        return all(b == f"{threads} threads" if a.endswith(" threads") else
                   a == b or (a.startswith("linear ") and b.startswith("linear ")) for a, b in zip(here, parts))

    for key, entry in read_entries(default_cache_dir() / CACHE_FILE).items():
        if same(key) and _readable(entry):  # one from before the prefill was timed does too: no prefill is read
            return _model(entry, source=f"cached in {CACHE_FILE}")
    return None


def answers_speedup(cost: StepCost, spec, prompt_lens, output_lens, taus) -> float:
    """The speedup in tokens per second as ``lessons.settings.measure_settings`` measures it, one
    request at a time: the mean over the answers of each one's tokens per second under ``spec``
    over the same mean under plain decoding. Answer i, of ``output_lens[i]`` tokens after a
    prompt of ``prompt_lens[i]``, takes its prefill (which emits its first token), under ``spec``
    the draft's catch-up over its prompt, and (n - 1) / τ decode steps at its own τ
    (``taus[i]``: the answers' τ differ, and a mean of rates weighs the fast ones most, so a
    pooled τ would not do) (``StepCost.closed_loop`` at one request). The prefill, which
    speculation does not shorten, is part of every answer's time, so this lies below the decode
    steps' own speedup at the same τ; a measured speedup in tokens per second is set beside this
    one."""
    prompt_lens, output_lens, taus = list(prompt_lens), list(output_lens), list(taus)
    if not prompt_lens or not len(prompt_lens) == len(output_lens) == len(taus):
        raise ValueError(f"one output length and one τ per prompt, and at least one prompt, got {len(output_lens)} "
                         f"and {len(taus)} for {len(prompt_lens)} prompts")
    from workbench.engine.config import SpecConfig

    def rate(setting, per) -> float:
        return sum(cost.closed_loop(setting, t, 1, prompt_lens=[p], output_lens=[n]).tokens_per_s
                   for p, n, t in zip(prompt_lens, output_lens, per)) / len(prompt_lens)

    return rate(spec, taus) / rate(SpecConfig("vanilla"), [1.0] * len(taus))


def memory_bound(cost: StepCost) -> StepCost:
    """``cost`` with a verify of any size costing one decode step and no overhead: the assumption
    of Leviathan et al.'s S = E[N] / (γc + 1), and what a memory-bound device comes close to."""
    decode = cost.verify_ms(1)
    return StepCost(((1, decode), (2, decode)), cost.draft, source=f"{cost.source}, verify flat at a decode step",
                    measured=cost.measured)


def at_context(cost: StepCost, verify: dict[int, float]) -> StepCost:
    """``cost`` with its verify curve replaced by forwards measured after another committed
    context (``{tokens: ms}``, a decode step of one token among them): the draft and the overhead
    stay as measured at the step cost's prefix."""
    if 1 not in verify:
        raise ValueError(f"the verify points need a decode step (1 token), got sizes {sorted(verify)}")
    return replace(cost, verify=tuple(sorted(verify.items())), verify_range=(),
                   source=f"{cost.source}, verify at another context")


def with_draft(cost: StepCost, wb, source) -> StepCost:
    """``cost`` with the draft ``source``'s forward cost as that source derives it from the one
    measured verify curve (``DraftSource.draft_cost``: an early exit ``exit:N`` is N / L of a
    verify of as many tokens; the n-gram lookup runs none). A source that times a network of its
    own (the head, a draft model) is measured by ``step_cost`` instead: ValueError here."""
    from workbench.measure.step_cost import Timers

    class VerifyOnly(Timers):
        def head(self):
            raise ValueError(f"{source.name} times a network of its own: use step_cost(wb, source)")

        model = head

    draft = source.draft_cost(VerifyOnly(wb, list(cost.verify)))
    return replace(cost, draft=tuple(draft), draft_range=(), source=f"{cost.source}, draft {source.name}")


def readme_record() -> str:
    """The record the README's table quotes (a path from the checkout's root): the one its
    ``<!-- bench-table RECORD -->`` block names, which ``tools/readme_table.py`` writes from."""
    import re
    from pathlib import Path

    import workbench

    readme = (Path(workbench.__file__).resolve().parents[1] / "README.md").read_text()
    found = re.search(r"<!-- bench-table (\S+) -->", readme)
    if found is None:
        raise ValueError("README.md has no <!-- bench-table RECORD --> block naming its record")
    return found.group(1)


def record_threads(record: str | None = None) -> int:
    """The torch threads a stored bench record (a path from the checkout's root; None: the
    README's, ``readme_record``) ran with."""
    import json
    from pathlib import Path

    import workbench

    record = record or readme_record()
    meta = json.loads((Path(workbench.__file__).resolve().parents[1] / record).read_text())["meta"]
    return int(meta["machine"]["torch_threads"])
