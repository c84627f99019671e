"""What several test modules share (a test module never imports another): tiny random targets
and heads, fresh prefills, the sampling-losslessness set-up, a tree's test vectors, the head's
forward through the paged KV cache, the training-data fakes, made-up step costs per draft source,
and results computed once for every worker of a session."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from pathlib import Path

import torch

from workbench.attention.batch import extend_batch
from workbench.engine.sampling import SamplingParams
from workbench.engine.tree import Candidates
from workbench.kv import SlotAllocator
from workbench.lessons.chi_square import chi_square_pvalue
from workbench.lessons.exact_law import sample_sequences, sequence_counts, sequence_law
from workbench.models.draft import random_head
from workbench.models.loading import load_target
from workbench.testing.tiny import make_tiny_checkpoint
from workbench.train.generate import Chat, GenConfig


def tiny_pair(path, vocab_size: int = 16, seed: int = 0, head_seed: int = 1, head_std: float = 0.3, **kw):
    """A tiny random target and a random head over a small vocabulary: a head over 16 tokens
    with topk 2-4 covers enough of them that drafts are accepted often, so the walk, commit
    and rollback paths all run."""
    make_tiny_checkpoint(path, vocab_size=vocab_size, seed=seed, **kw)
    target = load_target(path)
    return target, random_head(target, head_seed, std=head_std)


def fresh_prefill(target, tokens: list[int], taps: tuple[int, ...] = ()):
    """Target K/V of every layer and post-norm hidden states for ``tokens`` in a new pool
    (``taps``: with the residual streams a fused head reads in front)."""
    kv = target.new_kv_pool(len(tokens))
    slots = SlotAllocator(len(tokens)).alloc(len(tokens))
    hidden = target(extend_batch(tokens=[tokens], prefix_slots=[[]], new_slots=[slots], device="cpu"), kv, taps)
    return kv, slots, hidden


def random_prompts(n: int, vocab: int, seed: int, lengths=(3, 11, 6, 17)) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (lengths[i % len(lengths)],), generator=gen).tolist() for i in range(n)]


def alone_outputs(target, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """Each prompt alone through a fresh plain-decoding engine: ``max_new`` greedy tokens (what
    every batched or speculative run of the same prompts must reproduce)."""
    from workbench.engine.config import SpecConfig
    from workbench.engine.engine import Engine

    out = []
    for p in prompts:
        eng = Engine(target, None, SpecConfig("vanilla"))
        eng.add_requests([p], max_new)
        out.append(eng.run()[0].output_ids)
    return out


# ---- sampling losslessness: the engine's tokens follow the target's exact law ------------------------
# The joint law of the first LOSSLESS_LENGTH tokens after LOSSLESS_PROMPT of a tiny target over
# LOSSLESS_VOCAB tokens (8^3 = 512 outcomes), enumerated exactly (``lessons.exact_law``), against
# LOSSLESS_DRAWS requests decoded together, by a chi-square test (``lessons.chi_square``, cells
# with expected count < 5 pooled). Each such test fails a correct engine with probability
# LOSSLESS_ALPHA.
LOSSLESS_ALPHA = 1e-3
LOSSLESS_VOCAB = 8
LOSSLESS_PROMPT = [3, 5, 1, 6]
LOSSLESS_LENGTH = 3
LOSSLESS_DRAWS = 3000
LOSSLESS_SAMPLINGS = [SamplingParams(temperature=1.0, seed=11), SamplingParams(temperature=0.7, top_p=0.9, seed=12)]


def lossless_pvalue(target, outputs: list[list[int]], params: SamplingParams) -> float:
    """Chi-square p-value of the first LOSSLESS_LENGTH tokens of ``outputs`` (each a request of
    LOSSLESS_PROMPT) against the target's exact law under ``params``."""
    counts = sequence_counts(outputs, target.config.vocab_size, LOSSLESS_LENGTH)
    return chi_square_pvalue(counts, sequence_law(target, LOSSLESS_PROMPT, params, LOSSLESS_LENGTH))


