"""The test suite's own rule: every test has an assertion that can fail, on every path.

A test passes when nothing in it raises, so a test whose body never asserts (or asserts
only inside an `if` that may be false, or in a loop that may run zero times) passes
whatever the code does. This reads every test module's syntax tree and fails for each
test function that has no assert-like statement reached unconditionally: an `assert`,
`pytest.raises`/`pytest.warns`/`pytest.fail`, a `raise`, or a call to a helper that itself
asserts unconditionally (found the same way, in the module, its class, or the tests.*
module it is imported from), or one of the few asserting helpers named in ASSERTING_CALLS.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# Helpers whose failure is an exception raised on a condition (so the scan cannot see it
# as unconditional), each with the keyword that makes it check, or None when it always does.
ASSERTING_CALLS: dict[str, str | None] = {
    "labctl": "check",  # tests.integration.conftest.labctl(..., check=True)
    "run": "check",  # subprocess.run(..., check=True) and the fakes' run(..., check=True)
    "check_call": None,  # subprocess.check_call
    "check_output": None,  # subprocess.check_output
}
# `with` context managers that assert on exit.
ASSERTING_CONTEXTS = {"raises", "warns", "deprecated_call", "RaisesGroup"}


@dataclass
class Module:
    """One parsed test module: its top-level functions, classes' methods and the names it
    imports from other modules under tests/."""

    path: Path
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    methods: dict[tuple[str, str], ast.FunctionDef | ast.AsyncFunctionDef] = field(
        default_factory=dict)
    imported: dict[str, tuple[Path, str]] = field(default_factory=dict)
    constants: dict[str, ast.expr] = field(default_factory=dict)


def parse(path: Path) -> Module:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = Module(path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    module.methods[(node.name, item.name)] = item
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            module.constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "tests."):
            source = REPO / (node.module.replace(".", "/") + ".py")
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (source, alias.name)
    return module


class Scan:
    """Which functions assert unconditionally; helpers are resolved across modules and
    memoised (a helper being looked at counts as not asserting, so recursion ends)."""

    def __init__(self) -> None:
        self.modules: dict[Path, Module] = {}
        self.known: dict[tuple[Path, str], bool] = {}

    def module(self, path: Path) -> Module:
        if path not in self.modules:
            self.modules[path] = parse(path)
        return self.modules[path]

    def function_asserts(self, path: Path, key: str,
                         func: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None) -> bool:
        memo = (path, key)
        if memo not in self.known:
            self.known[memo] = False
            self.known[memo] = self.block_asserts(func.body, path, cls)
        return self.known[memo]

    def block_asserts(self, body: list[ast.stmt], path: Path, cls: str | None,
                      then: bool = False, loop_exit: bool = False) -> bool:
        """Every way through `body` asserts, where `then` says whether what runs after
        the block does and `loop_exit` whether what a `break`/`continue` leads to does (a
        `continue` is taken as the last iteration's: conservative)."""
        after = then
        for stmt in reversed(body):
            after = self.statement_asserts(stmt, path, cls, after, loop_exit)
        return after

    def nonempty_literal(self, expr: ast.expr, path: Path) -> bool:
        """`expr` is a tuple, list or set written out with an element (or a module
        constant that is one): a loop over it runs its body."""
        if isinstance(expr, ast.Name):
            expr = self.module(path).constants.get(expr.id, expr)
        return isinstance(expr, ast.Tuple | ast.List | ast.Set) and any(
            not isinstance(e, ast.Starred) for e in expr.elts)

    def statement_asserts(self, stmt: ast.stmt, path: Path, cls: str | None, then: bool,
                          loop_exit: bool) -> bool:
        """Every way through `stmt` and then what follows it (asserting: `then`) asserts."""
        def block(body: list[ast.stmt], after: bool = then, exit_: bool = loop_exit) -> bool:
            return self.block_asserts(body, path, cls, after, exit_)

        def expr(value: ast.expr | None) -> bool:
            return value is not None and self.expression_asserts(value, path, cls)

        if isinstance(stmt, ast.Assert | ast.Raise):
            return True
        if isinstance(stmt, ast.Return):
            return expr(stmt.value)
        if isinstance(stmt, ast.Break | ast.Continue):
            return loop_exit
        if isinstance(stmt, ast.If):
            return expr(stmt.test) or (block(stmt.body) and block(stmt.orelse))
        if isinstance(stmt, ast.For | ast.AsyncFor):
            runs = self.nonempty_literal(stmt.iter, path)
            body = block(stmt.body, then, then)  # a break leads to what follows
            return expr(stmt.iter) or (body and (runs or block(stmt.orelse)))
        if isinstance(stmt, ast.While):
            forever = isinstance(stmt.test, ast.Constant) and bool(stmt.test.value)
            body = block(stmt.body, then, then)
            return expr(stmt.test) or (body and (forever or block(stmt.orelse)))
        if isinstance(stmt, ast.Try | ast.TryStar):
            if block(stmt.finalbody, False):
                return True
            return block(stmt.body, block(stmt.orelse)) and all(
                block(handler.body) for handler in stmt.handlers)
        if isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _name(call.func) in ASSERTING_CONTEXTS:
                    return True
                if expr(call):
                    return True
            return block(stmt.body)
        if isinstance(stmt, ast.Match):
            caught = any(isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None
                         for case in stmt.cases)
            return expr(stmt.subject) or (all(block(case.body) for case in stmt.cases)
                                          and (caught or then))
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return then  # defined here, maybe never called
        return then or any(expr(child) for child in ast.iter_child_nodes(stmt)
                           if isinstance(child, ast.expr))

    def expression_asserts(self, expr: ast.expr, path: Path, cls: str | None) -> bool:
        """A call evaluated whenever `expr` is (not in a lambda, a comprehension's body, a
        conditional expression's branch or the right of `and`/`or`) asserts."""
        if isinstance(expr, ast.Lambda | ast.IfExp | ast.ListComp | ast.SetComp
                      | ast.DictComp | ast.GeneratorExp):
            return False
        if isinstance(expr, ast.BoolOp):
            return self.expression_asserts(expr.values[0], path, cls)
        if isinstance(expr, ast.Call) and self.call_asserts(expr, path, cls):
            return True
        return any(self.expression_asserts(child, path, cls)
                   for child in ast.iter_child_nodes(expr) if isinstance(child, ast.expr))

    def call_asserts(self, call: ast.Call, path: Path, cls: str | None) -> bool:
        name = _name(call.func)
        if name is None:
            return False
        if isinstance(call.func, ast.Attribute) and _name(call.func.value) == "pytest":
            return name in {"fail", *ASSERTING_CONTEXTS}
        if name in ASSERTING_CALLS:
            flag = ASSERTING_CALLS[name]
            if flag is None or any(k.arg == flag and _true(k.value) for k in call.keywords):
                return True
        return self.helper_asserts(call.func, name, path, cls)

    def helper_asserts(self, func: ast.expr, name: str, path: Path, cls: str | None) -> bool:
        module = self.module(path)
        if isinstance(func, ast.Name):
            if name in module.functions:
                return self.function_asserts(path, name, module.functions[name], None)
            if name in module.imported:
                source, original = module.imported[name]
                other = self.module(source) if source.exists() else None
                if other and original in other.functions:
                    return self.function_asserts(source, original, other.functions[original],
                                                 None)
            return False
        if (isinstance(func, ast.Attribute) and cls is not None
                and _name(func.value) in {"self", "cls"} and (cls, name) in module.methods):
            return self.function_asserts(path, f"{cls}.{name}", module.methods[(cls, name)],
                                         cls)
        return False


def _name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _true(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is True


def suite_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.parts)


def unasserted_tests(paths: list[Path]) -> list[str]:
    """Each test function (module-level or in a Test class) that can pass without
    asserting anything, as path::name."""
    scan = Scan()
    found = []
    for path in paths:
        module = scan.module(path)
        tests: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, str | None]] = [
            (name, func, None) for name, func in module.functions.items()]
        tests += [(f"{cls}.{name}", func, cls) for (cls, name), func in module.methods.items()
                  if cls.startswith("Test")]
        for name, func, cls in tests:
            if name.rpartition(".")[2].startswith("test_") and not scan.function_asserts(
                    path, name, func, cls):
                found.append(f"{_shown(path)}::{name}")
    return found


