"""This machine's step cost for the ``auto`` policy, measured once per CPU and cached.

``step_cost_for(wb, source)`` returns the ``StepCost`` (``engine/policy/auto.py``) that ``auto`` weighs
its candidates by: the loaded target's verify cost at ``VERIFY_SIZES`` total tokens and the
draft's forward cost at ``DRAFT_ROWS`` rows (``cost.py``'s ``measure_verify_cost`` and
``measure_draft_cost``, after a committed prefix of ``PREFIX`` tokens). What a draft forward costs
depends on the draft source: the EAGLE head is timed; a draft model is timed as a target of its
own; the early exit ``exit:N`` runs N of the target's L layers, so its forward is taken as N / L
of a verify of as many tokens; the n-gram lookup runs no forward.

The measurement runs ``ROUNDS`` whole rounds one after another (seconds on a small model)
and is cached in ``<cache>/step-costs.json`` (``<cache>`` as for the model store) under the CPU
(``cpu_choices.cpu_signature``), torch version, threads, device, dtype, the target's and the
draft's shapes, only when the rounds agree: every size's round medians within ``AGREE`` of their
median. A busy machine makes them disagree; the medians are used for this run, nothing is
cached, and the next run measures again (as the linear-order choice does, ``cpu_choices.py``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from statistics import median

import torch

from workbench.measure.cost import measure_draft_cost, measure_verify_cost
from workbench.cache_file import add_entry, read_entries
from workbench.cpu_choices import cpu_signature
from workbench.engine.policy.auto import StepCost
from workbench.engine.draft_source import DraftSource

CACHE_FILE = "step-costs.json"
# Few repeats: on a 2-core CPU a forward of 64 tokens takes a few hundred ms, and the measurement
# runs before the load starts (about ten seconds in all). Every power of two up to 64: the
# few-row products switch implementation between row counts (``cpu_choices``: weight-left at 1-2
# rows and oneDNN's packed GEMM from 3 on the AMD EPYC), so the curve has steps that a sparser
# grid would smooth over (a verify of 2 tokens, linear:1's, costs a decode step there, not the
# third of the way to a verify of 4 that interpolating from 1 and 4 said). Sizes between these
# are interpolated, larger ones (16 requests x 8 nodes = 128) extended along the last slope.
VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64)  # total tokens of a verify: batch x block
DRAFT_ROWS = (1, 2, 4, 8, 16, 64)  # rows of one draft forward: batch x topk
PREFIX = 128
REPEATS = 3  # timed calls per size in a round (their median), after one untimed
ROUNDS = 3  # the median of three: one round a busy moment slowed does not move it
TIMING = {"prefix_len": PREFIX, "repeats": REPEATS, "warmup": 1}
AGREE = 0.25  # (max - min) / median of a size's round medians, at most, for a cacheable verdict


def step_cost_for(wb, source: DraftSource | None, cache_dir: Path | None = None, log=None) -> StepCost:
    """The step cost of ``wb``'s target with the draft ``source`` (None: a policy that never
    drafts), from the cache or measured now (see the module docstring). ``log``: one line per
    event (default: stderr)."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    key = _cache_key(wb, source)
    path = Path(cache_dir) / CACHE_FILE if cache_dir is not None else _default_path()
    cached = read_entries(path).get(key)
    if _current(cached):
        return StepCost(cached["verify"], cached["draft"],
                        source=f"cached in {CACHE_FILE}")
    say(f"[auto] timing verify and draft forwards on this CPU ({ROUNDS} rounds, once, a few seconds)")
    t0 = time.perf_counter()
    rounds = [_measure(wb, source) for _ in range(ROUNDS)]
    say(f"[auto] measured in {time.perf_counter() - t0:.0f} s")
    verify, v_agree = _agreed([r[0] for r in rounds])
    draft, d_agree = _agreed([r[1] for r in rounds])
    if not (v_agree and d_agree):
        say(f"[auto] the {ROUNDS} rounds differ by more than {AGREE:.0%} at some size (a busy machine?): "
            "their medians are used for this run, nothing cached, measured again next run")
        return StepCost(verify, draft, source="measured, rounds disagreed")
    add_entry(path, key, {"verify": verify, "draft": draft, "cpu": cpu_signature(), "rounds": ROUNDS,
                       "per_round": [{"verify": v, "draft": d} for v, d in rounds]}, "[auto]", "the step cost")
    return StepCost(verify, draft, source="measured on this CPU")


