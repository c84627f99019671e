"""Where an answer's tokens come from, and how often the head's top-1 is right for each kind.

Seen from the token before it, an answer token continues a token pair of the prompt (a copy),
repeats a pair from earlier in the answer, or is new (``token_source``). ``top1_by_source``
splits a head's step-1 top-1 by that source, and, given how often each token pair occurs in the
answers of some training data (``response_pair_counts``), by how familiar the pair is. These
tables are docs/bench/head-training.md §8-§10 (``python -m experiments.head_studies agreement
--by-source [--pair-counts DATA]``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from workbench.train.evaluate import load_head

SOURCES = ("prompt", "answer", "new")
SURE = 0.9  # --by-source also splits off the positions where the target is at least this sure


def token_source(tokens: list[int], prompt_len: int, i: int) -> str:
    """Where the answer token ``tokens[i]`` comes from, seen from the token before it: ``"prompt"``
    if the pair ``(tokens[i-1], tokens[i])`` occurs in the prompt (a copy), else ``"answer"`` if
    it occurs earlier in the answer (a repeat), else ``"new"``."""
    if not prompt_len < i < len(tokens):
        raise ValueError(f"token {i} is not an answer token after the first (prompt {prompt_len}, {len(tokens)} tokens)")
    pair = (tokens[i - 1], tokens[i])
    if pair in zip(tokens[: prompt_len - 1], tokens[1:prompt_len]):
        return "prompt"
    return "answer" if pair in zip(tokens[prompt_len : i - 1], tokens[prompt_len + 1 : i]) else "new"


FAMILIARITY = ((0, "pair unseen"), (1, "seen 1-19 times"), (20, "seen 20+ times"))  # (from count, name)


def response_pair_counts(data: Path) -> Counter:
    """How often each token pair ``(a, b)`` occurs in the answers of a ``generate`` directory."""
    from safetensors import safe_open

    from workbench.train.shards import shard_files

    counts = Counter()
    for path in shard_files(data):
        with safe_open(str(path), "pt") as f:
            tokens, starts, plens = (f.get_tensor(k).tolist() for k in ("tokens", "starts", "prompt_lens"))
        for i, p in enumerate(plens):
            answer = tokens[starts[i] + p : starts[i + 1]]
            counts.update(zip(answer, answer[1:]))
    return counts


def familiarity(count: int) -> str:
    return next(name for lo, name in reversed(FAMILIARITY) if count >= lo)


def _stats(c: list[int], total: int) -> dict:
    return {"positions": c[0], "share": c[0] / total, "top1": c[1] / c[0] if c[0] else None,
            "sure_positions": c[2], "sure_share": c[2] / total, "sure_top1": c[3] / c[2] if c[2] else None}


def top1_by_source(head_dir: Path, target, val: list, pair_counts: Counter | None = None) -> dict[str, dict]:
    """Step-1 top-1 of the head in ``head_dir`` (as ``measure_head``: against the target's argmax)
    split by ``token_source`` of the answer's token there (the same token in a greedy answer): per
    source, its positions, their share and the top-1 there, and the same where the target is
    sure of its token (p(argmax) >= ``SURE``): ``sure_positions``, ``sure_share``, ``sure_top1``.
    With ``pair_counts`` (``response_pair_counts`` of training data), each source also splits by
    how often its token pair occurs there (``by_familiarity``: ``FAMILIARITY``'s names)."""
    from workbench.train.ttt import unrolled_forward

    head = load_head(head_dir, target)
    lm_head = target.lm_head.weight.float()
    count = {s: [0, 0, 0, 0] for s in SOURCES}  # positions, hits, sure positions, sure hits
    by_fam = {s: {name: [0, 0, 0, 0] for _, name in FAMILIARITY} for s in SOURCES}
    for seq in val:
        toks, n = seq.tokens.tolist(), len(seq.tokens) - 1
        feats = seq.features[:n].float()
        aux = None if seq.aux is None else seq.aux[:n].float()[None]
        with torch.no_grad():
            out = unrolled_forward(head, target.model.embed_tokens, features=feats[None], next_ids=seq.tokens[1:][None],
                                   steps=1, aux=aux)[0][0]
            # the output at j guesses f_{j+1}, whose argmax token the target emits after token j + 1
            guess = (out[seq.prompt_len - 1 : n - 1] @ lm_head.T).argmax(-1).tolist()
            p = torch.softmax(feats[seq.prompt_len : n] @ lm_head.T, dim=-1).max(-1)
        for j, (g, t, sure) in enumerate(zip(guess, p.indices.tolist(), (p.values >= SURE).tolist())):
            i = seq.prompt_len + 1 + j
            source = token_source(toks, seq.prompt_len, i)
            cells = [count[source]]
            if pair_counts is not None:
                cells.append(by_fam[source][familiarity(pair_counts[(toks[i - 1], toks[i])])])
            for c in cells:
                c[0] += 1
                c[1] += int(g == t)
                c[2] += int(sure)
                c[3] += int(sure and g == t)
    total = max(1, sum(c[0] for c in count.values()))
    out = {s: _stats(c, total) for s, c in count.items()}
    if pair_counts is not None:
        for s in SOURCES:
            out[s]["by_familiarity"] = {name: _stats(c, total) for name, c in by_fam[s].items()}
    return out


SOURCE_WORDS = {"prompt": "copies a token pair of the prompt", "answer": "repeats a pair of the answer", "new": "new"}


def report_sources(label: str, v: dict[str, dict], familiar_in: Path | None = None) -> None:
    def cell(name, c):
        top1 = "-" if c["top1"] is None else f"{c['top1']:.3f}"
        sure = "-" if c["sure_top1"] is None else f"{c['sure_top1']:.3f}"
        return f"{name} {c['share']:.0%} of positions, {top1} (where p(target) >= {SURE}: {c['sure_share']:.0%}, {sure})"

    print(f"  {label}: " + "; ".join(cell(SOURCE_WORDS[s], c) for s, c in v.items()), flush=True)
    for s, c in v.items():
        if "by_familiarity" in c:
            print(f"    {SOURCE_WORDS[s]}, by how often the pair occurs in the answers of {familiar_in}: "
                  + "; ".join(cell(name, f) for name, f in c["by_familiarity"].items()), flush=True)

