"""``constraints.txt``: the releases the test suite passed with, written from the venv that ran it.

    python -m tools.constraints            # rewrites constraints.txt (make constraints)

Every distribution installed in the running interpreter is pinned with ``==``, except the project
itself and torch and triton, which follow the Makefile's TORCH_SPEC (docs/code.md, "Dependencies").
A release that refuses some Python that pyproject.toml's ``requires-python`` admits (soupsieve
4.1.4 needs 3.11.5; Debian 12's python3 is 3.11.2) is pinned only where it installs, under a
``python_full_version`` marker; elsewhere pip takes the newest release that does.
"""

from __future__ import annotations

import platform
import re
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
UNPINNED = ("workbench", "torch", "triton")  # the project; torch and triton follow TORCH_SPEC
TOOLING = ("pip", "setuptools", "wheel", "distribute")  # what pip freeze leaves out too
HEADER = """\
# The releases the test suite passed with (`make test`; Python {python}, {platform}, torch
# {torch}, triton {triton}): `make venv` installs with `pip install -c constraints.txt`, so a
# set-up next month gets these and not whatever was released since. pyproject.toml keeps the
# ranges the project supports; this file picks one tested point inside them.
#
# torch and triton are not pinned here: torch comes first from the Makefile's TORCH_SPEC (a CPU
# build by default; a CUDA build names the one triton it needs), and a pin here would fight
# that choice. `make gpu-check` runs the GPU machine's own python3 without the venv, so this
# file never applies there. A pin with a python_full_version marker is a release that needs a
# newer Python than requires-python admits: older interpreters take what installs there.
#
# Moving forward: docs/code.md, "Dependencies". Written by `make constraints`
# (python -m tools.constraints): edit the tool, not this file.
"""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin(name: str, version: str, requires_python: str | None, lowest_python: str) -> str:
    """``name==version``, with a marker when the release refuses ``lowest_python``."""
    line = f"{name}=={version}"
    if requires_python and not SpecifierSet(requires_python).contains(lowest_python):
        specs = SpecifierSet(requires_python)
        marker = " and ".join(f'python_full_version {s.operator} "{s.version}"' for s in sorted(specs, key=str))
        line += f" ; {marker}"
    return line


def lowest_python(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The oldest Python ``requires-python`` admits, as x.y.z (``>=3.11`` -> 3.11.0)."""
    spec = tomllib.loads(pyproject.read_text())["project"]["requires-python"]
    floor = next(s.version for s in SpecifierSet(spec) if s.operator == ">=")
    return ".".join((floor.split(".") + ["0", "0"])[:3])


def constraints_text() -> str:
    """The whole file for the running interpreter's installed distributions."""
    installed = {normalize(d.metadata["Name"]): d for d in distributions()}
    lowest = lowest_python()
    pins = [pin(d.metadata["Name"], d.version, d.metadata.get("Requires-Python"), lowest)
            for key, d in sorted(installed.items()) if key not in UNPINNED + TOOLING]

    def version(name: str) -> str:
        return installed[name].version if name in installed else "not installed"

    header = HEADER.format(python=platform.python_version(), platform=f"{sys.platform} {platform.machine()}",
                           torch=version("torch"), triton=version("triton"))
    return header + "\n".join(pins) + "\n"


def main() -> int:
    CONSTRAINTS.write_text(constraints_text())
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
