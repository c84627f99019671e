"""The output so far, each token coloured by where it came from, and τ per step.

Provenance (``style.PROVENANCE``): the **prompt**; an **accepted draft** (the draft head proposed
it, the target agreed); a **bonus** (the target's own token at the end of the walk; the first
token, from the prefill, is the target's own too). Accepted drafts are what speculation buys:
they cost no target forward of their own. τ (accept length) = tokens emitted per target forward
= correct drafts + 1.
"""

from __future__ import annotations

import html

from workbench.metrics import tau
from workbench.viz.html import chip
from workbench.viz.style import PROVENANCE


def _text_of(trace: dict) -> dict[int, str]:
    """Token id -> text, from what the trace recorded (tree nodes, bonus, top tokens)."""
    known = {t["token"]: t["text"] for row in trace["verify"]["top"] for t in row}
    if trace["kind"] == "spec":
        known.update({n["token"]: n["text"] for n in trace["tree"]["nodes"]})
        known[trace["accept"]["bonus"]["token"]] = trace["accept"]["bonus"]["text"]
    return known


def output_tokens(traces: list[dict], token_text=None) -> list[dict]:
    """Every emitted token in order: token, text, provenance ("accepted" or "bonus"), step.
    ``token_text(id)`` is only needed for a sampled prefill/vanilla token outside the top list."""
    out = []
    for tr in traces:
        known = _text_of(tr)
        n_accepted = len(tr["accept"]["accepted"]) if tr["kind"] == "spec" else 0
        for j, tok in enumerate(tr["emitted"]):
            text = known.get(tok) if tok in known else (token_text(tok) if token_text else f"<{tok}>")
            out.append({"token": tok, "text": text, "provenance": "accepted" if j < n_accepted else "bonus",
                        "step": tr["step"]})
    return out


def tau_per_step(traces: list[dict]) -> list[dict]:
    """τ of every verify step (spec or vanilla decode; the prefill is not a verify step)."""
    return [{"step": t["step"], "tau": t["accept_length"], "emitted": len(t["emitted"])}
            for t in traces if t["kind"] != "prefill"]


_STYLE = {
    "prompt": "color:#666;font-style:italic",
    "accepted": f"background:#D9F0E8;border-bottom:2px solid {PROVENANCE['accepted'].colour}",
    "bonus": f"background:#FBEBC7;border-bottom:2px dotted {PROVENANCE['bonus'].colour}",
}


def output_html(prompt: str, traces: list[dict], token_text=None) -> str:
    """The prompt, then every token so far (the last step's tokens outlined), a legend, τ per step."""
    toks = output_tokens(traces, token_text)
    last = traces[-1]["step"] if traces else None
    spans = []
    for t in toks:
        outline = ";outline:1px solid #333" if t["step"] == last else ""
        label = PROVENANCE[t["provenance"]].label
        spans.append(f"<span data-prov='{t['provenance']}' data-step='{t['step']}' title='step {t['step']}: "
                     f"{html.escape(label)}' style='{_STYLE[t['provenance']]}{outline};white-space:pre-wrap'>"
                     f"{html.escape(t['text'])}</span>")
    legend = "".join(chip(look) for look in PROVENANCE.values())
    body = (f"<div style='line-height:1.9;font-size:14px'><span data-prov='prompt' style='{_STYLE['prompt']}'>"
            f"{html.escape(prompt)}</span> ⟶ {''.join(spans)}</div>")
    legend = f"<div style='font-size:12px;margin-top:6px'>{legend}</div>"
    return f"<div class='wb-output'>{body}{legend}{tau_html(traces)}</div>"


TAIL_TOKENS = 40  # tokens the strip under the status line shows: about two lines at 1366 px


def output_tail_html(prompt: str, traces: list[dict], token_text=None, limit: int = TAIL_TOKENS) -> str:
    """The output's last ``limit`` tokens, coloured as in ``output_html`` (the last step's
    outlined), for a strip next to the Step button: what each Step added is seen without
    scrolling. "…" marks tokens left out before them; before any token, the prompt's end."""
    toks = output_tokens(traces, token_text)
    last = traces[-1]["step"] if traces else None
    spans = [f"<span data-prov='{t['provenance']}' data-step='{t['step']}' style='{_STYLE[t['provenance']]}"
             f"{';outline:1px solid #333' if t['step'] == last else ''};white-space:pre-wrap'>"
             f"{html.escape(t['text'])}</span>" for t in toks[-limit:]]
    if not spans:
        return ""
    before = "… " if len(toks) > limit else f"<span style='{_STYLE['prompt']}'>{html.escape(prompt[-60:])}</span> ⟶ "
    head = (f"<div style='font-size:12px;color:#555'><b>Output so far</b>: its end ({len(toks)} tokens; all, "
            "with τ, under the tree)</div>")
    # the last lines in view: a box of at most two lines whose overflow is cut at the top, not the bottom
    box = ("display:flex;flex-direction:column;justify-content:flex-end;max-height:3.6em;overflow:hidden;"
           "line-height:1.8;font-size:14px")
    return (f"<div class='wb-output-tail' data-tokens='{len(toks)}'>{head}<div style='{box}'><div>{before}"
            f"{''.join(spans)}</div></div></div>")


def tau_html(traces: list[dict]) -> str:
    """τ per verify step as small boxes, then the mean and tokens per target forward."""
    taus = tau_per_step(traces)
    if not taus:
        return "<p style='font-size:12px;color:#555'>τ per step: none yet (the prefill is not a verify step).</p>"
    boxes = "".join(f"<span title='step {t['step']}' data-tau='{t['tau']}' style='display:inline-block;"
                    f"min-width:18px;text-align:center;margin:1px;border:1px solid #CCC'>{t['tau']}</span>"
                    for t in taus)
    tokens = sum(len(t["emitted"]) for t in traces)
    return (f"<p style='font-size:12px;color:#333;margin:6px 0'>τ per step: {boxes}<br>mean τ "
            f"{tau([t['tau'] for t in taus]):.2f} over {len(taus)} verify steps · {tokens} tokens from "
            f"{len(traces)} target forwards (prefill included)</p>")
