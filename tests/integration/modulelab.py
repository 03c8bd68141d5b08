"""A test module's own lab, made one way for every provider.

`module_lab(...)` returns a module-scoped fixture: `labctl down` of what an interrupted
earlier run left, `labctl up` of the module's topology (from a fixture of the module), and
at the module's end `labctl down`, then the check that nothing of the lab is left on the
host (processes, netns, ssh masters, lab directory: leftovers.lab_leftovers) nor, where
the module says so, elsewhere (the Docker engines: leftovers.docker_leftovers), and that a
second `down` has nothing to do. The check is the fixture's, not a last test's: no test
depends on the order the module's tests run in.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from labctl.lab.handle import LabHandle
from labctl.store.labdir import LabDir
from tests.integration.conftest import labctl
from tests.integration.leftovers import lab_leftovers


class Labctl(Protocol):
    def __call__(self, *args: str, timeout: float = ...) -> subprocess.CompletedProcess[str]:
        ...


@dataclass(frozen=True)
class ModuleLab:
    name: str
    topology: Path
    up: subprocess.CompletedProcess[str]  # what `labctl up` printed
    handle: LabHandle


def module_lab(
    name: str,
    topology: str = "topology",
    *,
    up_args: Callable[[Path], Sequence[str]] = lambda topology: (),
    timeout: float = 900,
    requires: Sequence[str] = (),
    labctl_from: str | None = None,
    leftovers: Callable[[str], dict[str, list[str]]] | None = None,
    down_says: Sequence[str] = (),
    scope: str = "module",
) -> Any:
    """The fixture of lab `name`, up from the path the module's fixture `topology` gives
    (with the arguments `up_args` gives for that path; `timeout`: seconds for up and for
    down).

    `requires`: fixtures made before the lab and removed after it (a Docker host VM the
    module starts, libvirt's state before the lab). `labctl_from`: a fixture whose
    `.labctl(*args, timeout=...)` runs labctl (an installed wheel's), else the checkout's.
    `leftovers`: more of the lab that must be gone after down, by kind (lists, empty when
    gone). `down_says`: text `down` must print (what it removed). `scope`: "package" for
    one lab that a package's modules share (tests/integration/workloads)."""

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def lab(request: pytest.FixtureRequest) -> Iterator[ModuleLab]:
        for fixture in requires:
            request.getfixturevalue(fixture)
        path: Path = request.getfixturevalue(topology)
        run: Labctl = request.getfixturevalue(labctl_from).labctl if labctl_from else labctl
        run("down", "--lab", name, timeout=timeout)  # what an interrupted earlier run left
        try:
            started = time.monotonic()
            up = run("up", str(path), *up_args(path), timeout=timeout)
            assert up.returncode == 0, f"labctl up {path} exited {up.returncode}:\n{up.stderr}"
            print(f"\nlab {name}: up in {time.monotonic() - started:.0f} s")
            yield ModuleLab(name, path, up, LabHandle(LabDir(name)))
        finally:
            started = time.monotonic()
            down = run("down", "--lab", name, timeout=timeout)
            print(f"\nlab {name}: down in {time.monotonic() - started:.0f} s")
            assert_gone(name, down, run, leftovers, down_says)

    return lab


def assert_gone(name: str, down: subprocess.CompletedProcess[str], run: Labctl,
                leftovers: Callable[[str], dict[str, list[str]]] | None,
                down_says: Sequence[str]) -> None:
    """`down` passed and said what it removed, nothing of the lab is left, and a second
    `down --lab` finds no such lab (a usage error, exit 2, with its hint)."""
    assert down.returncode == 0, f"labctl down --lab {name}:\n{down.stdout}\n{down.stderr}"
    for words in down_says:
        assert words in down.stdout, down.stdout
    left = {**lab_leftovers(name), **(leftovers(name) if leftovers else {})}
    assert left == {kind: [] for kind in left}, f"lab {name} left {left}"
    again = run("down", "--lab", name, timeout=120)
    assert again.returncode == 2 and f"no lab named {name!r}" in again.stderr, (
        again.stdout + again.stderr)
    assert "hint: " in again.stderr and again.stdout == ""
