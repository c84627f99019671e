"""Few-row linear layers on this CPU: ``F.linear(x, W)`` against ``(W @ x^T)^T``, and the choice.

    python -m experiments.linear_order [--rows 1,2,4,8,16,32,64,128] [--threads 2]

For SmolLM2's shapes (a layer's seven projections, and the 49152 x 576 lm_head), fp32, the
fastest of the repeats (``models.linear.time_orders``), each weight a separate tensor so it is
read from memory as in a real forward. The rows are the tokens of one forward: 1 for a decode
step, the tree size for a verify. The last line is the order ``--linear-order auto`` picks from
these timings (``workbench.models.linear``; the engine makes that choice itself, once per CPU,
in ``workbench.cpu_choices``: this prints the timings behind it).
"""

from __future__ import annotations

import torch

from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive, positive_list
from workbench.models.linear import LinearOrder, decide, time_orders

# (out, in) of a SmolLM2-135M layer's projections (q, k, v, o, gate, up, down) and its lm_head
LAYER_SHAPES = ((576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536))
LM_HEAD = (49152, 576)


def measure(rows: list[int], layers: int = 30, repeats: int = 7, seed: int = 0) -> list[dict]:
    """ms of ``layers`` layers' projections and of the lm_head, both orders, for each row count."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(shape, generator=gen) for _ in range(layers) for shape in LAYER_SHAPES]
    head = torch.randn(LM_HEAD, generator=gen)
    body, top = time_orders(weights, tuple(rows), repeats), time_orders([head], tuple(rows), repeats)
    return [{"rows": b["rows"], "layers_linear_ms": b["linear_ms"], "layers_weight_left_ms": b["weight_left_ms"],
             "lm_head_linear_ms": h["linear_ms"], "lm_head_weight_left_ms": h["weight_left_ms"]}
            for b, h in zip(body, top)]


def choice(results: list[dict]) -> LinearOrder:
    """The order ``auto`` takes from these timings: the whole forward (layers + lm_head) decides."""
    totals = [{"rows": r["rows"], "linear_ms": r["layers_linear_ms"] + r["lm_head_linear_ms"],
               "weight_left_ms": r["layers_weight_left_ms"] + r["lm_head_weight_left_ms"]}
              for r in results if r["rows"] >= 2]
    return LinearOrder(decide(totals), "measured here just now")


def table(results: list[dict]) -> str:
    lines = ["| rows | 30 layers: F.linear | 30 layers: (W @ x^T)^T | lm_head: F.linear | lm_head: (W @ x^T)^T |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['rows']} | {r['layers_linear_ms']:.1f} ms | {r['layers_weight_left_ms']:.1f} ms | "
                     f"{r['lm_head_linear_ms']:.1f} ms | {r['lm_head_weight_left_ms']:.1f} ms |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m experiments.linear_order", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=positive_list, default="1,2,4,8,16,32,64,128",
                   help="comma list of row counts (tokens of one forward)")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--repeats", type=positive("--repeats"), default=7, help="timed repeats per cell, the fastest kept")
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    from workbench.cpu_choices import cpu_model

    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    results = measure(args.rows, repeats=args.repeats)
    print(f"{cpu_model()}, torch {torch.__version__}, {args.threads} threads, fp32\n")
    print(table(results))
    print(f"\nchoice: {choice(results).describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