def assert_samples_like_target(target, head, spec, params: SamplingParams, name: str, min_accepted: int,
                               draws: int = LOSSLESS_DRAWS) -> None:
    """``draws`` requests of LOSSLESS_PROMPT pass the chi-square test against the exact law, with
    more than ``min_accepted`` drafts accepted in their first speculative step (fewer and the
    test would say little about acceptance)."""
    counts, accepted = sample_sequences(target, head, spec, params, LOSSLESS_PROMPT, LOSSLESS_LENGTH, draws)
    assert sum(accepted) > min_accepted, f"{name}: too few drafts accepted for the test to mean anything"
    p = chi_square_pvalue(counts, sequence_law(target, LOSSLESS_PROMPT, params, LOSSLESS_LENGTH))
    assert p > LOSSLESS_ALPHA, f"{name}: chi-square p = {p:.2e}: the output distribution differs from the target's"


# ---- a tree's test vectors (docs/design.md section 5) --------------------------------------------------
def score_driven_candidates() -> Candidates:
    """Ten drafts over three levels whose rerank by path score is worked out in docs/design.md."""
    A, B, C, D, E, F, G, H, I, J = range(20, 30)
    c = Candidates()
    a = c.add(A, .6, score=.6, parent=-1, depth=1)
    b = c.add(B, .3, score=.3, parent=-1, depth=1)
    cc = c.add(C, .55, score=.6 * .55, parent=a, depth=2)
    c.add(D, .28, score=.6 * .28, parent=a, depth=2)
    e = c.add(E, .8, score=.3 * .8, parent=b, depth=2)
    c.add(F, .1, score=.3 * .1, parent=b, depth=2)
    c.add(G, .6, score=.33 * .6, parent=cc, depth=3)
    c.add(H, .2, score=.33 * .2, parent=cc, depth=3)
    c.add(I, .5, score=.24 * .5, parent=e, depth=3)
    c.add(J, .4, score=.24 * .4, parent=e, depth=3)
    return c


# ---- the draft head's forward as the engine runs it ----------------------------------------------------
def engine_forward(head, features: list[torch.Tensor], ids: list[list[int]]) -> list[torch.Tensor]:
    """DraftHead.forward through the paged KV cache: one extend batch holding every sequence."""
    sizes = [len(s) for s in ids]
    slots, start = [], 0
    for n in sizes:
        slots.append(list(range(start, start + n)))
        start += n
    kv = head.new_kv_pool(start)
    batch = extend_batch(tokens=ids, prefix_slots=[[] for _ in ids], new_slots=slots, device="cpu")
    return list(head(torch.cat(features), batch, kv).split(sizes))


# ---- training data: a fake chat template, a small generator config -------------------------------------
STOP = tuple(range(40, 96))  # many stop ids: most answers finish, so follow-ups happen


class FakeChat(Chat):
    """Characters as token ids 3..62 of the tiny vocabulary; a turn boundary is id 1."""

    def __init__(self):
        super().__init__(None)

    def encode(self, messages):
        ids = [1]
        for m in messages:
            ids += [3 + ord(c) % 60 for c in m["content"][:12]] + [1]
        return ids

    def decode(self, ids):
        return "".join(chr(97 + i % 26) for i in ids)


def small_config(out: Path, **kw) -> GenConfig:
    return GenConfig(**{**dict(out=out, num_prompts=6, shard_size=2, samples=2, followup_frac=1.0, max_new=6), **kw})


def read(path: Path) -> dict:
    """A safetensors shard as {name: tensor}."""
    from safetensors.torch import load_file

    return load_file(str(path))


def digest(prompts) -> str:
    """sha256 of a prompt list, kinds and texts in order."""
    return hashlib.sha256("\n\0".join(f"{p.kind}\t{p.text}" for p in prompts).encode()).hexdigest()


