"""Few-row linear layers on this CPU: ``F.linear(x, W)`` against ``(W @ x^T)^T``.

    python -m workbench.bench linear [--rows 1,2,4,8,16,32,64,128] [--threads 2]

For SmolLM2's shapes (a layer's seven projections, and the 49152 x 576 lm_head), fp32, median ms
over repeats, each weight a separate tensor so it is read from memory as in a real forward. The
rows are the tokens of one forward: 1 for a decode step, the tree size for a verify.
``workbench.models.linear`` uses the second order for the rows where it measured faster here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.bench.cost import _time
from workbench.errors import ArgumentParser, reports_user_errors
from workbench.flags import positive, positive_list

# (out, in) of a SmolLM2-135M layer's projections (q, k, v, o, gate, up, down) and its lm_head
LAYER_SHAPES = ((576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536))
LM_HEAD = (49152, 576)


def measure(rows: list[int], layers: int = 30, repeats: int = 7, seed: int = 0) -> list[dict]:
    """ms of ``layers`` layers' projections and of the lm_head, both orders, for each row count."""
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(shape, generator=gen) for _ in range(layers) for shape in LAYER_SHAPES]
    head = torch.randn(LM_HEAD, generator=gen)
    out = []
    for m in rows:
        xs = {w.shape[1]: torch.randn(m, w.shape[1], generator=gen) for w in weights}
        x_head = torch.randn(m, LM_HEAD[1], generator=gen)
        out.append({
            "rows": m,
            "layers_linear_ms": _time(lambda: [F.linear(xs[w.shape[1]], w) for w in weights], repeats, 1),
            "layers_weight_left_ms": _time(
                lambda: [(w @ xs[w.shape[1]].t()).t().contiguous() for w in weights], repeats, 1),
            "lm_head_linear_ms": _time(lambda: F.linear(x_head, head), repeats, 1),
            "lm_head_weight_left_ms": _time(lambda: (head @ x_head.t()).t().contiguous(), repeats, 1),
        })
    return out


def table(results: list[dict]) -> str:
    lines = ["| rows | 30 layers: F.linear | 30 layers: (W @ x^T)^T | lm_head: F.linear | lm_head: (W @ x^T)^T |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['rows']} | {r['layers_linear_ms']:.1f} ms | {r['layers_weight_left_ms']:.1f} ms | "
                     f"{r['lm_head_linear_ms']:.1f} ms | {r['lm_head_weight_left_ms']:.1f} ms |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m workbench.bench linear", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=positive_list, default="1,2,4,8,16,32,64,128",
                   help="comma list of row counts (tokens of one forward)")
    p.add_argument("--threads", type=positive("--threads"), default=2, help="torch CPU threads")
    p.add_argument("--repeats", type=positive("--repeats"), default=7, help="timed runs per case (the median is shown)")
    return p


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    print(table(measure(args.rows, repeats=args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
