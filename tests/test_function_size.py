"""No function in ``bpe_stream/`` longer than MAX_LINES lines or more complex than
MAX_COMPLEXITY (McCabe), so that each can be read at once (issue 34).

Lines: the body's, from its first statement after the docstring to its end (the signature and
the docstring do not count; inner functions count in the function that holds them, and are
measured on their own too).  Complexity: McCabe's, as ruff's C901 counts it (1, plus one for each
``if``/``elif``, loop, ``except``, ``case`` and inner function)."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "bpe_stream"
MAX_LINES = 60
MAX_COMPLEXITY = 15

# Functions over the limits, each with the reason it may be for now ("path::name": reason).
# Empty: every function is within the limits; a function that grows past them is split.
ALLOWED: dict = {}


def complexity(fn: ast.AST) -> int:
    """McCabe's number as ruff's C901 counts it: 1, plus one for each ``if``/``elif``, loop,
    ``except``, ``case`` and inner function (and what those hold)."""
    return 1 + _branches(fn.body)


def _branches(body) -> int:
    n = 0
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
            n += 1 + _branches(stmt.body) + _branches(stmt.orelse)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n += 1 + _branches(stmt.body)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            n += len(stmt.handlers) + _branches(stmt.body) + _branches(stmt.orelse) + _branches(stmt.finalbody)
            n += sum(_branches(h.body) for h in stmt.handlers)
        elif isinstance(stmt, ast.Match):
            n += sum(1 + _branches(case.body) for case in stmt.cases)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            n += _branches(stmt.body)
    return n


def body_lines(fn: ast.AST) -> int:
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return fn.end_lineno - body[0].lineno + 1


def functions(tree: ast.AST, prefix: str = ""):
    """``(qualified name, node)`` of every function and method, inner ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def measure() -> list:
    """``(lines, complexity, "path::name")`` of every function of the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            found.append((body_lines(node), complexity(node), f"{rel}::{name}"))
    return found


def test_the_measures_can_fail():
    code = ("def f(a):\n    '''doc'''\n    if a and a > 1 or a < -1:\n        return [x for x in a if x]\n"
            "    for i in a:\n        try:\n            pass\n        except ValueError:\n            pass\n"
            "    def g():\n        return 1 if a else 2\n    return g\n")
    (name, fn), (inner, _) = list(functions(ast.parse(code)))
    assert (name, inner) == ("f", "f.g")
    # if, for, except, the inner function (its if-expression, like and/or, is no branch)
    assert complexity(fn) == 1 + 1 + 1 + 1 + 1
    assert body_lines(fn) == 10


def test_no_function_over_the_limits():
    found = measure()
    largest = sorted(found, reverse=True)[:5]
    complex_ = sorted(found, key=lambda f: (f[1], f[0]), reverse=True)[:5]
    print("largest five (body lines, complexity, function):", *largest, sep="\n  ")
    print("most complex five:", *complex_, sep="\n  ")
    over = [f for f in found if (f[0] > MAX_LINES or f[1] > MAX_COMPLEXITY) and f[2] not in ALLOWED]
    assert over == [], f"over {MAX_LINES} lines or complexity {MAX_COMPLEXITY}: {over}"
    names = {f[2] for f in found}
    still = {f[2] for f in found if f[0] > MAX_LINES or f[1] > MAX_COMPLEXITY}
    allowed = set(ALLOWED)
    assert allowed <= names, f"allowed but gone: {allowed - names}"
    assert allowed <= still, f"allowed but within the limits now: {allowed - still}"
