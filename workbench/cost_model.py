"""What a decode step costs on this machine, and what a setting is worth here: the one cost model.

Every prediction in the project goes through ``StepCost``: the ``auto`` policy weighing its
candidates, ``python -m workbench.bench tune`` ranking trees, the bench report's predicted column,
the app's Compare and the notebooks. Plain Python, no torch: the curves are measured elsewhere
(``workbench/measure/step_cost.py``, once per machine, threads and dtype, cached) or given (tests).

A step of B requests under a setting (``num_steps`` S, ``topk`` K, ``num_draft_tokens`` D) is
charged, in ms:

    verify(B·D)                    one target forward + logits over every request's tree
    + kv(D) · B·L - kv(B·D) · P    the keys and values of each request's L committed tokens,
                                   read every layer by each of its D new tokens, less the P
                                   the curve's one sequence read where it was timed
      (these two × pace(B, D): what a batch's forward takes over one sequence's of as many
       tokens, by the new tokens each request brings, measured with the overhead, or at a run's
       own pace where its probes timed one)
    + draft(B·τ)                   the draft extend: each request's accepted tokens and bonus
                                   (τ rows a request on average; one when τ is not known yet)
    + (S - 1) · draft(B·K)         the tree levels after the first, K frontier rows a request
    + overhead(B)                  what a step spends outside the forwards: sampling, the tree
                                   build, the accept walk, KV commit, Python per request

and plain decoding ``verify(B) + overhead(B)``, where ``verify`` and ``draft`` are the measured
curves (``Curve``: median ms per size with the range over the measurement's rounds) and the
overhead is measured too, as ms per step plus ms per request, separately for plain and
speculative steps (``Overhead``; zero when not measured, which prices the forwards alone). The
context term (``StepCost.kv``, ``context_ms``) is measured as well: forwards of one request
after 1,024 committed tokens against after 128, at 1 to 32 new tokens
(``measure/step_cost.py``): on a 2-core CPU several µs a committed token for a decode step and
more for a verify of more tokens (every new token's attention reads the context), which the
curves, timed after one 128-token prefix, cannot see, and which a batch of long prompts pays in
every step (the load records list it with their step costs).

``predict(spec, tau, batch)`` turns a step's cost and τ (tokens a request emits per step) into
tokens/s, TPOT and the speedup over plain decoding at the same batch.

A request also costs its **prefill** (a target forward over its prompt, the running batch
waiting) and, where the draft runs a forward, the draft's **catch-up** (its first speculative step
extends the draft over every prompt row): ``prefill`` and ``catch_up``, measured against the
prompt's length (empty: priced 0). ``closed_loop(spec, tau, batch, prompt_lens, output_lens)``
gives a closed loop's tokens/s: each request's share of the decode steps (``(n - 1) / τ`` steps,
each ``step(B) / B``) plus its prefill and catch-up whole; a prefill step that admits several
requests runs their prompts in one forward, each prompt beyond the first saving
``prefill_joined``, where a run counted its prefill steps.

The curves are read as measured (linear between sizes, the first value below the first, the last
slope past the last), not through a monotone fit: on a CPU a verify of a few tokens can cost less
than a decode step of one (another library path), and that dip is what plain decoding pays.
``Curve.fit`` (non-decreasing) is for sentences that name a regime, not for predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.metrics import predicted_speedup
from workbench.timing import monotone


def _interpolate(points: tuple[tuple[int, float], ...], x: float) -> float:
    """The piecewise-linear curve through ``points`` (sizes increasing) at ``x``: the first
    value below the first size, the last segment's slope past the last size (one point:
    proportional to the size past it)."""
    (x0, y0) = points[0]
    if x <= x0 or len(points) == 1:
        return y0 if x <= x0 else y0 * x / x0
    for (xa, ya), (xb, yb) in zip(points, points[1:]):
        if x <= xb:
            return ya + (yb - ya) * (x - xa) / (xb - xa)
    (xa, ya), (xb, yb) = points[-2], points[-1]
    return yb + (yb - ya) * (x - xb) / (xb - xa)


def _kv_points(d: dict) -> tuple:
    """The context term of a dict (``StepCost.as_dict``'s ``kv``); one written when it was timed
    at a decode step alone holds ``kv_ms``, read as that one point (every size priced alike)."""
    if d.get("kv"):
        return tuple(d["kv"])
    return ((1, d["kv_ms"]),) if d.get("kv_ms") else ()


def _checked(points, what: str, zero: bool = False) -> tuple[tuple[int, float], ...]:
    """``points`` as (int, float) tuples: sizes >= 1 and increasing, ms > 0 (``zero``: >= 0)."""
    points = tuple((int(n), float(ms)) for n, ms in points)
    if any(n < 1 or ms < 0 or (ms == 0 and not zero) for n, ms in points):
        raise ValueError(f"{what}: each point is (size >= 1, ms {'>=' if zero else '>'} 0), got {points}")
    sizes = [n for n, _ in points]
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"{what}: sizes must increase, got {sizes}")
    return points


def _checked_paces(points) -> tuple[tuple[int, int, float], ...]:
    """``StepCost.batched_tokens`` as (requests >= 2, tokens >= 1, factor > 0) tuples, sorted,
    one point per (requests, tokens)."""
    out = tuple(sorted((int(n), int(t), float(f)) for n, t, f in points))
    if any(n < 2 or t < 1 or f <= 0 for n, t, f in out):
        raise ValueError(f"batched forwards' pace by tokens: each point is (requests >= 2, tokens >= 1, factor > 0), "
                         f"got {out}")
    if len({(n, t) for n, t, _ in out}) != len(out):
        raise ValueError(f"batched forwards' pace by tokens: one point per (requests, tokens), got {out}")
    return out


def _pace_at(points, batch: float) -> float:
    """A batch pace's (requests, factor) ``points`` read at ``batch``: 1 at one request, linear up
    to each point, flat past the last."""
    points = ((1, 1.0), *((n, f) for n, f in points if n > 1))
    return points[-1][1] if batch >= points[-1][0] else _interpolate(points, batch)


@dataclass(frozen=True)
class Curve:
    """ms of one forward against its size (tokens or rows): the median at each measured size and,
    where the measurement kept them, the lowest and highest of its rounds."""

    points: tuple[tuple[int, float], ...]
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    what: str = "cost curve"

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", _checked(self.points, self.what))
        for name in ("low", "high"):
            values = tuple(float(v) for v in getattr(self, name))
            if values and len(values) != len(self.points):
                raise ValueError(f"{self.what}: {name} needs one value per size, got {len(values)} for "
                                 f"{len(self.points)} sizes")
            object.__setattr__(self, name, values)

    @classmethod
    def from_rows(cls, rows: list[dict], size: str = "tokens", what: str = "cost curve") -> Curve:
        """From measurement rows ``{size: N, "ms": t[, "lo": a, "hi": b]}`` (``measure/cost.py``)."""
        rows = sorted(rows, key=lambda r: r[size])
        spread = all("lo" in r and "hi" in r for r in rows)
        return cls(tuple((r[size], r["ms"]) for r in rows), tuple(r["lo"] for r in rows) if spread else (),
                   tuple(r["hi"] for r in rows) if spread else (), what)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.points)

    @property
    def ms(self) -> tuple[float, ...]:
        return tuple(ms for _, ms in self.points)

    def at(self, size: float, extrapolate: bool = True) -> float:
        """ms at ``size``, read as measured (module docstring). ``extrapolate=False``: ValueError
        outside the measured sizes (a sentence about the curve's shape reads only what was measured)."""
        if not extrapolate and not self.sizes[0] <= size <= self.sizes[-1]:
            raise ValueError(f"{size} is outside the measured range {self.sizes[0]}..{self.sizes[-1]}: "
                             "measure it instead of extrapolating")
        return _interpolate(self.points, size)

    def range_at(self, size: float) -> tuple[float, float]:
        """The lowest and highest of the rounds, read like the medians (the median twice when the
        measurement kept no range)."""
        if not self.low:
            return self.at(size), self.at(size)
        return (_interpolate(tuple(zip(self.sizes, self.low)), size),
                _interpolate(tuple(zip(self.sizes, self.high)), size))

    @property
    def fit(self) -> Curve:
        """The non-decreasing fit of the medians (``workbench.timing.monotone``): a larger forward
        never costs less; for naming a regime, not for predicting (module docstring)."""
        return Curve(tuple(zip(self.sizes, monotone(self.sizes, self.ms))), what=f"{self.what}, fit")


@dataclass(frozen=True)
class Overhead:
    """ms a step spends outside the forwards, as ``per_step + per_request * B``, measured apart for
    plain and speculative steps (``measure/step_cost.py``: each step less its target forward by the
    engine's clock and its draft forwards; what a batch's target forward takes over one sequence's
    is ``StepCost.batched``, not this). All zero: not measured (forwards only).

    The speculative terms were measured at a tree of ``spec_levels`` draft levels (``num_steps``);
    each level more or fewer adds or takes ``level_per_step + level_per_request * B`` (the
    difference between that tree and a chain of one, per level: the draft's top-k, scores and
    bookkeeping of a level, and the walk and commit of a deeper tree, run in Python per level),
    never below 0: a level costs no less than nothing, whatever the noise of the two lines' fit
    says at a batch far from where they cross (a fit on a busy 2-core machine gave 8.6 ms a step
    less 2.1 ms a request, below 0 from 5 requests on). ``spec_levels`` 0: measured at one setting
    only, the same for every speculative setting.

    ``points``: what each line was fitted through, by kind (``"plain"``, ``"tree"``, ``"chain"``):
    (batch, ms) at each batch timed, the median of every timed step of that batch (empty: an
    entry measured before they were kept, or a made-up overhead)."""

    plain_per_step: float = 0.0
    plain_per_request: float = 0.0
    spec_per_step: float = 0.0
    spec_per_request: float = 0.0
    spec_levels: float = 0
    level_per_step: float = 0.0
    level_per_request: float = 0.0
    points: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()

    def __post_init__(self) -> None:  # a dict of lists (from JSON) becomes tuples: an Overhead compares and hashes
        points = self.points.items() if isinstance(self.points, dict) else self.points
        object.__setattr__(self, "points", tuple((str(kind), tuple((int(b), float(ms)) for b, ms in pts))
                                                 for kind, pts in points))

    def points_of(self, kind: str) -> tuple[tuple[int, float], ...]:
        """The (batch, ms) points of one kind's line (empty where none were kept)."""
        return dict(self.points).get(kind, ())

    def ms(self, speculative: bool, batch: int, levels: int | None = None) -> float:
        """A step of ``batch`` requests; ``levels``: the speculative setting's ``num_steps``."""
        if not speculative:
            return max(0.0, self.plain_per_step + self.plain_per_request * batch)
        more = (levels - self.spec_levels) if levels is not None and self.spec_levels else 0
        per_level = max(0.0, self.level_per_step + self.level_per_request * batch)
        return max(0.0, self.spec_per_step + self.spec_per_request * batch + more * per_level)

    @property
    def measured(self) -> bool:
        return any((self.plain_per_step, self.plain_per_request, self.spec_per_step, self.spec_per_request))


def decode_context(prompt_lens, output_lens) -> float | None:
    """The mean context the decode steps of requests of ``prompt_lens`` prompt tokens and
    ``output_lens`` output tokens read: a request's steps run from its prompt to its prompt and
    every token it wrote, p + n/2 on average, weighted by its n - 1 decode steps (None: no decode
    step). ``StepCost.closed_loop`` prices a loop's steps there, a benchmark report its step columns."""
    ran = [(p, n) for p, n in zip(prompt_lens, output_lens) if n > 0]
    steps = sum(n - 1 for _, n in ran)
    return sum((p + n / 2) * (n - 1) for p, n in ran) / steps if steps else None


def verify_mix(nodes) -> dict[float, float]:
    """{tokens: share of the steps} of a request's verify: ``nodes`` as a count (every step the
    same) or as such a mapping (shares of any scale, normalised here). ValueError for a count
    below 1 or no positive share."""
    mix = dict(nodes) if hasattr(nodes, "items") else {float(nodes): 1.0}
    total = sum(mix.values())
    if not mix or total <= 0 or any(w < 0 for w in mix.values()):
        raise ValueError(f"a verify mix needs positive shares of the steps, got {nodes!r}")
    if any(float(n) < 1 for n in mix):
        raise ValueError(f"a verify holds the root at least (1 token), got {nodes!r}")
    return {float(n): w / total for n, w in mix.items() if w > 0}


@dataclass(frozen=True)
class StepParts:
    """One step's predicted ms, part by part (``StepCost.parts``)."""

    verify_ms: float
    draft_extend_ms: float = 0.0
    draft_levels_ms: float = 0.0
    overhead_ms: float = 0.0

    @property
    def draft_ms(self) -> float:
        return self.draft_extend_ms + self.draft_levels_ms

    @property
    def total_ms(self) -> float:
        return self.verify_ms + self.draft_ms + self.overhead_ms

    def as_dict(self, digits: int = 2) -> dict:
        return {"verify_ms": round(self.verify_ms, digits), "draft_extend_ms": round(self.draft_extend_ms, digits),
                "draft_levels_ms": round(self.draft_levels_ms, digits), "overhead_ms": round(self.overhead_ms, digits),
                "step_ms": round(self.total_ms, digits)}


@dataclass(frozen=True)
class Prediction:
    """What a setting is worth at a batch: tokens per step, the step's parts, tokens/s, TPOT and the
    speedup over plain decoding of the same batch on the same model."""

    tau: float
    batch: float  # a mean batch may be fractional: the curves are read between sizes
    parts: StepParts
    plain_ms: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.tau / self.parts.total_ms * 1e3

    @property
    def tpot_ms(self) -> float:
        """ms between a request's tokens: the step over the tokens it gives each request."""
        return self.parts.total_ms / self.tau

    @property
    def speedup(self) -> float:
        return predicted_speedup(self.tau, self.parts.verify_ms + self.parts.overhead_ms, self.parts.draft_ms,
                                 self.plain_ms)


@dataclass(frozen=True)
class LoopPrediction:
    """A closed loop's predicted wall time, part by part (``StepCost.closed_loop``), in ms over
    all its requests, and the tokens they emit."""

    tokens: int
    step: Prediction  # one decode step at the loop's mean batch
    decode_ms: float  # the requests' shares of the decode steps
    prefill_ms: float  # their prefill steps, each holding the batch up
    catch_up_ms: float = 0.0  # the draft's catch-up over their prompts, beyond the steps it rides in
    prefill_priced: bool = True  # False: the step cost has no prefill measured, so it is priced 0
    prefill_saved_ms: float = 0.0  # what prompts sharing a prefill step saved (in ``prefill_ms`` already)

    @property
    def total_ms(self) -> float:
        return self.decode_ms + self.prefill_ms + self.catch_up_ms

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_ms * 1e3 if self.total_ms > 0 else 0.0


@dataclass(frozen=True)
class StepCost:
    """What a decode step costs on this machine (module docstring).

    ``verify``: (tokens, ms) points of one target forward + logits over that many tokens, the
    whole batch's together (size 1 is a plain decode step of one request); ``draft``: (rows, ms)
    points of one draft forward, empty when the draft runs no forward (the n-gram lookup);
    ``overhead``: the step outside the forwards; ``source``: where the points came from ("measured
    on this CPU", "cached in ...", "given"); ``measured``: which measurement, for every figure
    that quotes this model (the cache entry's date, CPU, threads and dtype); ``verify_range`` /
    ``draft_range``: (low, high) per size over the measurement's rounds, where it kept them;
    ``prefill``: (prompt tokens, ms) points of the engine's prefill step of one request;
    ``catch_up``: (prompt tokens, ms) points of the draft's extend over one request's prompt rows
    (empty: not measured, or a draft that runs no forward over the prompt).

    ``kv``: (new tokens a request, ms) points: what a step spends for each committed token a
    running request's attention reads (its keys and values, every layer) when each request brings
    that many new tokens (empty: not measured, no context priced; ``kv_ms``); ``prefix``: the
    committed tokens each request held where the curves and the overhead were measured;
    ``verify_prefix``: the context of the one sequence the verify curve was timed after, where it
    differs (a probe after a run's prompt; None: ``prefix``). A step of B requests of D new tokens
    each and mean context L is priced ``kv_ms(D) * B*L - kv_ms(B*D) * verify_prefix`` over its
    curves, in its verify (``parts``'s ``context``): every request reads its own context, and the
    curve's one sequence of B*D tokens read ``verify_prefix`` tokens.

    ``batched``: (requests, factor) points: what a forward of that many requests, each after its
    own context, took over what the curves and the context term say of it: the engine's steps of
    the overhead's measurement, each against a bare forward timed beside it
    (``measure/step_cost.py``), or a run's own probes (``measure/probe.py``); a step of B > 1
    requests has its verify part scaled by the factor read at B (``batch_pace``: 1 at one request,
    linear between the points, flat past the last). Empty: 1 at every batch (a step cost measured
    before the factor was kept, or made up).

    ``batched_tokens``: (requests, new tokens a request, factor) points, the same factor by the
    tokens each request brings: each request's attention runs apart (``attention/sdpa.py``), and
    a lone query takes a cheaper path than several under a mask, so the factor is not one number
    at a batch: the engine's steps of 8 requests took 1.25x the curves' word when plain, 1.41x
    for a chain of one (2 tokens a request) and 1.19x for a tree of 4, in the step cost that
    priced docs/bench/archive/load-cpu-avx512-2026-12-07-2310.md (2 threads, fp32; its
    ``predicted.step_costs``). Where it holds points ``batch_pace`` reads it (linear between
    token counts, flat past them) and ``batched`` only where it does not.

    ``prefill_joined``: ms a prefill step saves for each prompt it holds beyond the first: the
    engine prefills every request admitted since its last step in one forward, whose fixed part
    (each layer's weights read once, the step's Python) several prompts then share; a run's
    probes time it (``measure/probe.py``, ``batched_forwards``), 0 where none did."""

    verify: tuple[tuple[int, float], ...]
    draft: tuple[tuple[int, float], ...] = ()
    source: str = "given"
    overhead: Overhead = field(default_factory=Overhead)
    measured: str = ""
    verify_range: tuple[tuple[float, float], ...] = ()
    draft_range: tuple[tuple[float, float], ...] = ()
    prefill: tuple[tuple[int, float], ...] = ()
    catch_up: tuple[tuple[int, float], ...] = ()
    kv: tuple[tuple[int, float], ...] = ()
    prefix: float = 128.0
    verify_prefix: float | None = None
    batched: tuple[tuple[int, float], ...] = ()
    prefill_joined: float = 0.0
    batched_tokens: tuple[tuple[int, int, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.verify:
            raise ValueError("a step cost needs at least one verify point (tokens, ms)")
        # lists (from JSON) become tuples: a StepCost compares and hashes
        object.__setattr__(self, "verify", _checked(self.verify, "verify cost"))
        object.__setattr__(self, "draft", _checked(self.draft, "draft cost"))
        object.__setattr__(self, "prefill", _checked(self.prefill, "prefill cost"))
        object.__setattr__(self, "catch_up", _checked(self.catch_up, "catch-up cost"))
        object.__setattr__(self, "kv", _checked(self.kv, "context term", zero=True))
        object.__setattr__(self, "batched", _checked(self.batched, "batched forwards' pace"))
        object.__setattr__(self, "batched_tokens", _checked_paces(self.batched_tokens))
        for name in ("verify_range", "draft_range"):
            object.__setattr__(self, name, tuple((float(lo), float(hi)) for lo, hi in getattr(self, name)))
        if isinstance(self.overhead, dict):
            object.__setattr__(self, "overhead", Overhead(**self.overhead))

    @property
    def verify_curve(self) -> Curve:
        lo, hi = zip(*self.verify_range) if self.verify_range else ((), ())
        return Curve(self.verify, lo, hi, "verify cost")

    def verify_ms(self, tokens: float) -> float:
        return _interpolate(self.verify, tokens)

    def draft_ms(self, rows: float) -> float:
        return _interpolate(self.draft, rows) if self.draft else 0.0

    def prefill_ms(self, prompt_len: float) -> float:
        """The engine's prefill step of one request of ``prompt_len`` tokens (0: not measured)."""
        return _interpolate(self.prefill, prompt_len) if self.prefill else 0.0

    def catch_up_ms(self, prompt_len: float, tau: float = 1.0) -> float:
        """What a request's first speculative step costs beyond a step: the draft's extend over
        its ``prompt_len`` prompt rows less the τ rows a step's extend is priced at (0: not
        measured, or a draft with no forward over the prompt)."""
        if not self.catch_up:
            return 0.0
        return max(0.0, _interpolate(self.catch_up, prompt_len) - self.draft_ms(max(1.0, tau)))

    def kv_ms(self, tokens: float = 1) -> float:
        """ms a step spends for each committed token a request reads when each request brings
        ``tokens`` new tokens (``kv``; read as measured, flat past its last point; 0: not measured)."""
        if not self.kv:
            return 0.0
        return self.kv[-1][1] if tokens >= self.kv[-1][0] else _interpolate(self.kv, tokens)

    def batch_pace(self, batch: float, tokens: float = 1.0) -> float:
        """The factor a forward of ``batch`` requests of ``tokens`` new tokens each takes over the
        curves' word (``batched_tokens`` where it holds points, else ``batched``): 1 at one
        request, linear in the batch up to each measured one and flat past the last, linear
        between the token counts measured and flat past them."""
        if batch <= 1:
            return 1.0
        if self.batched_tokens:
            by_tokens: dict[int, list[tuple[int, float]]] = {}
            for n, t, f in self.batched_tokens:
                by_tokens.setdefault(t, []).append((n, f))
            at = [(t, _pace_at(points, batch)) for t, points in sorted(by_tokens.items())]
            if tokens <= at[0][0] or len(at) == 1:
                return at[0][1]
            return at[-1][1] if tokens >= at[-1][0] else _interpolate(tuple(at), tokens)
        return _pace_at(self.batched, batch) if self.batched else 1.0

    def forward_ms(self, batch: float, tokens: float, context: float | None = None,
                   mix: dict[float, float] | None = None) -> float:
        """One target forward (and its logits) of ``batch`` requests of ``tokens`` new tokens each
        (a mean): the curve at their sum, the context term (``context_ms``), the batched forwards'
        pace at ``tokens``, or, given ``mix`` ({tokens: share of the requests}, ``verify_mix``),
        the shares' mean of the pace at each count (each request's attention runs at its own
        count's pace)."""
        pace = (sum(w * self.batch_pace(batch, n) for n, w in mix.items()) if mix
                else self.batch_pace(batch, tokens))
        return (self.verify_ms(batch * tokens) + self.context_ms(batch, context, tokens)) * pace

    def pace_of(self, spec, batch: float = 1, nodes: float | dict | None = None) -> float:
        """The batch pace ``parts`` scales ``spec``'s target forward by at ``batch`` requests
        (``nodes`` as there): a plain step's at one token, a speculative one's the mix's mean of
        each count's (``forward_ms``)."""
        if not spec.speculative:
            return self.batch_pace(batch, 1)
        mix = verify_mix(spec.num_draft_tokens if nodes is None else nodes)
        return sum(w * self.batch_pace(batch, n) for n, w in mix.items())

    def context_ms(self, batch: float, context: float | None, tokens: float = 1) -> float:
        """What ``batch`` requests of ``context`` committed tokens each (a mean), each bringing
        ``tokens`` new tokens (a plain step: 1), read beyond what the curve's one sequence read
        (``kv``; 0 when either is unknown). Negative where the context is shorter than its."""
        if context is None or not self.kv:
            return 0.0
        verify_at = self.prefix if self.verify_prefix is None else self.verify_prefix
        return self.kv_ms(tokens) * batch * context - self.kv_ms(batch * tokens) * verify_at

    def parts(self, spec, batch: float = 1, tau: float | None = None, nodes: float | dict | None = None, *,
              context: float | None = None) -> StepParts:
        """One step of ``batch`` requests under ``spec`` (a ``SpecConfig``), part by part. ``tau``:
        the tokens each request emits a step, the rows of its draft extend (one when None).
        ``nodes``: the tokens each request's verify holds, root included, where its trees are
        smaller than ``num_draft_tokens`` (a draft that proposes fewer, as the n-gram lookup does
        when few continuations match: a run measures it); None: ``num_draft_tokens``. A mapping
        {tokens: share of the steps} (``verify_mix``) prices the verify as the shares' mean of the
        forward at each count: the curve is not a line (a 4-token verify cost 1.14 decode steps,
        a 2-token one 0.98, in docs/bench/archive/head-cpu-fp32-2026-12-07-1207.md), so the forward at the mean count is
        not the mean forward of a draft that fills its tree on some steps and not on others. At a
        batch over one the requests' trees share each forward, which is priced at the mix's mean
        count, its batch pace the mix's mean of each count's (``forward_ms``: the mix is then of
        the requests' verifies, each request's attention at its own count).
        ``context``: the committed tokens each request holds (a mean), priced in the verify
        (``context_ms``); None: the curves' own."""
        if not spec.speculative:
            return StepParts(self.forward_ms(batch, 1, context), overhead_ms=self.overhead.ms(False, batch))
        extend_rows = batch * max(1.0, tau if tau is not None else 1.0)
        mix = verify_mix(spec.num_draft_tokens if nodes is None else nodes)
        if batch > 1:  # one forward at the mean count, each request's attention at its own count's pace
            verify = self.forward_ms(batch, sum(n * w for n, w in mix.items()), context, mix=mix)
        else:
            verify = sum(share * self.forward_ms(batch, tokens, context) for tokens, share in mix.items())
        return StepParts(verify,
                         draft_extend_ms=self.draft_ms(extend_rows),
                         draft_levels_ms=(spec.num_steps - 1) * self.draft_ms(batch * spec.topk),
                         overhead_ms=self.overhead.ms(True, batch, spec.num_steps))

    def step_ms(self, spec, batch: float = 1, tau: float | None = None, nodes: float | dict | None = None, *,
                context: float | None = None) -> float:
        return self.parts(spec, batch, tau, nodes, context=context).total_ms

    def plain_ms(self, batch: float = 1, context: float | None = None) -> float:
        """One plain decode step of ``batch`` requests, overhead included (``context`` as for ``parts``)."""
        return self.forward_ms(batch, 1, context) + self.overhead.ms(False, batch)

    def predict(self, spec, tau: float | None = None, batch: float = 1, nodes: float | dict | None = None, *,
                context: float | None = None) -> Prediction:
        """What ``spec`` is worth at ``batch`` requests when each emits ``tau`` tokens a step
        (plain decoding: 1, whatever ``tau`` says); ``batch`` may be a mean (fractional);
        ``nodes`` and ``context`` as for ``parts``."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if not spec.speculative:
            tau = 1.0
        elif tau is None or tau < 1:
            raise ValueError(f"a speculative setting's prediction needs τ >= 1 (tokens per step), got {tau}")
        return Prediction(float(tau), batch, self.parts(spec, batch, tau, nodes, context=context),
                          self.plain_ms(batch, context))

    def closed_loop(self, spec, tau: float | None, batch: float, *, prompt_lens, output_lens,
                    nodes: float | dict | None = None, prefill_steps: float | None = None) -> LoopPrediction:
        """A closed loop's tokens/s under ``spec`` at a mean running ``batch`` when each speculative
        step emits ``tau`` tokens a request: request i, of ``prompt_lens[i]`` prompt tokens and
        ``output_lens[i]`` output tokens, takes its prefill step (which emits its first token and
        holds the whole batch up), under a speculative setting the draft's catch-up over its
        prompt, and ``(n - 1) / τ`` decode steps, each ``step(B) / B`` its share (module
        docstring). A request with no output was never prefilled (refused) and costs nothing.
        ``nodes`` as for ``parts``: the tokens a request's verify held, where a run counted them.
        The decode steps are priced at the mean context they read (``parts``'s ``context``): a
        request's steps run from its prompt to its prompt and every token it wrote, p + n/2 on
        average, weighted by its n - 1 decode steps. ``prefill_steps``: the prefill steps the
        requests were admitted in, where a run counted them (a step admits every request that
        arrived since the last, in one forward): each prompt beyond the first of a step saves
        ``prefill_joined``; None: a step each."""
        prompt_lens, output_lens = list(prompt_lens), list(output_lens)
        if len(prompt_lens) != len(output_lens):
            raise ValueError(f"one output length per prompt, got {len(output_lens)} for {len(prompt_lens)} prompts")
        ran = [(p, n) for p, n in zip(prompt_lens, output_lens) if n > 0]
        if prefill_steps is not None and not (min(1, len(ran)) <= prefill_steps <= len(ran)):
            raise ValueError(f"{len(ran)} prefilled requests take 1 to {len(ran)} prefill steps, got {prefill_steps}")
        joined = len(ran) - prefill_steps if prefill_steps is not None else 0
        step = self.predict(spec, tau, batch, nodes, context=decode_context(prompt_lens, output_lens))
        catch_up = sum(self.catch_up_ms(p, step.tau) for p, _ in ran) if spec.speculative else 0.0
        return LoopPrediction(tokens=sum(n for _, n in ran), step=step,
                              decode_ms=sum(n - 1 for _, n in ran) / step.tau * step.parts.total_ms / batch,
                              prefill_ms=sum(self.prefill_ms(p) for p, _ in ran) - joined * self.prefill_joined,
                              catch_up_ms=catch_up, prefill_priced=bool(self.prefill),
                              prefill_saved_ms=joined * self.prefill_joined)

    def as_dict(self) -> dict:
        """JSON-ready, as the cache and the reports keep it."""
        o = self.overhead
        return {"verify": [list(p) for p in self.verify], "draft": [list(p) for p in self.draft],
                "overhead": {"plain_per_step": o.plain_per_step, "plain_per_request": o.plain_per_request,
                             "spec_per_step": o.spec_per_step, "spec_per_request": o.spec_per_request,
                             "spec_levels": o.spec_levels, "level_per_step": o.level_per_step,
                             "level_per_request": o.level_per_request,
                             "points": {kind: [list(p) for p in pts] for kind, pts in o.points}},
                "source": self.source, "measured": self.measured,
                "verify_range": [list(r) for r in self.verify_range], "draft_range": [list(r) for r in self.draft_range],
                "prefill": [list(p) for p in self.prefill], "catch_up": [list(p) for p in self.catch_up],
                "kv": [list(p) for p in self.kv], "prefix": self.prefix, "verify_prefix": self.verify_prefix,
                "batched": [list(p) for p in self.batched], "prefill_joined": self.prefill_joined,
                "batched_tokens": [list(p) for p in self.batched_tokens]}

    @classmethod
    def from_dict(cls, d: dict) -> StepCost:
        """From ``as_dict``'s keys (or a cache entry's); one written before prefill was measured
        has none, and prices it 0."""
        return cls(d["verify"], d.get("draft", ()), source=d.get("source", "given"),
                   overhead=Overhead(**d.get("overhead", {})), measured=d.get("measured", ""),
                   verify_range=d.get("verify_range", ()), draft_range=d.get("draft_range", ()),
                   prefill=d.get("prefill", ()), catch_up=d.get("catch_up", ()), kv=_kv_points(d), batched=d.get("batched", ()),
                   prefill_joined=d.get("prefill_joined", 0.0), batched_tokens=d.get("batched_tokens", ()),
                   prefix=d.get("prefix", 128.0), verify_prefix=d.get("verify_prefix"))

    @classmethod
    def from_rows(cls, verify: list[dict], draft: list[dict] = (), **kw) -> StepCost:
        """From measurement rows (``measure/cost.py``): verify ``{"tokens", "ms"[, "lo", "hi"]}``,
        draft ``{"rows", "ms"[, "lo", "hi"]}``."""
        v = Curve.from_rows(list(verify), "tokens")
        d = Curve.from_rows(list(draft), "rows") if draft else None
        return cls(v.points, d.points if d else (), verify_range=tuple(zip(v.low, v.high)),
                   draft_range=tuple(zip(d.low, d.high)) if d else (), **kw)
