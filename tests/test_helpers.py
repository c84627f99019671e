"""What test modules share lives in ``tests/helpers.py``: a test module never imports another
(an edit to one file's tests would break the other's, and a helper is found where it is named)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_no_test_module_imports_another():
    for path in sorted(TESTS.glob("test_*.py")):
        bad = [m for m in imported_modules(path) if m.startswith(("test_", "tests."))]
        assert not bad, f"{path.name} imports {bad}: put what they share in tests/helpers.py"
