"""docs/code.md lists every file of the package, and every file it lists exists."""

from pathlib import Path

from helpers import listed_paths

ROOT = Path(__file__).resolve().parents[1]


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
