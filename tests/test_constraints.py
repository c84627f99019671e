"""constraints.txt (the releases the suite passed with) agrees with pyproject.toml: every direct
dependency is pinned inside its range, torch and triton are left to the Makefile's TORCH_SPEC,
and the venv installs with the file (a change to it re-installs)."""

import re
import tomllib

from packaging.requirements import Requirement

from tools.constraints import CONSTRAINTS, ROOT, lowest_python, normalize, pin


def pinned() -> dict[str, Requirement]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            assert normalize(req.name) not in out, f"{req.name} is pinned twice"
            assert [s.operator for s in req.specifier] == ["=="], f"{line}: not one exact release"
            out[normalize(req.name)] = req
    return out


def test_every_direct_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = pinned()
    for line in direct:
        req = Requirement(line)
        key = normalize(req.name)
        if key in ("torch", "triton"):
            assert key not in pins, f"{key} must follow TORCH_SPEC, not constraints.txt"
            continue
        assert key in pins, f"{req.name} is a dependency that constraints.txt does not pin"
        (exact,) = pins[key].specifier
        assert req.specifier.contains(exact.version), f"{line}: constraints.txt pins {exact.version}, outside it"


def test_a_pin_gets_a_marker_only_where_its_release_refuses_a_supported_python():
    assert lowest_python() == "3.11.0"
    assert pin("numpy", "2.4.6", ">=3.11", "3.11.0") == "numpy==2.4.6"
    assert pin("six", "1.17.0", None, "3.11.0") == "six==1.17.0"
    assert pin("soupsieve", "4.1.4", ">=3.11.5", "3.11.0") == 'soupsieve==4.1.4 ; python_full_version >= "3.11.5"'
    marked = Requirement(pin("x", "1.0", "<3.16,>=3.12", "3.11.0"))
    assert not marked.marker.evaluate({"python_full_version": "3.11.2"})
    assert marked.marker.evaluate({"python_full_version": "3.13.1"})


def test_the_venv_installs_with_the_constraints_and_reinstalls_when_they_change():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^CONSTRAINTS \?= constraints\.txt$", makefile, re.M)
    assert re.search(r"^\$\(STAMP\): .*\$\(CONSTRAINTS\)", makefile, re.M)
    installs = re.findall(r"pip install (.*)-e '\.\[(.*)\]'", makefile)
    assert ("$(PIN) ", "test") in installs and ("$(PIN) ", "test,notebooks") in installs
