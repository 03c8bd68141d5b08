"""libfabric's fi_pingpong over the verbs provider (RDMA) and the tcp provider, side by side.

Each provider/endpoint pair asked for gets its own fi_pingpong server, all started at
once on consecutive control ports (fi_pingpong serves one client, then exits); the client
runs the pingpongs one after another against them. One table: latency and bandwidth per
provider and endpoint type (MSG: connected, RDM: reliable datagrams).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from labctl.bounded import parse_float, parse_int
from labctl.errors import UsageError
from labctl.runners import example_spec
from labctl.runners.example_spec import ExampleSpec, RunContext
from labctl.runners.probes import ports_listening_probe

FABRIC_PORT = 47592  # fi_pingpong's own control port (-B on the server, -P on the client)
DEFAULT_SIZE = 4096
DEFAULT_ITERS = 100
# ofi_rxm sizes its MSG completion queue for FI_UNIVERSE_SIZE peers (256 by default): more
# entries than rxe's max_cqe (32767), so rxe refused it ("Unable to create verbs CQ",
# fi_enable -22). The pingpong has one peer; 16 fits every device.
ENV = ("env", "FI_UNIVERSE_SIZE=16")


@dataclass(frozen=True)
class Pingpong:
    provider: str  # fi_pingpong -p
    endpoint: str  # fi_pingpong -e: msg | rdm
    transport: str  # what the table shows


PINGPONGS: dict[str, Pingpong] = {
    "verbs-msg": Pingpong("verbs", "msg", "RDMA"),
    "verbs-rdm": Pingpong("verbs;ofi_rxm", "rdm", "RDMA"),
    "tcp-msg": Pingpong("tcp", "msg", "TCP"),
    "tcp-rdm": Pingpong("tcp", "rdm", "TCP"),
}


def chosen_pingpongs(ctx_or_value: RunContext | str | None) -> list[str]:
    """The provider/endpoint pairs asked for (--tests), each a known one."""
    return example_spec.chosen_tests("fabric", ctx_or_value, PINGPONGS, PINGPONGS)


def _ports(ctx: RunContext) -> list[int]:
    base = int(ctx.opt("port", FABRIC_PORT))
    ports = [base + i for i in range(len(chosen_pingpongs(ctx)))]
    if ports[-1] > 65535:
        raise UsageError(f"fabric: ports {base}..{ports[-1]} go past 65535 (a server per test)",
                         hint=f"use --port {65536 - len(ports)} or lower")
    return ports


def _args(ctx: RunContext, name: str) -> list[str]:
    pingpong = PINGPONGS[name]
    return ["fi_pingpong", "-p", pingpong.provider, "-e", pingpong.endpoint,
            "-S", str(ctx.opt("size", DEFAULT_SIZE)), "-I", str(ctx.opt("iters", DEFAULT_ITERS))]


def _server(ctx: RunContext) -> list[str]:
    lines = ["rc=0"]
    pairs = list(enumerate(zip(chosen_pingpongs(ctx), _ports(ctx), strict=True)))
    for i, (name, port) in pairs:
        call = shlex.join([*ENV, *_args(ctx, name), "-B", str(port)])
        lines.append(f"{call} >/tmp/labctl-fabric-{port}.log 2>&1 & p{i}=$!")
    for i, (name, port) in pairs:
        log = f"/tmp/labctl-fabric-{port}.log"
        lines.append(f"wait $p{i}; s=$?; echo 'labctl: test {name}'; cat {log}; "
                     f"if [ $s -eq 139 ] && grep -q usec/xfer {log}; then "
                     f"echo 'labctl: teardown-crash {name}'; s=0; fi; "
                     f"echo \"labctl: exit {name} $s\"; [ $s -eq 0 ] || rc=1")
    lines.append("exit $rc")
    return ["sh", "-c", "\n".join(lines)]


def _client(ctx: RunContext) -> list[str]:
    lines = ["rc=0"]
    for name, port in zip(chosen_pingpongs(ctx), _ports(ctx), strict=True):
        call = shlex.join([*ENV, *_args(ctx, name), "-P", str(port), ctx.server.address])
        lines.append(f"echo 'labctl: test {name}'; {call} 2>&1; s=$?; "
                     f"echo \"labctl: exit {name} $s\"; [ $s -eq 0 ] || rc=1")
    lines.append("exit $rc")
    return ["sh", "-c", "\n".join(lines)]


# --- output -----------------------------------------------------------------------------------
_MARK = re.compile(r"^labctl: (test|exit|teardown-crash) ([a-z0-9-]+)(?: (-?\d+))?$")
# Seen once in a siw pair, the four servers at once: the verbs;ofi_rxm server printed its
# full result, then died of SIGSEGV in its teardown (exit 139). Its figures stand; the row
# says it. Alone (fabric --tests verbs-rdm) it passed twice in a row.
TEARDOWN_CRASH = "the server crashed (SIGSEGV) in its teardown, after its results"
_HEADER = re.compile(r"^bytes\s+#sent\s+#ack\s+total\s+time\s+MB/sec\s+usec/xfer\s+Mxfers/sec")
# 4k      100     =100     800k        1.00s      0.82    5014.83       0.00
# the total column is not used (and may be "6.2m": fi_pingpong rounds it), so any word
_RESULT = re.compile(r"^(\d+[kmg]?)\s+(\d+)\s+=?(\d+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)\s*$")
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MAX_LINES = 2000


def _bytes(text: str) -> int:
    """fi_pingpong's sizes: 64, 4k, 1m (powers of 1024)."""
    suffix = text[-1] if text[-1] in "kmg" else ""
    return parse_int(text[: len(text) - len(suffix)], "a size") * _SCALE[suffix]


