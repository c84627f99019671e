"""The web app: ``python app.py`` serves the EAGLE-2 Workbench on http://127.0.0.1:7860.

The target, its tokenizer and the draft head are loaded once, before the server starts (progress
on stderr); every browser session then gets its own Engine and KV cache. Options::

    --host 127.0.0.1 --port 7860   where to listen (default: $GRADIO_SERVER_NAME / $GRADIO_SERVER_PORT,
                                   Gradio's own variables, else 127.0.0.1:7860; the flags win)
    --dtype auto                   auto (default: bf16 where the CPU computes it natively, else fp32), bf16 or fp32
    --target DIR                   a local HF directory (default: SmolLM2-135M-Instruct, fetched once)
    --draft PATH | random[:SEED]   a draft head checkpoint (default: the shipped head, else random)
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home from a local tool


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description="EAGLE-2 Workbench web app")
    p.add_argument("--host", help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $GRADIO_SERVER_PORT, else 7860)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    p.add_argument("--target", default=None, help="local HF model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft head directory, or random[:SEED]")
    p.add_argument("--linear-order", default="auto", choices=["auto", "weight-left", "plain"],
                   help="few-row fp32 CPU linear order: auto (default: measured on this CPU once) or forced")
    return p.parse_args(argv)


def main(argv=None) -> None:
    """Load once, then serve until interrupted."""
    args = parse_args(argv)
    from workbench.app.ui import build_app, launch, server_address

    try:
        host, port = server_address(args.host, args.port)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    from workbench.app.load import load_workbench

    wb, info = load_workbench(args.target, args.draft, args.dtype, linear_order=args.linear_order)
    print(f"[app] serving on http://{host}:{port}", file=sys.stderr, flush=True)
    launch(build_app(wb, info), host, port)


if __name__ == "__main__":
    main()
