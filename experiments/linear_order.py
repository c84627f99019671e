"""Few-row linear layers on this CPU: ``F.linear(x, W)``, ``(W @ x^T)^T``, MKL's and oneDNN's
packed GEMMs, and the choice.

    python -m experiments.linear_order [--rows 1,2,4,8,16,32,64,128] [--threads 2] [--dtype fp32|bf16]

For SmolLM2's shapes (a layer's seven projections, and the 49152 x 576 lm_head), fp32 or bf16
(the implementations that dtype may run: ``DTYPE_PATHS``), the
fastest of the repeats (``models.linear.time_paths``), each weight a separate tensor so it is
read from memory as in a real forward. The rows are the tokens of one forward: 1 for a decode
step, the tree size for a verify. The last line is the choice ``--linear-order auto`` makes from
these timings (``workbench.models.linear.decide``; the engine makes that choice itself, once per
CPU, in ``workbench.cpu_choices``: this prints the timings behind it). A packed path is timed
only where this torch has its library's ops (``available_paths``).
"""

from __future__ import annotations

import argparse

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive
from workbench.models.linear import PATH_NAMES, ROW_BUCKETS, LinearOrder, available_paths, decide, time_paths


def positive_list(text: str) -> list[int]:
    """An argparse ``type`` for a comma list of integers > 0 (``--rows 1,2,4``)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# (out, in) of a SmolLM2-135M layer's projections (q, k, v, o, gate, up, down) and its lm_head
LAYER_SHAPES = ((576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536))
LM_HEAD = (49152, 576)


def measure(rows: list[int], layers: int = 30, repeats: int = 7, seed: int = 0,
            dtype: torch.dtype = torch.float32) -> list[dict]:
    """ms of ``layers`` layers' projections and of the lm_head by each implementation available
    in ``dtype``, for each row count: [{"rows": m, "layers": {path: ms}, "lm_head": {path: ms}}]."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(shape, generator=gen).to(dtype) for _ in range(layers) for shape in LAYER_SHAPES]
    head = torch.randn(LM_HEAD, generator=gen).to(dtype)
    paths = available_paths(dtype)
    body, top = time_paths(weights, paths, tuple(rows), repeats), time_paths([head], paths, tuple(rows), repeats)
    return [{"rows": b["rows"], "layers": b["ms"], "lm_head": h["ms"]} for b, h in zip(body, top)]


def choice(results: list[dict], dtype: torch.dtype = torch.float32) -> LinearOrder:
    """The choice ``auto`` takes from these timings: the whole forward (layers + lm_head) decides."""
    totals = [{"rows": r["rows"], "ms": {p: r["layers"][p] + r["lm_head"][p] for p in r["layers"]}}
              for r in results if r["rows"] in ROW_BUCKETS]
    return LinearOrder(decide(totals), "measured here just now", dtype=dtype)


def table(results: list[dict]) -> str:
    paths = list(results[0]["layers"]) if results else []
    head = [f"30 layers: {PATH_NAMES[p]}" for p in paths] + [f"lm_head: {PATH_NAMES[p]}" for p in paths]
    lines = ["| rows | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for r in results:
        cells = [f"{r['layers'][p]:.1f} ms" for p in paths] + [f"{r['lm_head'][p]:.1f} ms" for p in paths]
        lines.append(f"| {r['rows']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m experiments.linear_order", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=positive_list, default="1,2,4,8,16,32,64,128",
                   help="comma list of row counts (tokens of one forward)")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--repeats", type=positive("--repeats"), default=7, help="timed repeats per cell, the fastest kept")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="fp32", help="dtype of the weights and inputs")
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.cpu_choices import cpu_signature

    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    results = measure(args.rows, repeats=args.repeats, dtype=dtype)
    print(f"{cpu_signature()}, torch {torch.__version__}, {args.threads} threads, {args.dtype}\n")
    print(table(results))
    print(f"\nchoice: {choice(results, dtype).describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
