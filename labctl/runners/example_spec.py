"""What an example is: programs, arguments, readiness, output parser, support matrix."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from labctl.errors import UsageError, short_repr


@dataclass(frozen=True)
class Endpoint:
    """One side of a run: its node, RDMA device, GID index and data address."""

    node: str
    device: str
    device_type: str  # rxe | siw
    gid_index: int | None
    address: str
    interface: str = ""  # the data interface the device is bound to (eth1)


@dataclass(frozen=True)
class RunContext:
    server: Endpoint
    client: Endpoint
    options: dict[str, Any] = field(default_factory=dict)

    def opt(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


ArgvBuilder = Callable[[RunContext], list[str]]
Parser = Callable[[str], dict[str, Any]]


def parse_output(parse: Callable[[str], Any], output: str, whose: str) -> tuple[Any, str]:
    """(parse(output), "") or, when the output is not what the parser takes (a figure of
    5,000 digits, "1.2.3 seconds": a BoundedError, a ValueError), (None, the reason): a
    run whose node printed that fails with the reason, never with a traceback."""
    try:
        return parse(output), ""
    except ValueError as exc:
        return None, f"cannot read {whose}'s output: {exc}"


@dataclass(frozen=True)
class ExampleSpec:
    name: str  # e.g. "pingpong"
    variant: str  # e.g. "rc" (the transport or test)
    server_argv: ArgvBuilder
    client_argv: ArgvBuilder
    parse: Parser  # client output -> figures
    devices: frozenset[str]  # device types it works on
    unsupported_reason: str = ""  # why not on the other device types
    # shell snippet run on the server node; exit 0 once the server listens
    ready_probe: Callable[[RunContext], str] | None = None
    timeout: float = 120.0
    key_figure: str = ""  # the figure a summary shows
    parse_server: Parser | None = None
    # Client outputs of a connection setup that failed although the server listened, which
    # a fresh server/client pair may pass: siw's initiator gives up after 10 s without the
    # MPA reply from a server slow to accept under TCG; perftest -R's connect lands in the
    # gap where its server listens again (rejected with reason 8 on rxe, refused on siw).
    # docs/reliability.md items 11 and 13. Empty: a failed setup is final.
    setup_failed: tuple[str, ...] = ()
    # Why a client that ran into its bound may pass with a fresh pair (a race of the program
    # with rxe, measured and documented in docs/reliability.md). Empty: a timeout is final.
    timeout_race: str = ""
    # Why a server still waiting after its client finished may pass with a fresh pair (a
    # race of the programs with rxe, docs/reliability.md). Empty: such a stall is final.
    server_stall_race: str = ""
    # A line the client prints once its connection is set up. A client that failed or ran
    # into its bound without it failed in connection setup, which a fresh pair may pass
    # (siw under a loaded host, docs/reliability.md). Empty: such a failure is final.
    connected_marker: str = ""
    # Why the example cannot cross a router ("": it can); a run whose client reaches the
    # server only through routers is skipped with this reason.
    one_segment: str = ""
    # Debian packages both nodes' images must hold (the workloads: docs/workloads.md). A
    # node whose image lacks one is refused before anything runs (exit 2), naming an image
    # that has them: labctl.runners.execute.check_image_packages.
    packages: tuple[str, ...] = ()
    # Why this run cannot be made between these devices with these options ("": it can),
    # for an example whose support depends on its options (qperf's UD tests on siw). A run
    # it refuses is skipped with that reason, as one on an unsupported device type.
    refuse: Callable[[RunContext], str] | None = None
    # Seconds the server may take to listen (labctl.runners.execute's wait); None: the
    # runner's default. UCX loads all its transport modules first (ib, rdmacm, rocm...):
    # over 30 s in a freshly booted node of a loaded TCG host.
    ready_seconds: float | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.variant}".strip()

    def supports(self, device_type: str) -> bool:
        return device_type in self.devices


# --- option values ---------------------------------------------------------------------------
# Every option value ends up in a program's argv in the node (ssh quotes each argument) and
# some in shell snippets (the ready probes, mckey's receiver script): they are checked here,
# once, for every caller (the CLI, `run all`, bench), before anything runs.
MAX_SECONDS = 86400.0
# option -> (lowest, highest, an example)
_INT_RANGES: dict[str, tuple[int, int, int]] = {
    "size": (1, 1 << 30, 4096),
    "iters": (1, 10**9, 100),
    "count": (1, 10**6, 10),
    "rx_depth": (1, 1 << 16, 500),
    "port": (1, 65535, 18515),
    "wait": (1, 3600, 20),
    "connections": (1, 1000, 4),
    # The range --mtu's help gives. The pingpongs themselves refuse a value that is not a
    # power of two (300): a failed run (exit 1) the integration tests rely on.
    "mtu": (256, 4096, 1024),
    "duration": (1, 600, 2),
    # The storage workloads' data (labctl.runners.storage): it sits in the nodes' RAM
    # (/dev/shm, tmpfs) twice on the client and once on the server, in 1 GiB nodes.
    "size_mib": (1, 128, 8),
}
_EXAMPLES = {"timeout": "60", "group": "239.1.1.1", "tests": "rc_lat,tcp_lat",
             **{k: str(v[2]) for k, v in _INT_RANGES.items()}}


def _bad(option: str, value: Any, what: str, hint: str | None = None) -> UsageError:
    flag = "--" + option.replace("_", "-")
    return UsageError(f"{flag} must be {what} (got {short_repr(value)})",
                      hint=hint or f"e.g. {flag} {_EXAMPLES.get(option, '1')}")


def check_seconds(option: str, value: Any) -> float:
    """A duration option: a finite number of seconds, more than 0 and at most a day."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(option, value, "a number of seconds")
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise _bad(option, value, f"a number of seconds above 0 and at most {MAX_SECONDS:.0f}")
    return float(value)


