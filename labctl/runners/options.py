"""What each `labctl run` command takes, declared once: its options (flags, type, default,
help, metavar) and how their values pick the catalogue entry (labctl.runners.examples).

The CLI makes its typer commands from this table (labctl/cli/run.py) and adds what every
run command takes besides (--json, --capture, --capture-dir, --lab). Adding an example's
command: an entry in RUN_COMMANDS whose name is the catalogue name; an option the runners
read is a key of check_options (labctl.runners.example_spec), checked as it is parsed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labctl.errors import UsageError
from labctl.runners.example_spec import KNOWN_OPTIONS
from labctl.runners.examples import (
    ATOMIC_PERFTESTS,
    EXAMPLES,
    IMPLS,
    MCKEY_GROUP,
    PERFTESTS,
    pingpong_variant,
)
from labctl.runners.fabric import FABRIC_PORT, PINGPONGS, chosen_pingpongs
from labctl.runners.qperf import (
    DEFAULT_DURATION,
    DEFAULT_TESTS,
    QPERF_PORT,
    QPERF_TESTS,
    chosen_tests,
)
from labctl.runners.schedule import MAX_JOBS

REQUIRED: Any = ...  # the default of an option (or argument) that must be given


@dataclass(frozen=True)
class RunOption:
    """One option of a run command. `name` is the parameter's name and, for an option the
    runners read (a key of check_options), the key of its value in the run options."""

    name: str
    flags: tuple[str, ...]  # ("--size", "-s"); () for a positional argument
    value_type: type
    help: str
    default: Any = None
    metavar: str | None = None  # None with choices: [a|b|c]
    choices: tuple[str, ...] = ()  # what shell completion offers
    completes_nodes: bool = False  # shell completion offers the lab's nodes
    bounds: tuple[int, int] | None = None  # a whole number the runners do not read
    leading: bool = False  # shown before --server and --client

    @property
    def is_run_option(self) -> bool:
        return self.name in KNOWN_OPTIONS

    def but(self, help: str = "", **changes: Any) -> RunOption:
        """This option as one command takes it: another help text, default..."""
        if help:
            changes["help"] = help
        return dataclasses.replace(self, **changes)


# --- the options several commands share (each command may give its own help and default) ---
SERVER = RunOption("server", ("--server",), str, "Server node (default: the first node with "
                   "an RDMA device).", metavar="NODE", completes_nodes=True)
CLIENT = RunOption("client", ("--client",), str, "Client node (default: the next node with "
                   "an RDMA device).", metavar="NODE", completes_nodes=True)
TIMEOUT = RunOption("timeout", ("--timeout",), float, "Seconds before a run counts as failed.",
                    metavar="SECONDS")
PAIRS = RunOption("pairs", ("--pairs",), str, "Node pairs: first (the two nodes picked as "
                  "without --pairs), adjacent (every pair sharing a segment), all (every pair; "
                  "those without an IP path are skipped) or A:B,C:D (server:client).",
                  default="first", metavar="first|adjacent|all|A:B,C:D",
                  choices=("first", "adjacent", "all"))
JOBS = RunOption("jobs", ("--jobs", "-j"), int, "With --pairs: runs at once at most (runs "
                 "that share a node never overlap).", default=1, metavar="COUNT",
                 bounds=(1, MAX_JOBS))
SIZE = RunOption("size", ("--size", "-s"), int, "Message size in bytes (-S).",
                 metavar="BYTES")
ITERS = RunOption("iters", ("--iters", "-n"), int, "Number of exchanges.", metavar="COUNT")
COUNT = RunOption("count", ("--count", "-c"), int, "Messages each way (-C).", default=10,
                  metavar="COUNT")
PORT = RunOption("port", ("--port", "-p"), int, "Port the server listens on.", metavar="PORT")
CONNECTIONS = RunOption("connections", ("--connections",), int, "Connections (-c).",
                        metavar="COUNT")

ALL_PERFTESTS = (*PERFTESTS, *ATOMIC_PERFTESTS)
TRANSPORTS = ("rc", "uc", "ud", "srq")  # --transport's choices (checked in pingpong)

Values = dict[str, Any]


@dataclass(frozen=True)
class RunCommand:
    """`labctl run NAME`: its help, its own options in --help's order, its --server and
    --client, and (an example's command) which catalogue variant its values pick."""

    name: str
    doc: str
    options: tuple[RunOption, ...]
    variant: Callable[[Values], str] | None = None  # may refuse the values (UsageError)
    server: RunOption = SERVER
    client: RunOption = CLIENT
    # The C tool's own short options (its getopt string in rdma-core) and those of ours that
    # mean there what they mean here: a letter the tool uses for something else is not ours
    # (`run ucmatose -c` would read as ucmatose's connections, not our --count).
    c_letters: str = ""
    same_as_c: tuple[str, ...] = ()

    def flags_of(self, option: RunOption) -> tuple[str, ...]:
        """The option's flags without a short one the C tool gives another meaning."""
        return tuple(f for f in option.flags if f.startswith("--") or "/" in f
                     or f[1] not in self.c_letters or f in self.same_as_c)

    def run_options(self, values: Values) -> dict[str, Any]:
        """The values the runners read (check_options' keys), timeout last."""
        return {**{o.name: values[o.name] for o in self.options if o.is_run_option},
                "timeout": values["timeout"]}


def _pingpong(values: Values) -> str:
    transport, impl = values["transport"], values["impl"]
    client_impl = values["client_impl"] or impl
    for value in (impl, client_impl):
        if value not in IMPLS:
            raise UsageError(f"unknown implementation {value!r}", hint="use c or python")
    variant = transport
    if (impl, client_impl) != ("c", "c"):
        if transport != "rc":
            raise UsageError("the Python pingpong speaks RC only", hint="use --transport rc")
        variant = pingpong_variant(impl, client_impl)
    if ("pingpong", variant) not in EXAMPLES:
        raise UsageError(f"unknown transport {transport!r}", hint="use rc, uc, ud or srq")
    return variant


def _perftest(values: Values) -> str:
    if values["test"] not in ALL_PERFTESTS:
        raise UsageError(f"unknown perftest {values['test']!r}",
                         hint=f"use one of {', '.join(ALL_PERFTESTS)}")
    return str(values["test"])


def _fixed(variant: str) -> Callable[[Values], str]:
    return lambda values: variant


def _stream(name: str, doc: str) -> RunCommand:
    """rstream and riostream: the same options, another program."""
    return RunCommand(name, doc, (
        COUNT.but("Transfers (-C).", default=100),
        SIZE.but("Transfer size in bytes (-S).", default=4096),
        PORT,
    ), _fixed("rsocket"), c_letters=RSTREAM_LETTERS, same_as_c=("-p",))


# The C tools' getopt strings (rdma-core's libibverbs/examples/*.c, librdmacm/examples/*.c).
PINGPONG_LETTERS = "p:d:i:s:m:r:n:l:eg:oOPtcjNU"  # ibv_rc_pingpong (uc, ud, srq: fewer)
RSTREAM_LETTERS = "s:b:f:B:i:I:C:S:p:k:T:"  # rstream; riostream has the same but -k

_IMPL_HELP = ("Server implementation (and the client's unless --client-impl): c "
              "(ibv_rc_pingpong) or python (labctl.nodeside.pingpong on pyverbs). RC only.")

# The example commands, in `labctl run --help`'s order; each name is a catalogue name.
RUN_COMMANDS: tuple[RunCommand, ...] = (
    RunCommand("pingpong", "ibv_{rc,uc,ud,srq}_pingpong between two nodes (GID index chosen "
               "automatically);\nwith --impl python, labctl's Python RC pingpong, alone or "
               "against the C one.", (
                   RunOption("transport", ("--transport", "-t"), str, "rc, uc, ud or srq.",
                             default="rc", choices=TRANSPORTS, leading=True),
                   RunOption("impl", ("--impl",), str, _IMPL_HELP, default="c",
                             choices=IMPLS, leading=True),
                   RunOption("client_impl", ("--client-impl",), str, "Client implementation: "
                             "c or python (default: as --impl).", choices=IMPLS, leading=True),
                   SIZE.but("Message size in bytes."),
                   ITERS,
                   RunOption("mtu", ("--mtu", "-m"), int, "Path MTU (256..4096).",
                             metavar="BYTES"),
                   RunOption("rx_depth", ("--rx-depth",), int, "Receives posted at a time.",
                             metavar="COUNT"),
                   PORT.but("TCP port of the exchange (18515)."),
               ), _pingpong, c_letters=PINGPONG_LETTERS, same_as_c=("-p", "-s", "-m", "-n")),
    RunCommand("rping", "rping (RDMA CM, RC, RDMA READ/WRITE) between two nodes; rxe and siw.", (
        COUNT.but("Pings (rping -C)."),
        SIZE.but("Ping data size (rping -S)."),
        PORT.but("RDMA CM port (rping -p)."),
        RunOption("verbose", ("--verbose/--quiet", "-v"), bool,
                  "rping -v: print (and count) each ping.", default=True),
    ), _fixed("rc"), c_letters="a:I:Pp:C:S:t:scvVdq", same_as_c=("-p", "-v")),
    RunCommand("perftest", "A perftest benchmark (-d and -x chosen automatically; -R on "
               "siw); the atomic tests\non rxe only (siw has no atomics).", (
                   RunOption("test", (), str, f"One of: {', '.join(ALL_PERFTESTS)}.",
                             default=REQUIRED, metavar="TEST", choices=ALL_PERFTESTS,
                             leading=True),
                   ITERS.but("Iterations (perftest -n).", default=100),
                   SIZE.but("Message size (perftest -s)."),
                   RunOption("rdma_cm", ("--rdma-cm", "-R"), bool,
                             "Connect through RDMA CM (always on siw).", default=False),
                   PORT.but("Exchange port (perftest -p)."),
               ), _perftest),
    RunCommand("mckey", "mckey (RDMA CM multicast over UD) with a bounded wait; reports "
               "delivered/expected.", (
                   COUNT.but("Messages expected by the receiver.", default=4),
                   RunOption("group", ("--group",), str, f"Multicast address (default "
                             f"{MCKEY_GROUP}; with --pairs, pair N uses 239.1.N.1).",
                             metavar="IP"),
                   RunOption("wait", ("--wait",), int, "Seconds the receiver waits at most.",
                             default=20, metavar="SECONDS"),
                   RunOption("one_qp", ("--one-qp",), bool, "Send all messages from one QP "
                             "(mckey -C N): on rxe only the first arrives.", default=False),
               ), lambda values: "ud-1qp" if values["one_qp"] else "ud",
               server=SERVER.but("Receiver node (default: the first)."),
               client=CLIENT.but("Sender node (default: the second)."),
               c_letters="m:M:sb:c:C:S:p:ol"),
    RunCommand("rdma-server", "librdmacm's rdma_server/rdma_client: connect, one send and "
               "receive; rxe and siw.", (PORT,), _fixed("rc"), c_letters="s:p:",
               same_as_c=("-p",)),
    RunCommand("udaddy", "udaddy: UD datagrams through RDMA CM (address resolution, no "
               "connection); rxe only.", (COUNT, SIZE), _fixed("ud"),
               c_letters="s:b:c:C:S:t:p:P:f:"),
    RunCommand("ucmatose", "ucmatose: several RC connections through RDMA CM, sends both "
               "ways; rxe and siw.", (CONNECTIONS.but(default=4), COUNT, SIZE, PORT),
               _fixed("rc"), c_letters="s:b:f:P:c:C:S:t:p:a:m", same_as_c=("-p",)),
    RunCommand("cmtime", "cmtime: the time each step of RDMA CM connection setup takes; rxe "
               "only.", (CONNECTIONS.but(default=10), PORT), _fixed("rc"),
               c_letters="B:b:C:c:Lm:n:P:p:q:r:S:t:", same_as_c=("-p",)),
    _stream("rstream", "rstream: socket calls over rsockets (RDMA underneath); rxe only."),
    _stream("riostream", "riostream: rsockets with riomap/riowrite (RDMA writes); rxe and "
            "siw."),
    RunCommand("rcopy", "rcopy: a file made in the client node copied over rsockets, "
               "compared on arrival.", (SIZE.but("Bytes of the file copied.", default=65536),
                                        PORT), _fixed("rsocket"), c_letters="p:",
               same_as_c=("-p",)),
)


def _qperf(values: Values) -> str:
    chosen_tests(values["tests"])  # an unknown test: exit 2 before the lab is opened
    return "rdma-tcp"


def _fabric(values: Values) -> str:
    chosen_pingpongs(values["tests"])
    return "pingpong"


WORKLOAD_COMMANDS: tuple[RunCommand, ...] = (
    RunCommand("qperf", "qperf: RDMA (RC through RDMA CM) against TCP latency and bandwidth, "
               "one table;\ntests a device cannot run show as unsupported, with why.", (
                   RunOption("tests", ("--tests",), str, "Comma-separated qperf tests (default "
                             f"{', '.join(DEFAULT_TESTS)}); known: {', '.join(QPERF_TESTS)}.",
                             metavar="TEST"),
                   RunOption("duration", ("--duration",), int, "Seconds each test runs "
                             f"(qperf -t; default {DEFAULT_DURATION}).", metavar="SECONDS"),
                   SIZE.but("Message size in bytes (qperf -m; default: qperf's per test)."),
                   PORT.but(f"qperf's control port (-lp; default {QPERF_PORT})."),
               ), _qperf),
    RunCommand("fabric", "libfabric's fi_pingpong over the verbs provider (MSG and RDM through "
               "ofi_rxm)\nand over tcp, side by side: latency and bandwidth.", (
                   RunOption("tests", ("--tests",), str, "Comma-separated provider-endpoint "
                             f"pairs (default all): {', '.join(PINGPONGS)}.",
                             metavar="TEST"),
                   SIZE.but("Message size in bytes (fi_pingpong -S).", default=4096),
                   ITERS.but("Iterations (fi_pingpong -I).", default=100),
                   PORT.but(f"First control port (-B/-P; default {FABRIC_PORT}; a server "
                            "per test on consecutive ports)."),
               ), _fabric),
)
RUN_COMMANDS = (*RUN_COMMANDS, *WORKLOAD_COMMANDS)

# `labctl run custom`: your own commands run like an example (labctl.runners.custom).
CUSTOM_COMMAND = RunCommand(
    "custom", "Your own server and client commands between two nodes, run like the built-in\n"
    "examples (readiness, timeout, output, exit 1 on failure, --json record). Without\n"
    "--ready/--ready-port the client starts 1 s after the server. The server must end by\n"
    "itself once the client is done.", (
        RunOption("server_cmd", ("--server-cmd",), str, "Server command: shell text run with "
                  "`sh -c` in the server node; placeholders {server_ip} {client_ip} {device} "
                  "{gid_index} {port} are filled in, quoted.", default=REQUIRED,
                  metavar="'CMD'", leading=True),
        RunOption("client_cmd", ("--client-cmd",), str, "Client command, as --server-cmd, run "
                  "in the client node once the server is ready.", default=REQUIRED,
                  metavar="'CMD'", leading=True),
        RunOption("ready", ("--ready",), str, "Shell probe run in the server node until it "
                  "exits 0 (the server is ready); placeholders as --server-cmd.",
                  metavar="'PROBE'"),
        RunOption("ready_port", ("--ready-port",), int, "The server is ready once something "
                  "listens on this TCP port.", metavar="PORT", bounds=(1, 65535)),
        PORT.but("The value of {port} (18515)."),
    ))

# `labctl run all`: the whole catalogue between the pair(s) (labctl.runners.matrix).
ALL_COMMAND = RunCommand(
    "all", "Every example the two nodes' devices support, one summary; exit 1 on a failure.",
    (ITERS.but("Iterations of each pingpong and perftest (small: TCG is slow).",
               default=100),))

# --- the workloads (docs/workloads.md): real RDMA software on trixie-workloads nodes ---------
UCX_TESTS = ("tag_lat", "tag_bw", "both")
UCX_TRANSPORTS = ("rdma", "tcp", "both")
UCX_COMMAND = RunCommand(
    "ucx", "UCX's ucx_perftest between two nodes: tag-matching latency (tag_lat) and\n"
    "bandwidth (tag_bw) over RDMA (UCX_TLS=rc_verbs on the rxe device) and over TCP (eth1),\n"
    "one table. rxe only for RDMA: UCX does not support iWARP (siw).", (
        RunOption("test", ("--test",), str, "tag_lat, tag_bw or both.", default="both",
                  choices=UCX_TESTS, leading=True),
        RunOption("transport", ("--transport",), str, "rdma, tcp or both.", default="both",
                  choices=UCX_TRANSPORTS, leading=True),
        SIZE.but("Message size (ucx_perftest -s; default 8 for tag_lat, 65536 for tag_bw)."),
        ITERS.but("Iterations (ucx_perftest -n; default 500 for tag_lat, 100 for tag_bw)."),
        PORT.but("ucx_perftest's exchange port (-p, 13337)."),
    ))
NODES = RunOption("nodes", ("--nodes",), str, "Nodes, comma-separated (default: every node "
                  "with an RDMA device).", metavar="NODE,...")
UCX_INFO_COMMAND = RunCommand(
    "ucx-info", "What UCX sees in each node (ucx_info -d): its transports on the RDMA device,\n"
    "and in UCX's own words why it has none on siw.", (NODES,))
MPI_TRANSPORTS = ("ucx", "tcp", "both")
MPI_COMMAND = RunCommand(
    "mpi", "Open MPI across the lab's nodes (mpirun in the first): mpi4py's pingpong between\n"
    "ranks 0 and 1 and an allreduce over all ranks (its sum checked), over UCX on RDMA\n"
    "(rc_verbs) and over TCP, one table. Ranks are started by ssh over the data addresses\n"
    "with a key of the lab's own (docs/workloads.md).", (
        NODES.but("Nodes, comma-separated; mpirun runs in the first (default: every rxe "
                  "node).", completes_nodes=True),
        RunOption("transport", ("--transport",), str, "ucx, tcp or both.", default="both",
                  choices=MPI_TRANSPORTS, leading=True),
        RunOption("mpi_iters", ("--iters", "-n"), int, "Iterations of the pingpong (per size) "
                  "and of the allreduce.", default=50, metavar="COUNT", bounds=(1, 100000)),
        RunOption("max_size", ("--size", "-s"), int, "Largest pingpong message (sizes double "
                  "from 8).", default=1024, metavar="BYTES", bounds=(8, 1 << 24)),
    ))
# `labctl run nvmeof` and `labctl run nfs`: storage over RDMA beside storage over TCP, run as
# steps (labctl.runners.storage), one table for both transports.
STORAGE_TRANSPORT = RunOption("transport", ("--transport", "-t"), str, "rdma, tcp or both "
                              "(rdma, then tcp beside it for comparison).", default="both",
                              choices=("rdma", "tcp", "both"), leading=True)
SIZE_MIB = RunOption("size_mib", ("--size-mib",), int, "MiB written and read back (they "
                     "sit in the nodes' RAM).", default=8, metavar="MIB")
STORAGE_COMMANDS: tuple[RunCommand, ...] = (
    RunCommand("nvmeof", "NVMe over Fabrics: a kernel nvmet target (configfs) on the server, "
               "nvme discover/connect\non the client, a written and read-back pattern "
               "compared; over RDMA and TCP.", (STORAGE_TRANSPORT, SIZE_MIB)),
    RunCommand("nfs", "NFS 4.2 over RDMA (proto=rdma, port 20049) and over TCP: nfsd started "
               "by hand on the\nserver, a mount on the client, a written and read-back "
               "file compared.", (STORAGE_TRANSPORT, SIZE_MIB)),
)
