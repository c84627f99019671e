"""``y = x W^T + b`` for the few-row products of decoding and verification, by the implementation
this CPU runs fastest at each row count.

Decode, verify and draft multiply a handful of rows (1 to a few dozen tokens) by a large weight:
the product is bound by reading ``W`` once. How close a CPU BLAS gets to that bound depends on the
CPU and the BLAS build, so four exact implementations are kept and the fastest is chosen per row
count by measurement (``workbench.cpu_choices``; ``python -m experiments.linear_order`` prints the
timings):

- ``plain``: ``F.linear(x, W, b)``, the default wherever nothing was measured;
- ``weight-left``: ``(W @ x^T)^T``, the large matrix on the left, which some BLAS builds stream at
  the memory bound where ``F.linear`` does not;
- ``mkl-packed``: MKL's packed-weight GEMM through the **private** ops
  ``torch.ops.mkl._mkl_reorder_linear_weight`` / ``_mkl_linear`` (``mkl_packed_available``). The
  weight is repacked per row count, several times its own bytes each (docs/benchmarks.md,
  "Measurements behind code choices"), so a verdict packs at most ``MAX_PACKED_SIZES`` row counts
  and says the bytes it added (``LinearOrder.describe``);
- ``onednn-packed``: oneDNN's product on a blocked copy of the weight (the **private** ops
  ``torch.ops.mkldnn._reorder_linear_weight`` / ``_linear_pointwise`` that torch's compiler uses
  for a frozen CPU linear; ``onednn_packed_available``): one copy, as many bytes as the weight,
  serves every row count (docs/benchmarks.md, "The few-row linear order, measured per CPU").

Projections that read the same input (q, k, v; gate, up) run as **one** oneDNN product where
oneDNN is chosen: ``apply_linear_order`` lays out one blocked copy of their stacked weights
(``FusedPack``) and ``project`` splits the result, bit for bit each member's own product (a test
checks), in fewer calls and one stream of weights (docs/benchmarks.md, "Fused projections").

The choice is made for ``ROW_BUCKETS`` = 1, 2, 4, 8, 16, 32 rows; a count in between follows the
next larger (3 rows as 4), whose packed weight it uses by padding with zero rows; more than 32
rows (a prefill), a GPU, another dtype, or a product autograd must differentiate through a packed
weight run ``F.linear``.

The dtypes (``DTYPE_PATHS``): **fp32** runs all four, which differ by the order of the sum only
(~1e-6 relative). **bf16** runs ``F.linear`` and ``onednn-packed`` only: the CPU's bf16
``F.linear`` is itself a oneDNN product and the blocked copy gives the same bits with the weight
read in half the bytes; ``weight-left`` would round twice (before the bias), and MKL's packed GEMM
is fp32 only. ``within_rounding`` is the check an implementation must pass on the model's own
weights before the measurement may pick it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workbench.device import dtype_name

PLAIN, WEIGHT_LEFT, PACKED, ONEDNN = "plain", "weight-left", "mkl-packed", "onednn-packed"
PATHS = (PLAIN, WEIGHT_LEFT, PACKED, ONEDNN)  # every implementation; PATH_NAMES says each in the user's line
PATH_NAMES = {PLAIN: "F.linear", WEIGHT_LEFT: "(W @ x^T)^T", PACKED: "MKL packed GEMM", ONEDNN: "oneDNN packed GEMM"}
ONEDNN_PACK_ROWS = 8  # the row count oneDNN lays its copy out for; it runs any row count
ROW_BUCKETS = (1, 2, 4, 8, 16, 32)  # row counts measured and decided; counts in between follow the next larger
FORCED_ROWS = (2, 4, 8, 16)  # the buckets a forced implementation covers (the range weight-left always had)
WIN_MARGIN = 0.95  # another implementation must take under 95 % of F.linear's time to be chosen
MAX_PACKED_SIZES = 2  # row counts a measured verdict may pack weights for (memory: see the docstring)
ROUNDING_TOL = 1e-5  # |y - F.linear| <= ROUNDING_TOL * (|x| @ |W|^T): reordered fp32 sums, nothing coarser
BF16_ROUNDING = 2.0**-8  # half a bf16 unit in the last place, relative: one rounding of a bf16 result
DTYPE_PATHS = {torch.float32: PATHS, torch.bfloat16: (PLAIN, ONEDNN)}  # what each dtype may run (docstring)


@dataclass(frozen=True)
class LinearOrder:
    """Which implementation each few-row CPU product of ``dtype`` (fp32 or bf16) runs.

    ``paths``: one of ``DTYPE_PATHS[dtype]`` per row count of ``ROW_BUCKETS``, or () for ``F.linear``
    everywhere. ``reason``: how that was decided. ``packed_mb``: the memory the packed weights
    add (0 without ``mkl-packed`` or ``onednn-packed``). ``reason`` and ``packed_mb`` are filled by
    ``workbench.cpu_choices``, for the one line a user sees.
    """

    paths: tuple[str, ...] = ()
    reason: str = "default"
    packed_mb: float = 0.0
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        if self.paths and len(self.paths) != len(ROW_BUCKETS):
            raise ValueError(f"paths must name one implementation per row count {ROW_BUCKETS}, got {self.paths}")
        if self.dtype not in DTYPE_PATHS:
            raise ValueError(f"a linear order is for fp32 or bf16, not {self.dtype}")
        allowed = DTYPE_PATHS[self.dtype]
        if unknown := [p for p in self.paths if p not in allowed]:
            raise ValueError(f"unknown linear implementation {unknown[0]!r} for {dtype_name(self.dtype)}: "
                             f"one of {', '.join(allowed)}")

    @classmethod
    def forced(cls, path: str, reason: str, packed_mb: float = 0.0,
               dtype: torch.dtype = torch.float32) -> "LinearOrder":
        """``path`` for the ``FORCED_ROWS`` buckets (2-16 rows), ``F.linear`` elsewhere."""
        return cls(tuple(path if b in FORCED_ROWS else PLAIN for b in ROW_BUCKETS), reason, packed_mb, dtype)

    def bucket(self, rows: int) -> int | None:
        """The ``ROW_BUCKETS`` entry that ``rows`` follows (the next larger), None past the last."""
        return next((b for b in ROW_BUCKETS if rows <= b), None)

    def path(self, rows: int) -> str:
        b = self.bucket(rows)
        return PLAIN if b is None or not self.paths else self.paths[ROW_BUCKETS.index(b)]

    @property
    def packed_rows(self) -> tuple[int, ...]:
        """The row counts whose weights are packed for ``mkl-packed``."""
        return tuple(b for b, p in zip(ROW_BUCKETS, self.paths) if p == PACKED)

    @property
    def plain_everywhere(self) -> bool:
        """Whether every product runs ``F.linear`` (no choice made, or the measurement kept it)."""
        return all(p == PLAIN for p in self.paths)

    @property
    def uses_onednn(self) -> bool:
        """Whether some row count runs ``onednn-packed`` (one copy of each weight serves them all)."""
        return ONEDNN in self.paths

    def describe(self) -> str:
        dtype = "" if self.dtype == torch.float32 else f"{dtype_name(self.dtype)} "
        if self.plain_everywhere:
            return f"few-row {dtype}linear: F.linear ({self.reason})"
        groups, lo = [], 1
        for i, (b, p) in enumerate(zip(ROW_BUCKETS, self.paths)):
            if i + 1 == len(ROW_BUCKETS) or self.paths[i + 1] != p:
                groups.append(f"{lo if lo == b else f'{lo}-{b}'} rows {PATH_NAMES[p]}")
                lo = b + 1
        memory = f"; packed weights +{self.packed_mb:.0f} MB" if self.packed_mb else ""
        return f"few-row {dtype}linear: {', '.join(groups)}, more F.linear ({self.reason}{memory})"


def _private_ops_available(namespace, names: tuple[str, ...], backend) -> bool:
    """Whether ``backend`` is built in and ``namespace`` (a ``torch.ops`` library) has ``names``."""
    try:
        for name in names:
            getattr(namespace, name)  # a missing op raises on lookup
    except (AttributeError, RuntimeError):
        return False
    return backend.is_available()


def mkl_packed_available() -> bool:
    """Whether this torch build has MKL and its private packed-GEMM ops."""
    return _private_ops_available(torch.ops.mkl, ("_mkl_reorder_linear_weight", "_mkl_linear"), torch.backends.mkl)


def onednn_packed_available() -> bool:
    """Whether this torch build has oneDNN and its private packed-linear ops."""
    return _private_ops_available(torch.ops.mkldnn, ("_reorder_linear_weight", "_linear_pointwise"),
                                  torch.backends.mkldnn)


def onednn_bf16_available() -> bool:
    """Whether oneDNN runs bf16 products natively on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT);
    on an AVX2-only CPU its packed bf16 reorder refuses, and bf16 runs through ``F.linear``."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def available_paths(dtype: torch.dtype = torch.float32) -> tuple[str, ...]:
    """The implementations this torch build and this CPU have that ``dtype`` may run (``DTYPE_PATHS``)."""
    return tuple(p for p in DTYPE_PATHS.get(dtype, (PLAIN,))
                 if (p != PACKED or mkl_packed_available())
                 and (p != ONEDNN or (onednn_packed_available() and (dtype != torch.bfloat16 or onednn_bf16_available()))))


