"""The methods a benchmark runs, by name (``--methods`` of ``python -m workbench bench``, the
``--method`` of ``python -m workbench.bench calibration``): see ``suite.py`` for the list.

Engine methods become ``SpecConfig``s; the transformers baselines carry none. A speculative
method may name its draft source after ``@`` (``--draft`` of ``python -m workbench generate``):
``eagle2:8/5/4@ngram``, ``linear:4@exit:24``, ``eagle2:12/5/4@ngram:2-8``; without one it drafts
with the head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# the engine is imported inside ``parse_methods``: building the bench parser stays cheap


@dataclass(frozen=True)
class Method:
    name: str  # as given in --methods
    spec: SpecConfig | None  # engine methods; None for the transformers baselines
    prompt_lookup: int | None = None  # hf-pld only

    @property
    def hf(self) -> bool:
        return self.name.startswith("hf-")

    @property
    def speculative(self) -> bool:
        return self.spec is not None and self.spec.speculative

    def describe(self) -> str:
        if self.hf:
            return "transformers generate" + (f", prompt lookup {self.prompt_lookup}" if self.prompt_lookup else "")
        return self.spec.describe()


def parse_methods(text: str, best=None) -> list[Method]:
    """Methods from the ``--methods`` list; ``eagle2:best`` needs ``best`` (None: left out)."""
    out, names = [], [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        base, at, source = name.partition("@")
        method = _method(name, base, best)
        if method is not None:
            out.append(_with_draft(method, source) if at else method)
    if len({m.name for m in out}) != len(out):
        raise ValueError(f"a method is listed twice in {text!r}")
    if not names:
        raise ValueError("--methods is empty")
    return out


def _method(name: str, base: str, best) -> Method | None:
    """Method ``name`` from its part before any ``@`` (None: ``eagle2:best`` without ``best``)."""
    from workbench.measure.hf_baselines import PROMPT_LOOKUP_TOKENS
    from workbench.engine.config import parse_spec

    if base == "hf-greedy":
        return Method(name, None)
    if base == "hf-pld":
        return Method(name, None, PROMPT_LOOKUP_TOKENS)
    if base == "eagle2:best":
        return None if best is None else Method(name, best)
    return Method(name, parse_spec(base, others="eagle2:best, hf-greedy, hf-pld"))


def _with_draft(method: Method, text: str) -> Method:
    """``method`` drafting from the source ``text`` names (``ngram[:MIN-MAX]``, ``exit:N``)."""
    from workbench.engine.config import with_draft

    if method.spec is None:
        raise ValueError(f"{method.name}: only a speculative method drafts (linear, eagle2 or static)")
    return replace(method, spec=with_draft(method.spec, text, method.name))
