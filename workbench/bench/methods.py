"""The methods a benchmark runs, by name (``--methods`` of ``python -m workbench bench``, the
``--method`` of ``python -m workbench.bench calibration``): see ``suite.py`` for the list.

Engine methods become ``SpecConfig``s; the transformers baselines carry none.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    from workbench.bench import tune
    from workbench.bench.hf_baselines import PROMPT_LOOKUP_TOKENS
    from workbench.engine.config import SpecConfig

    out, names = [], [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name == "vanilla":
            out.append(Method(name, SpecConfig("vanilla")))
        elif name == "hf-greedy":
            out.append(Method(name, None))
        elif name == "hf-pld":
            out.append(Method(name, None, PROMPT_LOOKUP_TOKENS))
        elif name.startswith("linear:") and name[7:].isdigit():
            out.append(Method(name, SpecConfig.linear(int(name[7:]))))
        elif name == "eagle2:best":
            if best is not None:
                out.append(Method(name, best))
        elif name.startswith("eagle2:"):
            out.append(Method(name, tune.parse_tree(name[7:])))
        elif name.startswith("static:") and name[7:].isdigit():
            out.append(Method(name, SpecConfig.from_knobs("static", num_draft_tokens=int(name[7:]))))
        else:
            raise ValueError(f"unknown method {name!r}; use vanilla, linear:S, eagle2:D/S/K, eagle2:best, "
                             "static:D, hf-greedy or hf-pld")
    if len({m.name for m in out}) != len(out):
        raise ValueError(f"a method is listed twice in {text!r}")
    if not names:
        raise ValueError("--methods is empty")
    return out
