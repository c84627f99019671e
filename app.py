"""The web app: ``python app.py`` serves the EAGLE-2 Workbench on http://127.0.0.1:7860.

The target, its tokenizer and the draft head are loaded once, before the server starts (progress
on stderr); every browser session then gets its own Engine and KV cache. Options::

    --host 127.0.0.1 --port 7860   where to listen (default: $GRADIO_SERVER_NAME / $GRADIO_SERVER_PORT,
                                   Gradio's own variables, else 127.0.0.1:7860; the flags win)
    --dtype auto                   auto (default: bf16 where the CPU computes it natively, else fp32), bf16 or fp32
    --target DIR                   a local HF directory (default: SmolLM2-135M-Instruct, fetched once)
    --draft SOURCE                 where drafts come from: a head directory, random[:SEED], ngram[:MIN-MAX],
                                   exit:N or model:DIR (default: the shipped head, else random); the
                                   page starts with that draft source
"""

from __future__ import annotations

import argparse
import os
import sys

from workbench.errors import ArgumentParser, UserError, as_user_error, reports_user_errors

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home from a local tool


def _port(text: str) -> int:
    """``--port`` checked before anything loads."""
    from workbench.app.address import check_port

    try:
        return check_port(int(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err) if text.strip().lstrip("-").isdigit() else
                                         f"a port is a number, got {text!r}") from None


def _draft(text: str) -> str:
    """``--draft`` checked as the command line checks it (imported only when given: it loads torch)."""
    from workbench.flags import draft_source

    return draft_source(text)


def build_parser() -> ArgumentParser:
    """The command line (see the module docstring)."""
    p = ArgumentParser(prog="python app.py", description="EAGLE-2 Workbench web app")
    p.add_argument("--host", help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1)")
    p.add_argument("--port", type=_port, help="port, 1..65535 (default: $GRADIO_SERVER_PORT, else 7860)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"],
                   help="auto: bf16 where the CPU computes it natively, else fp32")
    p.add_argument("--target", help="local HF model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", type=_draft, help="where drafts come from: a head directory, random[:SEED], "
                   "ngram[:MIN-MAX], exit:N or model:DIR (default: the shipped head)")
    p.add_argument("--linear-order", default="auto", choices=["auto", "plain", "weight-left", "mkl-packed", "onednn-packed"],
                   help="few-row fp32 or bf16 CPU linear order: auto (default: measured on this CPU once, per "
                        "dtype) or forced")
    return p


@reports_user_errors
def main(argv=None) -> int:
    """Load once, then serve until interrupted."""
    args = build_parser().parse_args(argv)
    from workbench.app.address import server_address

    with as_user_error():  # a bad port or path is said at once, before gradio and torch load
        host, port = server_address(args.host, args.port)
    if args.target is not None:
        from workbench.store import resolve_target

        resolve_target(args.target)
    from workbench.app.load import load_workbench
    from workbench.app.ui import build_app, launch

    try:
        wb, info = load_workbench(args.target, args.draft, args.dtype, linear_order=args.linear_order)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from None
    print(f"[app] serving on http://{host}:{port}", file=sys.stderr, flush=True)
    launch(build_app(wb, info), host, port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
