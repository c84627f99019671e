"""Every file of this project a docstring or a comment under ``workbench/`` cites exists:
``workbench/engine/tree.py``, ``engine/tree.py`` (from the package), ``docs/design.md``,
``tests/test_layers.py``; a bare ``tree.py`` names a module somewhere in the project. Paths in
other repositories (``vllm/v1/...``, ``eagle/model/...``) and bare output names (``load.md``) are
not ours to check."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"
OURS = {"workbench", "docs", "tests", "experiments", "tools", "notebooks",
        *(p.name for p in PACKAGE.iterdir() if p.is_dir())}  # first folders of a path in this project
# Paths under a first folder of ours that name another project's file, each with where it is cited.
ELSEWHERE = ("docs/advanced_features/",)  # SGLang's documentation (engine/frameworks.py)
MODULES = {p.name for folder in ("workbench", "tests", "tools", "experiments") for p in (ROOT / folder).rglob("*.py")} \
    | {p.name for p in ROOT.glob("*.py")}
CITED = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|md))(?![\w/])")


def texts(path: Path) -> list[str]:
    """The docstrings and comments of one module."""
    source = path.read_text()
    found = [ast.get_docstring(node, clean=False) or "" for node in ast.walk(ast.parse(source))
             if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    found += [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    return found


def exists(cited: str, where: Path) -> bool:
    """Whether ``cited`` (in ``where``) is a file of this project, or not ours to check."""
    if "/" not in cited:
        return cited.endswith(".md") or cited in MODULES
    if cited.split("/")[0] not in OURS or cited.startswith(ELSEWHERE):
        return True
    return any((base / cited).is_file() for base in (ROOT, PACKAGE, where.parent))


def missing_citations() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for text in texts(path):
            for cited in CITED.findall(text):
                if not exists(cited, path):
                    out.append(f"{path.relative_to(ROOT)} cites {cited}")
    return out


def test_every_cited_file_exists():
    assert missing_citations() == []


def test_the_check_finds_a_file_that_is_gone(tmp_path):
    module = tmp_path / "workbench" / "engine" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text('"""See ``drafts.py`` and ``engine/tree.py``."""\n# and docs/design.md\n')
    cited = [c for t in texts(module) for c in CITED.findall(t)]
    assert cited == ["drafts.py", "engine/tree.py", "docs/design.md"]
    assert not exists("drafts.py", module) and not exists("engine/drafts.py", module)
    assert exists("engine/tree.py", module) and exists("docs/design.md", module) and exists("vllm/v1/x.py", module)