def test_every_test_has_an_assertion_that_can_fail() -> None:
    assert unasserted_tests(suite_files()) == []


SAMPLES = {
    "bare": ("def test_x():\n    f()\n", False),
    "assert": ("def test_x():\n    assert f()\n", True),
    "only in if": ("def test_x():\n    if f():\n        assert g()\n", False),
    "both branches": ("def test_x():\n    if f():\n        assert g()\n"
                      "    else:\n        assert h()\n", True),
    "only in loop": ("def test_x():\n    for a in f():\n        assert a\n", False),
    "raises": ("import pytest\ndef test_x():\n    with pytest.raises(E):\n        f()\n", True),
    "helper": ("def check(a):\n    assert a\ndef test_x():\n    check(f())\n", True),
    "helper in if": ("def check(a):\n    if a:\n        assert a\n"
                     "def test_x():\n    check(f())\n", False),
    "method helper": ("class TestA:\n    def _c(self):\n        assert f()\n"
                      "    def test_x(self):\n        self._c()\n", True),
    "check=True": ("def test_x():\n    labctl('up', check=True)\n", True),
    "check missing": ("def test_x():\n    labctl('up')\n", False),
    "in finally": ("def test_x():\n    try:\n        f()\n    finally:\n"
                   "        assert g()\n", True),
    "only in except": ("def test_x():\n    try:\n        f()\n    except E:\n"
                       "        assert g()\n", False),
    "loop over a literal": ("def test_x():\n    for a in (1, 2):\n        assert f(a)\n", True),
    "loop over a constant": ("A = (1, 2)\ndef test_x():\n    for a in A:\n        assert f(a)\n",
                             True),
    "after an early return": ("def test_x():\n    if f():\n        return\n    assert g()\n",
                              False),
    "nested def": ("def test_x():\n    def inner():\n        assert f()\n", False),
    "right of and": ("def check():\n    assert f()\ndef test_x():\n    g() and check()\n",
                     False),
}


@pytest.mark.parametrize("source, asserts", SAMPLES.values(), ids=SAMPLES.keys())
def test_the_scan_tells_asserting_tests_from_the_rest(tmp_path: Path, source: str,
                                                      asserts: bool) -> None:
    path = tmp_path / "test_sample.py"
    path.write_text(source)
    found = unasserted_tests([path])
    assert (found == []) is asserts, found
