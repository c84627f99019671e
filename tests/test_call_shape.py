"""No call in the package passes five or more arguments by position.

Past four, a reader has to count commas against the callee's signature to know which value is
which; a keyword says it at the call. Our own functions make their later parameters keyword-only
(``def f(a, b, *, c, d, e)``), so the rule holds for the calls written next. Every ``.py`` file
under ``workbench/`` is parsed (nothing is imported); a starred argument (``f(*xs)``) counts as
one positional argument.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "workbench"
MOST = 4  # positional arguments a call may pass

# Callees that take their arguments by position by design, matched by name (the last part of
# ``a.b.name(...)``, or the kernel of ``name[grid](...)``), each with the reason.
EXCEPTIONS = {
    "_tree_attn_fwd": "Triton kernel launch: pointers, strides and sizes, bound by position as the Triton tutorials do",
    "_merge_splits": "Triton kernel launch (the split-KV merge): pointers and strides, as above",
    "_online_softmax_step": "Triton device function, inlined into the kernel: its arguments are the kernel's blocks",
    "_mkl_linear": "torch.ops.mkl op: its schema's argument names are torch internals, called as torch's tests call it",
    "_linear_pointwise": "torch.ops.mkldnn op: the same",
    "zip": "builtin whose parameters are positional-only",
}


def callee(node: ast.Call) -> str:
    """``f`` of ``f(...)``, ``a.b.f(...)`` and ``f[grid](...)``; the source text otherwise."""
    f = node.func.value if isinstance(node.func, ast.Subscript) else node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ast.unparse(f)


def long_calls(source: str, where: str = "<source>") -> list[tuple[str, str]]:
    """(``where:line``, callee) of every call passing more than ``MOST`` arguments by position."""
    return [(f"{where}:{n.lineno}", callee(n)) for n in ast.walk(ast.parse(source, where))
            if isinstance(n, ast.Call) and len(n.args) > MOST]


def package_calls() -> list[tuple[str, str]]:
    return [hit for path in sorted(ROOT.rglob("*.py"))
            for hit in long_calls(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT.parent)))]


def test_no_call_passes_five_or_more_arguments_by_position():
    bad = [f"{where} {name}(...)" for where, name in package_calls() if name not in EXCEPTIONS]
    assert not bad, ("calls with more than four positional arguments (pass the rest by keyword, and make the "
                     "callee's later parameters keyword-only with `*`):\n" + "\n".join(bad))


def test_every_exception_is_still_needed():
    used = {name for _, name in package_calls()}
    assert set(EXCEPTIONS) <= used, f"no call needs {sorted(set(EXCEPTIONS) - used)} any more: drop it from EXCEPTIONS"


def test_the_checker_counts_starred_arguments_and_reads_kernel_launches():
    source = ("f(a, b, c, d)\n"
              "g(a, b, c, d, e)\n"
              "h(*xs, a, b, c, d)\n"
              "m.k(a, b, c, d, key=e, other=f)\n"
              "kern[grid](a, b, c, d, e)\n"
              "obj.method(a, b, c, d, e, f)\n")
    assert long_calls(source) == [("<source>:2", "g"), ("<source>:3", "h"), ("<source>:5", "kern"),
                                  ("<source>:6", "method")]