def weight_left_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``(W @ x^T)^T``. One row is padded with a zero row: ``W @ x^T`` of one column is a
    matrix-vector product, which BLAS runs on another path (gemv) than a matrix product; the
    padding keeps the matrix product, and its row is sliced off."""
    m = x.shape[0]
    if m == 1:
        x = torch.cat([x, x.new_zeros(1, x.shape[1])])
    out = torch.matmul(weight, x.t()).t()[:m].contiguous()  # [N, M] -> [M, N]
    return out if bias is None else out + bias


def pack_weight(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """MKL's packed copy of ``weight`` [N, K] for products of ``rows`` rows (private op)."""
    return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, *, weight: torch.Tensor, bias: torch.Tensor | None,
                  rows: int) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through the weight packed for ``rows`` rows; x [M <= rows, K]."""
    m = x.shape[0]
    if m < rows:  # pad to the packed row count: zero rows, results sliced off
        x = torch.cat([x, x.new_zeros(rows - m, x.shape[1])])
    out = torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)  # [rows, N]
    return out if m == rows else out[:m]


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's blocked copy of ``weight`` [N, K] (private op); it runs products of any row count."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ONEDNN_PACK_ROWS)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN's blocked copy of the weight; x [M, K]."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def takes_choice(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype = torch.float32) -> bool:
    """Whether a product is one the choice covers: 2-D on the CPU in ``dtype`` (the order's), at
    most ROW_BUCKETS[-1] rows."""
    return (x.device.type == "cpu" and x.dtype == dtype and weight.dtype == dtype
            and x.dim() == 2 and x.shape[0] <= ROW_BUCKETS[-1])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           order: LinearOrder = LinearOrder(), packed: dict | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` by the implementation ``order`` names for x's row count.

    ``packed``: {row count (MKL) or ``ONEDNN``: (packed weight, weight version)} from
    ``Linear.pack``; a packed path without a fresh entry (never packed, or the weight changed
    since) runs ``F.linear``, and so does a product that autograd must differentiate.
    """
    if not takes_choice(x, weight, order.dtype):
        return F.linear(x, weight, bias)
    path = order.path(x.shape[0])
    if path == WEIGHT_LEFT:
        return weight_left_linear(x, weight, bias)
    if path in (PACKED, ONEDNN) and packed:
        rows = order.bucket(x.shape[0])
        entry = packed.get(rows if path == PACKED else ONEDNN)
        grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        if entry is not None and entry[1] == _stamp(weight) and not grad:
            return (packed_linear(x, entry[0], weight=weight, bias=bias, rows=rows) if path == PACKED
                    else onednn_linear(x, entry[0], bias))
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and names) whose forward is ``linear`` above."""

    order: LinearOrder = LinearOrder()  # set per model by apply_linear_order
    packed: dict | None = None  # {row count or ONEDNN: (packed weight, _stamp of the weight packed)}, by pack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, order=self.order, packed=self.packed)

    def pack(self, rows: tuple[int, ...], onednn: bool = False) -> int:
        """Keep MKL packed copies of the weight for these row counts (fp32), and oneDNN's one copy
        when ``onednn`` (fp32 or bf16; not parameters, not saved); returns the bytes they hold.
        Nothing is packed off the CPU, in another dtype, nor by a library this torch lacks."""
        w = self.weight
        keep = {}
        if w.device.type == "cpu" and w.dtype in DTYPE_PATHS:
            old = self.packed or {}
            stamp = _stamp(w)
            mkl = w.dtype == torch.float32 and mkl_packed_available()
            wanted = [(r, lambda r=r: pack_weight(w, r)) for r in rows if mkl]
            wanted += [(ONEDNN, lambda: onednn_pack(w))] if onednn and onednn_packed_available() else []
            keep = {k: old[k] if k in old and old[k][1] == stamp else (make(), stamp) for k, make in wanted}
        self.packed = keep
        return sum(p.numel() * p.element_size() for p, _ in keep.values())


@dataclass
class FusedPack:
    """oneDNN's blocked copy of several weights stacked [sum N_i, K], their biases stacked (None
    when none has one), each member's output width, and the members' weight and bias stamps when
    packed (a change to either makes the pack stale)."""

    packed: torch.Tensor
    bias: torch.Tensor | None
    sizes: tuple[int, ...]
    stamps: tuple[tuple, ...]

    @classmethod
    def of(cls, members: tuple["Linear", ...]) -> "FusedPack":
        weights = [m.weight.detach() for m in members]
        biases = [m.bias.detach() if m.bias is not None else weights[i].new_zeros(weights[i].shape[0])
                  for i, m in enumerate(members)]
        bias = torch.cat(biases) if any(m.bias is not None for m in members) else None
        return cls(onednn_pack(torch.cat(weights)), bias, tuple(w.shape[0] for w in weights), _member_stamps(members))

    def fresh(self, members: tuple["Linear", ...]) -> bool:
        return self.stamps == _member_stamps(members)

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()


def project(x: torch.Tensor, members: tuple["Linear", ...], fused: FusedPack | None) -> tuple[torch.Tensor, ...]:
    """``tuple(m(x) for m in members)``: as one oneDNN product through ``fused`` where the members'
    order runs oneDNN at x's row count and the pack is fresh, else member by member."""
    first = members[0]
    if (fused is not None and takes_choice(x, first.weight, first.order.dtype)
            and first.order.path(x.shape[0]) == ONEDNN and fused.fresh(members)
            and not (torch.is_grad_enabled() and (x.requires_grad or any(m.weight.requires_grad for m in members)))):
        return onednn_linear(x, fused.packed, fused.bias).split(fused.sizes, dim=-1)
    return tuple(m(x) for m in members)


