"""labctl's pytest plugin (entry point `pytest11`): a software RDMA lab for a test session.

    pytest --rdma-lab-topology two-node            # a shipped topology, or a file
    @pytest.mark.rdma_lab(topology="lab.yaml")     # or: a marker (relative to the test file)

    def test_it(rdma_lab):
        rdma_lab.host("node1").run("ibv_devices")
        record = rdma_lab.run_pair("server", "client {server_ip}", ready_port=18515)

The session-scoped `rdma_lab` fixture brings the lab up through labctl's lifecycle service
(the same `up` and `destroy` as the CLI) and removes it at the end, unless --rdma-lab-keep
(the next session then reuses it). A lab that cannot come up is an error of each test
that needs it, with labctl's message and hint. Conftests can override the session fixture
`rdma_lab_spec` (a LabSpec) to choose the lab in code. docs/workbench.md has the rest.

This module is loaded by every pytest run in an environment where labctl is installed, so
it imports only what its hooks need; testinfra is imported by `rdma_lab.host()` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import pytest

from labctl.errors import LabctlError, UsageError

if TYPE_CHECKING:
    from labctl.pytest_plugin.session import LabSpec, RdmaLab, RdmaLabError

__all__ = ["LabSpec", "RdmaLab", "RdmaLabError", "rdma_fault", "rdma_lab", "rdma_lab_spec"]
_LAZY = ("LabSpec", "RdmaLab", "RdmaLabError")


def __getattr__(name: str) -> Any:
    """LabSpec, RdmaLab, RdmaLabError from the session module, imported on first use: the
    lab machinery (pyroute2, the providers) costs every pytest run half a second."""
    if name in _LAZY:
        from labctl.pytest_plugin import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

MARKER = "rdma_lab"
_KEPT = pytest.StashKey[list[str]]()
T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rdma-lab", "software RDMA lab (labctl)")
    group.addoption("--rdma-lab-topology", metavar="PATH_OR_NAME", default=None,
                    help="topology of the session's lab: a file (relative to the current "
                    "directory) or a shipped topology's name (`labctl topologies`); "
                    "overrides rdma_lab markers")
    group.addoption("--rdma-lab-keep", action="store_true", default=False,
                    help="leave the lab up at the end (a later session with the same "
                    "topology reuses it; `labctl down --lab NAME` removes it)")
    group.addoption("--rdma-lab-name", metavar="NAME", default=None,
                    help="lab name instead of the topology's (one lab per name on a host)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(topology, name=None): the session's lab for tests that use the "
        "rdma_lab fixture (topology relative to the test file, or a shipped name)")
    config.stash[_KEPT] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    for name in config.stash.get(_KEPT, []):
        terminalreporter.write_line(
            f"rdma_lab: lab {name} was kept up; `labctl down --lab {name}` removes it")


def fail(exc: LabctlError) -> NoReturn:
    """A pytest failure with labctl's message and hint, without a traceback."""
    hint = f"\nhint: {exc.hint}" if exc.hint else ""
    pytest.fail(f"rdma_lab: {exc.message}{hint}", pytrace=False)


def _locate(arg: str | Path, base: Path) -> Path:
    from labctl.pytest_plugin.session import locate_topology

    return locate_topology(arg, base)


def _attempt(call: Callable[..., T], *args: Any) -> tuple[T | None, LabctlError | None]:
    """`call(*args)`, or the LabctlError it raised: fail() is called outside the except
    block, or pytest would show the error's traceback as the failure's context."""
    try:
        return call(*args), None
    except LabctlError as exc:
        return None, exc


def _from_markers(session: pytest.Session) -> tuple[Path, str | None] | None:
    """The topology (and name) the rdma_lab markers of the session's tests ask for: one,
    or none; several different ones are refused (one session, one lab)."""
    wanted: dict[tuple[Path, str | None], str] = {}
    for item in session.items:
        marker = item.get_closest_marker(MARKER)
        if marker is None or MARKER not in getattr(item, "fixturenames", ()):
            continue
        topology = marker.kwargs.get("topology", marker.args[0] if marker.args else None)
        if not isinstance(topology, str | Path):
            raise UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} needs topology=PATH_OR_NAME",
                             hint=f'e.g. @pytest.mark.{MARKER}(topology="two-node")')
        key = (_locate(topology, item.path.parent).resolve(), marker.kwargs.get("name"))
        wanted.setdefault(key, item.nodeid)
    if len(wanted) > 1:
        asked = "; ".join(f"{path} (by {nodeid})" for (path, _), nodeid in wanted.items())
        raise UsageError(f"the tests ask for several labs: {asked}",
                         hint="one session has one lab: run those tests in separate pytest "
                         "sessions, or give --rdma-lab-topology")
    return next(iter(wanted), None)


def spec_from_config(config: pytest.Config, session: pytest.Session) -> LabSpec:
    """The session's LabSpec from the options; else the lab LABCTL_LAB names, as it is
    (`labctl matrix` sets it for its steps); else from the tests' rdma_lab markers."""
    name = config.getoption("rdma_lab_name")
    keep = bool(config.getoption("rdma_lab_keep"))
    option = config.getoption("rdma_lab_topology")
    if option:
        from labctl.pytest_plugin.session import LabSpec

        return LabSpec(_locate(option, config.invocation_params.dir), name, keep)
    from labctl.store.labdir import default_lab

    if (named := default_lab()) is not None:
        from labctl.pytest_plugin.session import LabSpec

        return LabSpec(Path(), named, attach=True)
    found = _from_markers(session)
    if found is None:
        raise UsageError("no topology for the rdma_lab fixture",
                         hint="give --rdma-lab-topology PATH_OR_NAME, or mark the tests with "
                         f'@pytest.mark.{MARKER}(topology="two-node")')
    from labctl.pytest_plugin.session import LabSpec

    topology, marker_name = found
    return LabSpec(topology, name or marker_name, keep)


@pytest.fixture(scope="session")
def rdma_lab_spec(request: pytest.FixtureRequest) -> LabSpec:
    """Which lab the session gets; override it in a conftest to choose in code."""
    spec, error = _attempt(spec_from_config, request.config, request.session)
    if error is not None:
        fail(error)
    assert spec is not None
    return spec


@pytest.fixture(scope="session")
def rdma_lab(request: pytest.FixtureRequest, rdma_lab_spec: LabSpec) -> Iterator[RdmaLab]:
    """The session's lab, up; removed at the end unless kept."""
    from labctl.pytest_plugin.session import start_lab, stop_lab

    lab, error = _attempt(start_lab, rdma_lab_spec)
    if error is not None:
        fail(error)
    assert lab is not None
    yield lab
    if rdma_lab_spec.attach:  # not the session's to remove
        return
    if rdma_lab_spec.keep:
        request.config.stash[_KEPT].append(lab.name)
        return
    removed, error = _attempt(stop_lab, lab)
    if error is not None:
        fail(error)
    if rdma_lab_spec.after_down is not None and removed is not None:
        rdma_lab_spec.after_down(lab.name, removed)


@pytest.fixture
def rdma_fault(rdma_lab: RdmaLab) -> Callable[..., Any]:
    """`with rdma_fault("node2:eth1", "drop", opcodes=["ack"], count=3) as fault:` a labctl
    fault on the session's lab for the block (labctl/pytest_plugin/faults.py)."""
    from labctl.pytest_plugin.faults import injected_fault

    def inject(endpoint: str, action: str, **match: Any) -> Any:
        return injected_fault(rdma_lab.handle, endpoint, action, **match)

    return inject
