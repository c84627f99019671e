"""Load what the app serves, once per process, saying what happens at each stage."""

from __future__ import annotations

import re
import sys
import time


def default_draft() -> str | None:
    """None (load the shipped head) when the checkout has one, else ``"random"``."""
    from workbench.models.heads import default_draft_dir

    return None if (default_draft_dir() / "config.json").exists() else "random"


def load_workbench(target: str | None = None, draft: str | None = None, dtype: str = "auto", say=None,
                   linear_order: str = "auto"):
    """(Workbench, one line for the page: what was loaded and how long it took). ``say(msg)``
    gets progress lines (default: stderr). Without ``target`` and ``draft``: the default model
    and the shipped head, or a random head (with a warning) where none was trained yet."""
    t0 = time.perf_counter()
    say = say or (lambda msg: print(f"[app {time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True))
    say("importing torch and transformers")
    from workbench.pipeline import Workbench

    if draft is None and target is None:
        draft = default_draft()
        if draft == "random":
            say("no trained draft head in this checkout: using a random head (few drafts will be accepted)")
    say(f"loading target {target or '(default)'} in {dtype}, its tokenizer, draft head {draft or '(shipped)'}")
    wb = Workbench.load(target=target, draft=draft, dtype=dtype, linear_order=linear_order)
    say(f"loaded {wb.target_dir.name}; draft: {wb.draft_source}; {wb.linear_order.describe()}")
    backend = wb.attention.backend if wb.attention is not None else wb.target.attention_backend
    if wb.attention is not None:
        say(wb.attention.message)
    from workbench.app.ui import warm_up

    say(f"warmed up (two steps rendered) in {warm_up(wb):.1f} s")
    head = re.sub(r"^/\S*/", "", wb.draft_source)  # the draft's directory name, not its full path
    fallback = "" if wb.attention is None or wb.attention.ok else " (Triton kernel failed its self-check)"
    info = (f"Target `{wb.target_dir.name}` ({wb.dtype_name}) · draft: `{head}` · "
            f"attention: `{backend}`{fallback} · {wb.linear_order.describe()} · "
            f"loaded in {time.perf_counter() - t0:.1f} s")
    return wb, info