class CheckedOptions(dict[str, Any]):
    """Run options as check_options returned them: every value checked, and read-only, so
    that what a runner is given is still what was checked. A runner takes these as they
    are (checked()); a plain dict is checked first. `but` changes some, checked again."""

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("checked run options are read-only: use but(...)")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def but(self, **changes: Any) -> CheckedOptions:
        return check_options({**self, **changes})


def checked(options: dict[str, Any]) -> CheckedOptions:
    """`options` checked, once: options already checked are taken as they are."""
    return options if isinstance(options, CheckedOptions) else check_options(options)


def check_options(options: dict[str, Any]) -> CheckedOptions:
    """The run options with every value checked; `UsageError` (exit 2) on the first bad one.

    Unset options (None) stay unset; unknown keys are refused (a typo would silently do
    nothing)."""
    checked: dict[str, Any] = {}
    for option, value in options.items():
        if value is None:
            checked[option] = None
        elif option in _INT_RANGES:
            low, high, _ = _INT_RANGES[option]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _bad(option, value, f"a whole number from {low} to {high}")
            checked[option] = value
        elif option == "timeout":
            checked[option] = check_seconds(option, value)
        elif option == "group":
            checked[option] = check_multicast_group(value)
        elif option == "tests":
            checked[option] = check_test_list(value)
        elif option in ("verbose", "rdma_cm"):
            checked[option] = bool(value)
        else:
            raise UsageError(f"unknown run option {option!r}",
                             hint="options: " + ", ".join(sorted(KNOWN_OPTIONS)))
    return CheckedOptions(checked)


KNOWN_OPTIONS = frozenset({*_INT_RANGES, "timeout", "group", "verbose", "rdma_cm", "tests"})
_TEST_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
MAX_TESTS = 32


def check_test_list(value: Any) -> str:
    """A comma-separated list of test names (--tests): lowercase words, at most MAX_TESTS.
    Which names an example knows it checks itself (qperf, fabric); this is the form only,
    as the names reach argv and shell text in the node."""
    names = value.split(",") if isinstance(value, str) else []
    if not names or len(names) > MAX_TESTS or not all(_TEST_NAME.fullmatch(n) for n in names):
        raise _bad("tests", value, f"a comma-separated list of at most {MAX_TESTS} test names")
    return ",".join(dict.fromkeys(names))  # each test once, in the order given


def chosen_tests(program: str, ctx_or_value: RunContext | str | None,
                 known: Iterable[str], default: Iterable[str]) -> list[str]:
    """The tests of a workload asked for with --tests (comma-separated; `default` when
    none), each one of `known`; UsageError (exit 2) names the known ones."""
    value = ctx_or_value.opt("tests") if isinstance(ctx_or_value, RunContext) else ctx_or_value
    names = value.split(",") if value else list(default)
    known = list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"{program}: unknown test {', '.join(unknown)}",
                         hint=f"tests: {', '.join(known)}")
    return names


def check_multicast_group(value: Any) -> str:
    """An IPv4 multicast address, in canonical form (mckey binds to the IPv4 data address)."""
    what = "an IPv4 multicast address"
    try:
        address = ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address):
        raise _bad("group", value, what, "the lab's data links are IPv4 only: use an address "
                   "in 224.0.0.0/4, e.g. 239.1.1.1")
    if address is None or not address.is_multicast or str(address) != value:
        raise _bad("group", value, what, "use an address in 224.0.0.0/4, e.g. 239.1.1.1")
    return str(address)