def step_cost_if_needed(wb, policies, log=None) -> StepCost | None:
    """The step cost for ``policies`` (``NamedPolicy``s): ``step_cost_for`` the draft source of
    the first that ``needs_cost`` (every policy of one run drafts from the one loaded draft);
    None when none needs one."""
    needing = [p for p in policies if p.needs_cost]
    return step_cost_for(wb, needing[0].draft, log=log) if needing else None


def _measure(wb, source: DraftSource | None) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """One round: (verify points, draft points), each (size, median ms)."""
    graphs = bool(wb.cuda_graphs)
    rows = measure_verify_cost(wb.target, VERIFY_SIZES, **TIMING, cuda_graphs=graphs) \
        or measure_verify_cost(wb.target, VERIFY_SIZES, **TIMING)
    verify = [(r["tokens"], r["ms"]) for r in rows]
    kind = source.kind if source is not None else None
    if kind == "head":
        got = measure_draft_cost(wb.target, wb.draft, DRAFT_ROWS, **TIMING, cuda_graphs=graphs) \
            or measure_draft_cost(wb.target, wb.draft, DRAFT_ROWS, **TIMING)
        return verify, [(r["rows"], r["ms"]) for r in got]
    if kind == "model":
        return verify, [(r["tokens"], r["ms"]) for r in measure_verify_cost(wb.draft, DRAFT_ROWS, **TIMING)]
    if kind == "exit":  # N of the target's L layers (embedding and head included: an upper bound)
        share = source.num_layers / wb.target.config.num_layers
        return verify, [(n, ms * share) for n, ms in verify]
    return verify, []  # n-gram lookups, or no draft at all: no draft forward


def _current(cached) -> bool:
    """Whether a cache entry was measured at today's sizes (one from a sparser grid, or unreadable,
    is measured again)."""
    if not isinstance(cached, dict):
        return False
    try:
        verify = [int(n) for n, _ in cached["verify"]]
        draft = [int(n) for n, _ in cached["draft"]]
    except (KeyError, TypeError, ValueError):
        return False
    return verify == list(VERIFY_SIZES) and draft in ([], list(DRAFT_ROWS))


def _agreed(rounds: list[list[tuple[int, float]]]) -> tuple[list[tuple[int, float]], bool]:
    """Each size's median over the rounds, and whether every size's rounds lie within AGREE."""
    out, agree = [], True
    for i, (n, _) in enumerate(rounds[0]):
        ms = [r[i][1] for r in rounds]
        mid = median(ms)
        agree &= mid > 0 and (max(ms) - min(ms)) / mid <= AGREE
        out.append((n, round(mid, 3)))
    return out, agree


def _linear(wb) -> str:
    """The few-row linear paths the curves were timed with (a new choice times them again)."""
    order = getattr(wb, "linear_order", None)
    if order is None:
        return "linear plain"
    # oneDNN runs q/k/v and gate/up as one product each (models.linear.FusedPack): not the cost of before
    return "linear " + ("/".join(order.paths) or "plain") + (" fused" if order.uses_onednn else "")


def _cache_key(wb, source: DraftSource | None) -> str:
    c = wb.target.config
    device = next(wb.target.parameters()).device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_signature()
    draft = "no draft" if source is None else source.name
    if source is not None and (source.source.needs.head or source.source.needs.model) and wb.draft is not None:
        draft += f" {sum(p.numel() for p in wb.draft.parameters())} params"
    return (f"{where} | torch {torch.__version__} | {torch.get_num_threads()} threads | {wb.dtype_name} | "
            f"target {c.num_layers}x{c.hidden_size} vocab {c.vocab_size} | {draft} | {_linear(wb)}"
            f"{' | cuda graphs' if wb.cuda_graphs else ''}")


def _default_path() -> Path:
    from workbench.store import default_cache_dir

    return default_cache_dir() / CACHE_FILE
