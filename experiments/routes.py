"""Which draft suits which task: a bench run's per-task τ and speedup of every draft route, as
the small file the app shows beside τ.

    python -m experiments.routes bench_out/routes/results.json --record docs/bench/draft-sources.md \
        --out bench_out/draft-sources.json

reads the ``results.json`` of ``python -m workbench bench --methods ...`` (methods with
``@ngram`` / ``@exit:N``; a speculative method without ``@`` drafts with the head) and keeps,
per speculative method, its draft source, tree (``D/S/K``) and per-task τ and speedup over
vanilla, with the run's command, date, commit, CPU and dtype, and the record it quotes
(``--record``: the run's report as docs/bench/README.md lists it; by default the results file).
The app and notebook 10 read the shipped copy, ``workbench/assets/draft-sources.json``, through
``workbench.app.draft_bench``, and name that record and date wherever they show a figure of it.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import ArgumentParser, UserError, reports_user_errors
from workbench.measure import provenance


def route_table(result: dict, record: str) -> dict:
    """``{"meta": {...}, "routes": {label: {"draft", "tree", "per_task": {task: {"tau", "speedup"}}}}}``
    from a bench result (``label``: ``"<draft> <D/S/K>"``, e.g. ``"ngram:1-12 4/3/2"``); ``record``
    names the report the figures are quoted from."""
    from workbench.measure.methods import parse_methods
    from workbench.bench.tune import tree_name

    meta = result["meta"]
    routes = {}
    for name, summary in result["summary"].items():
        (method,) = parse_methods(name, best=None) or (None,)
        if method is None or not method.speculative:
            continue
        spec = method.spec
        label = f"{spec.draft.name} {tree_name(spec)}"
        routes[label] = {"draft": spec.draft.name, "tree": tree_name(spec), "method": name,
                         "per_task": {task: {"tau": row.get("tau"), "speedup": row.get("speedup_vs_vanilla")}
                                      for task, row in summary.get("per_task", {}).items()}}
    if not routes:
        raise ValueError("the bench result holds no speculative method to tell routes apart")
    return {"meta": {"record": record, "command": meta["command"], "date": meta["date"],
                     "commit": meta.get("commit"), "cpu": meta["machine"]["cpu"],
                     "dtype": meta["dtype"], "max_new_tokens": meta["max_new_tokens"],
                     "questions": meta["questions"]},
            "routes": routes}


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m experiments.routes", description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="results.json of a python -m workbench bench run")
    p.add_argument("--out", type=Path, required=True, help="where to write the route table (JSON)")
    p.add_argument("--record", help="the report the table quotes, as docs/bench/README.md lists it "
                                    "(default: RESULTS itself)")
    args = p.parse_args(argv)
    record = args.record or provenance.shown(str(args.results.resolve()))
    try:
        table = route_table(json.loads(args.results.read_text(encoding="utf-8")), record)
    except OSError as err:
        raise UserError(f"{args.results}: {err.strerror}") from None
    except (ValueError, KeyError) as err:
        raise UserError(f"{args.results}: not a bench result ({err})") from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(table['routes'])} routes", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