def _member_stamps(members: tuple["Linear", ...]) -> tuple:
    """The stamps of the members' weights and biases: a fused pack holds a copy of both."""
    return tuple((_stamp(m.weight), None if m.bias is None else _stamp(m.bias)) for m in members)


def _stamp(weight: torch.Tensor) -> tuple:
    """What a packed copy must still match: the same storage, shape and in-place version (an
    optimizer step or ``.to()`` changes one, and the stale copy is no longer used)."""
    return weight.data_ptr(), tuple(weight.shape), weight._version


def apply_linear_order(module: nn.Module, order: LinearOrder, fuse: bool = True) -> int:
    """Every ``Linear`` in ``module`` follows ``order``, its weight packed for ``order.packed_rows``
    (a weight already packed for them is kept). Where the order runs oneDNN, the projection groups
    of every submodule that names them (``projection_groups``: {attribute: member names}) get one
    ``FusedPack`` each, set as that attribute, instead of their members' own oneDNN copies
    (``fuse=False``: no fused packs, every member its own copy). Returns the bytes the packed
    weights hold."""
    fusing = fuse and order.uses_onednn and onednn_packed_available()
    groups = []  # (owner, attribute, members)
    for owner in module.modules():
        for attr, names in getattr(owner, "projection_groups", {}).items():
            members = tuple(getattr(owner, n) for n in names)
            w = members[0].weight
            ok = fusing and w.device.type == "cpu" and w.dtype == order.dtype
            groups.append((owner, attr, members if ok else ()))
    grouped = {id(m) for *_, members in groups for m in members}
    total = 0
    for m in module.modules():
        if isinstance(m, Linear):
            m.order = order
            total += m.pack(order.packed_rows, order.uses_onednn and id(m) not in grouped)
    for owner, attr, members in groups:
        old = getattr(owner, attr, None)
        pack = (old if isinstance(old, FusedPack) and old.fresh(members) else FusedPack.of(members)) if members else None
        setattr(owner, attr, pack)
        total += pack.nbytes if pack is not None else 0
    return total


