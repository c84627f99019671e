"""docs/code.md lists every file of the package, and every file it lists exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_MD = ROOT / "docs" / "code.md"
NAME = re.compile(r"^( *)(\S+)")


def listed_paths() -> set[str]:
    """The paths of the file map: the first code block after "What is inside", where an
    entry's indentation says which folder above it holds it."""
    text = CODE_MD.read_text()
    block = text[text.index("## What is inside"):].split("```")[1]
    folders: list[tuple[int, str]] = []  # (indent, path ending in /)
    paths = set()
    for line in block.splitlines():
        m = NAME.match(line)
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


def test_every_module_is_listed():
    listed = listed_paths()
    modules = sorted(str(p.relative_to(ROOT)) for folder in ("workbench", "tools")
                     for p in (ROOT / folder).rglob("*.py") if p.name != "__init__.py")
    missing = [m for m in modules if m not in listed]
    assert not missing, f"docs/code.md's file map leaves out {missing}: add a line for each"


def test_every_listed_path_exists():
    gone = sorted(p for p in listed_paths() if not (ROOT / p).exists())
    assert not gone, f"docs/code.md's file map lists {gone}, which do not exist"


def test_the_map_is_read_as_a_tree():
    listed = listed_paths()
    assert {"workbench/kv/allocator.py", "workbench/engine/frameworks.py", "workbench/testing/tiny.py",
            "workbench/bench/static_vs_dynamic.py", "tools/notebooks.py", "app.py"} <= listed
    assert "workbench/allocator.py" not in listed and not any("  " in p for p in listed)
