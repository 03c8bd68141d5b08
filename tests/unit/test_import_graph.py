"""labctl's modules import each other without a cycle (module-level and function-level
imports alike: an import hidden inside a function still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

import labctl

PACKAGE = Path(labctl.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """labctl module -> the labctl modules it imports (anywhere in its source)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.add(base)
                # `from labctl.lab import ssh` imports the module labctl.node.ssh
                targets.update(f"{base}.{a.name}" for a in node.names
                               if f"{base}.{a.name}" in files)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_labctl_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_sees_function_level_imports_and_cycles() -> None:
    graph = import_graph()
    # capture/target.py imports the Docker host's modules inside a function
    assert "labctl.dockerhost.engine" in graph["labctl.capture.target"]
    assert "labctl.node.ssh" in graph["labctl.vm.machine"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_provider_imports_another_providers_private_names() -> None:
    private = []
    for folder, imported_from in (("providers", "labctl.providers."),
                                  ("dockerhost", "labctl.")):
        paths = list((PACKAGE / folder).glob("*.py"))
        assert paths, folder
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        imported_from):
                    private += [f"{folder}/{path.name} imports {a.name} from {node.module}"
                                for a in node.names if a.name.startswith("_")]
    assert private == []