# ---- threads and results under make test's workers ----------------------------------------------------
def real_model_threads() -> int:
    """Torch threads for a real-model test: two (one is faster for tiny models), or the cores
    each pytest-xdist worker has when ``make test`` runs one worker per core."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


def computed_once(tmp_path_factory, name: str, compute):
    """``compute()`` (a JSON value) once per test session. ``make test`` runs pytest-xdist
    workers, each with its own session-scoped fixtures: the first worker to ask computes and
    writes ``name``.json in the folder above every worker's temporary folder (one per session),
    under a lock that the others wait on, then read. Without workers it is plain ``compute()``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return compute()
    path = tmp_path_factory.getbasetemp().parent / f"{name}.json"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(compute()))
            tmp.replace(path)  # whole or absent, even if this worker dies mid-write
        return json.loads(path.read_text())


def listed_paths() -> set[str]:
    """The paths of the file map: the first code block after "What is inside", where an
    entry's indentation says which folder above it holds it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "code.md").read_text()
    block = text[text.index("## What is inside"):].split("```")[1]
    folders: list[tuple[int, str]] = []  # (indent, path ending in /)
    paths = set()
    for line in block.splitlines():
        m = re.match(r"^( *)(\S+)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        if not (name.endswith("/") or "." in name):
            continue  # a description carried onto the next line
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else "") + name
        paths.add(path.rstrip("/"))
        if name.endswith("/"):
            folders.append((indent, path))
    return paths


def tiny_app_workbench(folder):
    """The app's tiny random model (``workbench.testing.tiny``) loaded with a random head: what the
    app's unit tests step through."""
    from workbench.testing.tiny import make_tiny_app_model
    from workbench.pipeline import Workbench

    return Workbench.load(target=str(make_tiny_app_model(folder, seed=1)), draft="random:1", dtype="fp32")


class MadeUpStepCosts:
    """Stands in for ``measure.step_cost.step_cost_for`` (monkeypatch it with an instance): nothing
    is timed. Each draft source's draft points are what the source itself derives
    (``DraftSource.draft_cost``) from a made-up verify curve and head curve: the head's curve, N / L
    of a verify for ``exit:N``, none for the n-gram lookup; ``calls`` lists the sources asked for."""

    VERIFY = ((1, 10.0), (2, 10.5), (4, 11.0), (8, 12.0), (16, 14.0), (64, 30.0))
    HEAD = ((1, 2.0), (2, 2.2), (4, 2.5), (8, 3.0), (64, 6.0))

    def __init__(self):
        self.calls = []
        self.targets = []  # the ``target`` each call was given: the run's first step cost, after the first

    def __call__(self, wb, source, cache_dir=None, log=None, target=None):
        from types import SimpleNamespace

        from workbench.cost_model import Overhead, StepCost

        self.calls.append(source)
        self.targets.append(target)
        timers = SimpleNamespace(verify=list(self.VERIFY), num_layers=wb.target.config.num_layers,
                                 head=lambda: list(self.HEAD), model=lambda: list(self.HEAD))
        name = "no draft" if source is None else source.name
        return StepCost(self.VERIFY, [] if source is None else source.draft_cost(timers), source="made up",
                        overhead=Overhead(plain_per_step=0.5, spec_per_step=1.0), measured=f"made up for {name}")


def glossary_terms() -> set[str]:
    """The words the glossary defines, as the page writes them: each first cell without its
    backticks, split at " / " and without a trailing "(symbol)" (``num_draft_tokens (D)`` gives
    ``num_draft_tokens``; ``tried / accepted`` gives both)."""
    from workbench.app import explain

    terms = set()
    for line in explain.GLOSSARY.splitlines()[2:]:
        if not line.startswith("| "):
            continue
        cell = line.split(" | ")[0].removeprefix("| ").replace("`", "")
        for word in cell.split(" / "):
            terms.add(word.split(" (")[0].strip())
    return terms
