"""Host-side labctl runs a program to its end only through labctl.hostproc (a timeout
the caller gives, bounded output, a LabctlError naming the program): no module calls
subprocess.run, check_output, call, getoutput, os.system... itself. Long-lived processes
are started with subprocess.Popen only at the places listed below, each with its reason.

Code that runs on the nodes or on the Docker host VM (nodeside/, verbs/, and the files
labctl ships there as text) stays stdlib-only: it runs its own programs and never imports
hostproc."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import labctl
from labctl.node.env import NODE_PACKAGES

PACKAGE = Path(labctl.__file__).parent
HELPER = "hostproc.py"

# Ways to run a program to its end (or through a shell), in the modules that have them.
FORBIDDEN = {
    "subprocess": {"run", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve",
           "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
}

# subprocess.Popen outside hostproc: (file, enclosing function) -> why it is not a run.
POPEN_ALLOWED = {
    ("vm/machine.py", "QemuMachine.launch"):
        "qemu: the node itself, running for the lab's life in its own session",
    ("capture/process.py", "Capture._popen"):
        "a capture reader (tcpdump, or ssh to the VM's reader) that runs until stopped",
    ("lab/handle.py", "LabHandle.popen"):
        "a long-running command in a node (an example's server, the inspector's helper), "
        "stopped by its caller",
    ("lab/transfer.py", "_pipe"):
        "`tar | ssh` pipeline of `labctl cp`, bounded by its own timeout",
    ("lab/transfer.py", "_receive"):
        "the node's `tar -c` streamed into labctl's own unpacker, bounded by a timer",
    ("cli/logs.py", "_command"):
        "`labctl logs -f`: follows a container's log until Ctrl-C",
    ("images/builder.py", "_run_streamed"):
        "mmdebstrap and the image build steps: their lines are streamed as progress and "
        "to the build log",
    ("providers/vagrant.py", "VagrantProvider._vagrant_up"):
        "`vagrant up`: its lines are streamed as progress and to the lab's log",
    ("providers/docker.py", "ensure_node_image"):
        "`tar` of the image's root streamed into the engine's image import",
}


def _shipped_as_text() -> set[str]:
    """Files of labctl that other modules read as text and send to a node or the Docker
    host VM (`resources.files(...).joinpath("x.py")`, `Path(__file__).with_name(...)`):
    each "NAME.py" string constant naming a file of the package."""
    paths = list(PACKAGE.rglob("*.py"))
    names = [path.name for path in paths]
    # a name that several files have (__init__.py) names none of them
    files = {path.name: path for path in paths if names.count(path.name) == 1}
    named: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value in files and files[node.value] != path:
                named.add(str(files[node.value].relative_to(PACKAGE)))
    return named


SHIPPED = _shipped_as_text()


def node_side(rel: str) -> bool:
    return rel.split("/")[0] in NODE_PACKAGES or rel in SHIPPED


def host_modules() -> list[str]:
    return sorted(rel for path in PACKAGE.rglob("*.py")
                  if not node_side(rel := str(path.relative_to(PACKAGE))))


class _Finder(ast.NodeVisitor):
    """Uses of FORBIDDEN names and calls of subprocess.Popen, with where they are."""

    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # local name -> module (import subprocess as sp)
        self.names: dict[str, tuple[str, str]] = {}  # local name -> (module, attr)
        self.scope: list[str] = []
        self.forbidden: list[str] = []
        self.popens: list[str] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in FORBIDDEN:
                self.modules[alias.asname or alias.name] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in FORBIDDEN:
            for alias in node.names:
                self.names[alias.asname or alias.name] = (node.module, alias.name)
                if alias.name in FORBIDDEN[node.module]:
                    self.forbidden.append(f"line {node.lineno}: from {node.module} import "
                                          f"{alias.name}")

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def _target(self, node: ast.expr) -> tuple[str, str] | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in self.modules:
            return self.modules[node.value.id], node.attr
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        target = self._target(node)
        if target and target[1] in FORBIDDEN[target[0]]:
            self.forbidden.append(f"line {node.lineno}: {target[0]}.{target[1]}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if self._target(node.func) == ("subprocess", "Popen"):
            self.popens.append(".".join(self.scope) or "<module>")
        self.generic_visit(node)


def _find(rel: str) -> _Finder:
    path = PACKAGE / rel
    finder = _Finder()
    finder.visit(ast.parse(path.read_text(), str(path)))
    return finder


def test_the_node_side_is_found() -> None:
    """What runs on nodes or the VM is recognised (else it would have to use hostproc,
    which it cannot import there), and nothing of the host side is taken for it."""
    every = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")]
    for name in ("faultgate.py", "dockernet.py", "vmcapture.py", "portcheck.py"):
        assert [rel for rel in every if Path(rel).name == name and not node_side(rel)] == []
    assert not any(node_side(rel) for rel in ("hostproc.py", "lab/handle.py", "node/ssh.py"))


def test_host_side_runs_programs_only_through_hostproc() -> None:
    found = {rel: _find(rel).forbidden for rel in host_modules() if rel != HELPER}
    offenders = {rel: uses for rel, uses in found.items() if uses}
    assert offenders == {}, (
        "run host programs with labctl.hostproc.run (a timeout, bounded output, a "
        f"LabctlError with the program's stderr): {offenders}")


def test_popen_only_where_a_long_lived_process_is_listed() -> None:
    sites = {(rel, scope) for rel in host_modules() if rel != HELPER
             for scope in _find(rel).popens}
    unlisted = sorted(sites - POPEN_ALLOWED.keys())
    assert unlisted == [], (
        "a subprocess.Popen outside hostproc: use hostproc.run for a program run to its "
        f"end, or list a long-lived one in POPEN_ALLOWED with its reason: {unlisted}")
    stale = sorted(POPEN_ALLOWED.keys() - sites)
    assert stale == [], f"POPEN_ALLOWED lists places that start nothing now: {stale}"


def test_node_side_code_never_imports_hostproc() -> None:
    importers = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if not node_side(rel):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and "hostproc" in (
                    node.module + " " + " ".join(a.name for a in node.names)):
                importers.append(rel)
            if isinstance(node, ast.Import) and any("hostproc" in a.name for a in node.names):
                importers.append(rel)
    assert importers == []


@pytest.mark.parametrize("source, expected", [
    ("import subprocess\nsubprocess.run(['x'])\n", ["line 2: subprocess.run"]),
    ("import subprocess as sp\ndef f():\n    return sp.check_output(['x'])\n",
     ["line 3: subprocess.check_output"]),
    ("from subprocess import run\nrun(['x'])\n", ["line 1: from subprocess import run"]),
    ("import os\nos.system('x')\n", ["line 2: os.system"]),
    ("import subprocess\nrunner = subprocess.call\n", ["line 2: subprocess.call"]),
    ("import os\nos.path.join('a')\nimport subprocess\nsubprocess.DEVNULL\n", []),
])
def test_the_finder_sees_each_way(source: str, expected: list[str]) -> None:
    finder = _Finder()
    finder.visit(ast.parse(source))
    assert finder.forbidden == expected


def test_the_finder_names_a_popen_by_its_function() -> None:
    finder = _Finder()
    finder.visit(ast.parse("from subprocess import Popen\nclass A:\n    def go(self):\n"
                           "        return Popen(['x'])\nPopen(['y'])\n"))
    assert finder.popens == ["A.go", "<module>"]
