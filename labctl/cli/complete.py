"""Shell completion: lab names, node names, endpoints, shipped topologies, choices.

Completion runs on every <TAB>: a callback must be quick and must never raise (a
traceback would land in the user's shell), so each one returns [] on any error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

Completer = Callable[..., list[str]]


def _never_raises(func: Completer) -> Completer:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> list[str]:
        try:
            return [c for c in func(*args, **kwargs) if isinstance(c, str)]
        except Exception:  # completion must stay silent, whatever went wrong
            return []

    return wrapper


@_never_raises
def lab_names(incomplete: str) -> list[str]:
    from labctl.lab.labs import running_labs

    return [name for name in running_labs() if name.startswith(incomplete)]


def _chosen_lab(ctx: typer.Context | None) -> Any:
    """The lab the command line chose with --lab, else the only lab that is up."""
    from labctl.lab.labs import lab_of, running_labs

    name = ctx.params.get("lab") if ctx is not None else None
    if not name:
        labs = running_labs()
        if len(labs) != 1:
            return None
        name = labs[0]
    return lab_of(str(name))


@_never_raises
def node_names(ctx: typer.Context, incomplete: str) -> list[str]:
    lab = _chosen_lab(ctx)
    if lab is None:
        return []
    return [n.name for n in lab.nodes if n.name.startswith(incomplete)]


@_never_raises
def endpoints(ctx: typer.Context, incomplete: str) -> list[str]:
    """NODE:IF of every data interface of the chosen lab."""
    lab = _chosen_lab(ctx)
    if lab is None:
        return []
    found = [f"{n.name}:{i.name}" for n in lab.nodes for i in n.interfaces]
    return [e for e in found if e.startswith(incomplete)]


@_never_raises
def topologies(incomplete: str) -> list[str]:
    """Shipped topology names, then YAML files under the path typed so far."""
    from labctl.topology.catalog import SUFFIXES, shipped_names

    names = [n for n in shipped_names() if n.startswith(incomplete)]
    folder, _, stem = incomplete.rpartition("/")
    base = Path(folder or ".")
    if base.is_dir():
        for path in sorted(base.iterdir()):
            if not path.name.startswith(stem) or path.name.startswith("."):
                continue
            shown = f"{folder}/{path.name}" if folder else path.name
            if path.is_dir():
                names.append(shown + "/")
            elif path.suffix in SUFFIXES:
                names.append(shown)
    return names


def choices(*values: str) -> Completer:
    @_never_raises
    def complete(incomplete: str) -> list[str]:
        return [v for v in values if v.startswith(incomplete)]

    return complete


def comma_choices(*values: str) -> Completer:
    """A comma-separated list of choices (bench --impls c,tcp): completes its last item."""
    @_never_raises
    def complete(incomplete: str) -> list[str]:
        done, _, last = incomplete.rpartition(",")
        prefix = done + "," if done else ""
        taken = set(done.split(","))
        return [prefix + v for v in values if v.startswith(last) and v not in taken]

    return complete


def choice_metavar(*values: str) -> str:
    """How a choice option shows its values in --help: [auto|kvm|tcg]."""
    return "[" + "|".join(values) + "]"
