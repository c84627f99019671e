"""Layers look down (docs/design.md §1): a module never imports one from a layer above it, and
no two modules import each other, directly or around a loop.

Every ``.py`` file under ``workbench/`` is parsed (nothing is imported); every import counts,
at module level or inside a function: ``import a.b``, ``from a import b``, relative imports,
``importlib.import_module("a.b")`` and ``__import__("a.b")`` with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "workbench"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# The layer table, lowest first: each entry is a top-level module or subpackage of workbench/.
# A module may import its own layer and the layers below it, never a layer above. A new
# subpackage (or top-level module) goes in here, in the lowest layer whose imports it needs.
# measure is the measuring library (the Spec-Bench questions, a forward's cost, the step cost, a
# load run) that train, the app and the lessons import; viz renders traces (and what analysis
# derives from them); train and app share a layer because neither imports the other
# (test_train_and_app_stay_apart); bench holds the benchmark commands, which only the command line
# imports (test_only_the_command_line_imports_the_benchmark_commands).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("__init__", "errors", "device", "metrics", "progress", "timing", "cache_file", "jsonl", "cost_model",
                    "default_tree")),
    ("kv and attention", ("kv", "attention")),
    ("models", ("models",)),
    ("engine", ("engine",)),
    ("analysis", ("analysis",)),
    ("pipeline", ("store", "cpu_choices", "pipeline", "flags", "testing")),
    ("measurement", ("measure",)),
    ("figures", ("viz",)),
    ("training and app", ("train", "app")),
    ("notebook helpers", ("lessons",)),
    ("benchmark commands", ("bench",)),
    ("command line", ("cli",)),
    ("entry point", ("__main__",)),
]
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """``workbench.engine.tree`` -> ``engine``; ``workbench`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def rank_of(module: str, test_file: str = "tests/test_layers.py") -> int:
    unit = unit_of(module)
    if unit not in RANK:
        raise KeyError(f"{PACKAGE}/{unit} ({module}) is in no layer: add {unit!r} to LAYERS in {test_file}, "
                       f"in the lowest layer whose modules it imports")
    return RANK[unit]


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _literal_import(node: ast.Call) -> str | None:
    """The module named by ``importlib.import_module("x")`` / ``__import__("x")``, if literal."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``module`` imports (anywhere in the file)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(name: str, names: list[str] = ()) -> None:
        if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            return
        # ``from a import b``: b is a module when it is one, else a name defined in a
        subs = [f"{name}.{n}" for n in names if f"{name}.{n}" in known]
        found.update(subs)
        if len(subs) < len(names) or not names:
            found.add(name)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            add(base, [a.name for a in node.names])
        elif isinstance(node, ast.Call) and (name := _literal_import(node)):
            add(name)
    found.discard(module)
    return {m for m in found if m in known}


def import_graph(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer, as readable lines."""
    bad = []
    for mod, targets in sorted(graph.items()):
        for t in sorted(targets):
            if rank_of(t) > rank_of(mod):
                bad.append(f"{mod} ({LAYERS[rank_of(mod)][0]}) imports {t} ({LAYERS[rank_of(t)][0]}), a layer above")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# ---- the package ------------------------------------------------------------------------------

def test_every_module_is_in_a_layer():
    units = {unit_of(m) for m in modules(ROOT)}
    missing = [u for u in sorted(units) if u not in RANK]
    assert not missing, (f"{', '.join(PACKAGE + '/' + u for u in missing)} in no layer: add "
                         f"{', '.join(map(repr, missing))} to LAYERS in tests/test_layers.py")


def test_layers_only_look_down():
    graph = import_graph(ROOT)
    assert sum(len(t) for t in graph.values()) > 100  # the walk found the package's imports
    assert upward_imports(graph) == []


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_only_the_entry_point_imports_the_command_line():
    graph = import_graph(ROOT)
    assert sorted(m for m, targets in graph.items() if f"{PACKAGE}.cli" in targets) == [f"{PACKAGE}.__main__"]


def test_only_the_command_line_imports_the_benchmark_commands():
    graph = import_graph(ROOT)
    outside = {m: sorted(t for t in targets if unit_of(t) == "bench")
               for m, targets in graph.items() if unit_of(m) not in ("bench", "cli")}
    assert any(unit_of(t) == "measure" for m in graph if unit_of(m) == "app" for t in graph[m])  # the walk sees the library
    assert {m: t for m, t in outside.items() if t} == {}


def test_train_and_app_stay_apart():
    graph = import_graph(ROOT)
    for mod, targets in graph.items():
        for one, other in (("train", "app"), ("app", "train")):
            if unit_of(mod) == one:
                assert not [t for t in targets if unit_of(t) == other], mod


BESIDE = ("experiments", "tools")  # above the package: they import it, never the reverse


def imports_from_beside(root: Path) -> list[str]:
    """Every import of ``experiments``/``tools`` by a module of the package at ``root``."""
    found = []
    for mod, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and (name := _literal_import(node)):
                names = [name]
            else:
                names = []
            found += [f"{mod} imports {n}" for n in names if n.split(".")[0] in BESIDE]
    return found


def test_the_package_never_imports_experiments_or_tools():
    assert imports_from_beside(ROOT) == []


def test_models_never_import_the_engine():
    graph = import_graph(ROOT)
    for mod, targets in graph.items():
        if unit_of(mod) in ("kv", "attention", "models"):
            assert not [t for t in targets if unit_of(t) == "engine"], mod


# ---- the checker itself, on a made-up package ---------------------------------------------------

def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_checker_finds_an_upward_import_inside_a_function(tmp_path):
    root = _fake_package(tmp_path, {
        "models/__init__.py": "",
        "models/llama.py": "def f():\n    from workbench.engine.batch import ForwardBatch\n",
        "engine/__init__.py": "",
        "engine/batch.py": "from ..models import llama\n",
    })
    graph = import_graph(root)
    assert graph["workbench.engine.batch"] == {"workbench.models.llama"}  # relative import resolved
    assert upward_imports(graph) == [
        "workbench.models.llama (models) imports workbench.engine.batch (engine), a layer above"]
    assert cycles(graph) == [["workbench.engine.batch", "workbench.models.llama"]]


def test_checker_finds_lazy_string_imports_and_cycles(tmp_path):
    root = _fake_package(tmp_path, {
        "store.py": "import importlib\ndef f():\n    return importlib.import_module('workbench.cli')\n",
        "cli.py": "__import__('workbench.pipeline')\n",
        "pipeline.py": "from workbench import store\n",
    })
    graph = import_graph(root)
    assert graph["workbench.store"] == {"workbench.cli"}
    assert upward_imports(graph) == ["workbench.store (pipeline) imports workbench.cli (command line), a layer above"]
    assert cycles(graph) == [["workbench.cli", "workbench.pipeline", "workbench.store"]]


def test_an_unknown_subpackage_fails_with_what_to_do(tmp_path):
    root = _fake_package(tmp_path, {"notebook/__init__.py": "", "notebook/figures.py": "import workbench.viz\n",
                                    "viz/__init__.py": ""})
    with pytest.raises(KeyError, match=r"workbench/notebook .* add 'notebook' to LAYERS in tests/test_layers.py"):
        upward_imports(import_graph(root))


def test_checker_finds_an_import_of_experiments(tmp_path):
    root = _fake_package(tmp_path, {"bench/__init__.py": "",
                                    "bench/run.py": "def f():\n    from experiments.kernel import main\n"})
    assert imports_from_beside(root) == ["workbench.bench.run imports experiments.kernel"]