@contextlib.contextmanager
def plain_products(*modules: nn.Module | None):
    """Every ``Linear`` of ``modules`` (None skipped) runs ``F.linear`` inside the block, and
    follows its own order again after it; nothing is repacked, so the measured order and
    ``F.linear`` can take turns in one process (``python -m experiments.beside_plain``, the notebooks)."""
    if not modules:
        raise TypeError("plain_products() needs the modules whose products it switches")
    linears = list({id(m): m for module in modules if module is not None
                    for m in module.modules() if isinstance(m, Linear)}.values())
    saved = [m.order for m in linears]
    for m in linears:
        m.order = LinearOrder(dtype=m.order.dtype, reason="F.linear beside the measured order")
    try:
        yield
    finally:
        for m, order in zip(linears, saved):
            m.order = order


def within_rounding(y: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``y`` equals ``ref = F.linear(x, weight)`` up to a reordered fp32 sum: every entry
    within ``ROUNDING_TOL`` times the sum of the magnitudes it adds up (|x| @ |W|^T), and in
    bf16 one rounding of the result more (``BF16_ROUNDING`` of its magnitude, each side)."""
    rounded = x.dtype == torch.bfloat16  # each result rounded once to bf16
    y, ref = y.float(), ref.float()
    tol = ROUNDING_TOL * (x.float().abs() @ weight.float().abs().t()) + 1e-30
    if rounded:
        tol = tol + BF16_ROUNDING * (y.abs() + ref.abs())
    return bool(((y - ref).abs() <= tol).all())


def run_path(path: str, x: torch.Tensor, *, weight: torch.Tensor, packed: torch.Tensor | None,
             rows: int) -> torch.Tensor:
    """One product by ``path``, bias-free, as timed and checked (packed: the weight packed for rows)."""
    if path == WEIGHT_LEFT:
        return weight_left_linear(x, weight)
    if path == PACKED:
        return packed_linear(x, packed, weight=weight, bias=None, rows=rows)
    if path == ONEDNN:
        return onednn_linear(x, packed, None)
    return F.linear(x, weight)


def _pack_for(path: str, weight: torch.Tensor, rows: int) -> torch.Tensor | None:
    return pack_weight(weight, rows) if path == PACKED else onednn_pack(weight) if path == ONEDNN else None


def check_paths(weights: list[torch.Tensor], paths: tuple[str, ...], rows: tuple[int, ...] = ROW_BUCKETS,
                seed: int = 0) -> dict[str, bool]:
    """Per path, whether it matches ``F.linear`` within rounding (``within_rounding``) on every weight and row
    count, on random inputs (one weight packed at a time, so the check adds little memory)."""
    gen = torch.Generator().manual_seed(seed)
    ok = {}
    with torch.inference_mode():
        for path in paths:
            ok[path] = all(
                within_rounding(run_path(path, x, weight=w, packed=_pack_for(path, w, m), rows=m),
                                     F.linear(x, w), x, w)
                for m in rows for w in weights
                for x in [torch.randn(m, w.shape[1], generator=gen, dtype=w.dtype)])
    return ok


def time_paths(weights: list[torch.Tensor], paths: tuple[str, ...], rows: tuple[int, ...] = ROW_BUCKETS,
               repeats: int = 5) -> list[dict]:
    """Best-of-``repeats`` ms to apply every weight in ``weights`` (as one forward does, each read
    from memory in turn) to ``m`` rows by each path, for each m: [{"rows": m, "ms": {path: ms}}].
    The paths take turns within each repeat, so a brief disturbance costs each alike. Packed
    weights exist for one row count at a time (packing is not timed). The fastest repeat, not the
    median: another process on the cores only ever adds time."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for m in rows:
        xs = {w.shape[1]: torch.randn(m, w.shape[1], generator=gen, dtype=w.dtype) for w in weights}
        with torch.inference_mode():
            packs = {path: [_pack_for(path, w, m) for w in weights] for path in paths}
            runs = {path: (lambda path=path: [run_path(path, xs[w.shape[1]], weight=w, packed=p, rows=m)
                                              for w, p in zip(weights, packs[path])]) for path in paths}
            ms = _best_ms_interleaved(runs, repeats)
            del packs
        out.append({"rows": m, "ms": ms})
    return out


def decide(timings: list[dict], max_packed: int = MAX_PACKED_SIZES) -> tuple[str, ...]:
    """One path per ``ROW_BUCKETS`` entry from ``time_paths``: the fastest, if it takes under
    ``WIN_MARGIN`` of ``F.linear``'s time, else ``plain`` (also for a count not measured). MKL's
    packed path, a copy per row count, is kept only at the ``max_packed`` counts where it saves
    the most time over the best of the others; elsewhere that one (oneDNN's packed path keeps one
    copy for every count, so it is not limited). () when every count keeps ``F.linear``."""
    by_rows = {t["rows"]: t["ms"] for t in timings if t["rows"] in ROW_BUCKETS}

    def best(ms: dict, allowed) -> str:
        path = min((p for p in ms if p in allowed), key=ms.get)
        return path if ms[path] < WIN_MARGIN * ms[PLAIN] else PLAIN

    unpacked = {r: best(ms, (PLAIN, WEIGHT_LEFT, ONEDNN)) for r, ms in by_rows.items()}  # no per-count copies
    chosen = {r: best(ms, PATHS) for r, ms in by_rows.items()}
    packed = sorted((r for r in chosen if chosen[r] == PACKED),
                    key=lambda r: by_rows[r][unpacked[r]] - by_rows[r][PACKED], reverse=True)
    for r in packed[max_packed:]:
        chosen[r] = unpacked[r]
    paths = tuple(chosen.get(b, PLAIN) for b in ROW_BUCKETS)
    return () if all(p == PLAIN for p in paths) else paths


def _best_ms_interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """{name: best ms of ``repeats`` calls of runs[name]}, the calls taking turns."""
    for fn in runs.values():
        fn()  # warm-up: first-touch of the inputs, BLAS thread start
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
    return best