def parse_fabric(output: str) -> dict[str, Any]:
    """A row per provider/endpoint: size, iterations, one-way latency (usec/xfer: fi_pingpong's
    time over both directions' transfers) and MB/s; and the best RDMA and TCP figures."""
    rows: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    header = False
    for line in output.splitlines()[:MAX_LINES]:
        mark = _MARK.match(line)
        if mark:
            what, name = mark.group(1), mark.group(2)
            known = PINGPONGS.get(name)
            row = rows.setdefault(name, {
                "test": name, "transport": known.transport if known else "?",
                "provider": known.provider if known else "?",
                "endpoint": known.endpoint if known else "?", "status": "failed",
                "latency_us": None, "bw_mb_per_s": None, "reason": ""})
            if what == "test":
                current, header = row, False
            elif what == "teardown-crash":
                row["reason"] = TEARDOWN_CRASH
            else:
                ok = mark.group(3) == "0" and row["latency_us"] is not None
                row["status"] = "passed" if ok else "failed"
                if not ok and not row["reason"]:
                    row["reason"] = f"fi_pingpong exited with {mark.group(3) or '?'}"
                current = None
            continue
        if current is None:
            continue
        if _HEADER.match(line):
            header = True
            continue
        result = _RESULT.match(line) if header else None
        if result:
            current.update(size=_bytes(result.group(1)),
                           iterations=parse_int(result.group(2), "iterations"),
                           seconds=parse_float(result.group(5), "seconds"),
                           bw_mb_per_s=parse_float(result.group(6), "MB/sec"),
                           latency_us=parse_float(result.group(7), "usec/xfer"))
        elif line.strip() and not current["reason"] and not header:
            current["reason"] = line.strip()[:300]  # the stack's own message
    if not rows:
        return {}
    figures: dict[str, Any] = {"rows": list(rows.values())}
    for transport, prefix in (("RDMA", "rdma"), ("TCP", "tcp")):
        mine = [r for r in rows.values() if r["transport"] == transport
                and r["status"] == "passed"]
        if mine:
            figures[f"{prefix}_latency_us"] = min(r["latency_us"] for r in mine)
            figures[f"{prefix}_bw_mb_per_s"] = max(r["bw_mb_per_s"] for r in mine)
    figures["passed"] = sum(r["status"] == "passed" for r in rows.values())
    figures["failed"] = sum(r["status"] == "failed" for r in rows.values())
    return figures if figures["passed"] else {"rows": figures["rows"]}


FABRIC = ExampleSpec(
    name="fabric",
    variant="pingpong",
    server_argv=_server,
    client_argv=_client,
    parse=parse_fabric,
    parse_server=parse_fabric,
    devices=frozenset({"rxe", "siw"}),
    ready_probe=lambda ctx: ports_listening_probe(*_ports(ctx)),
    key_figure="rdma_latency_us",
    timeout=180.0,
    packages=("libfabric-bin",),
)
