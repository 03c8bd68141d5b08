"""A node's RDMA device counters (`rdma statistic show`: rxe's hw_counters such as
rcvd_seq_err, completer_retry_err, retry_exceeded_err, rcvd_rnr_err) and its kernel's TCP
counters (RetransSegs...: what siw's recovery shows), read in the node as untrusted
replies; and the change of both over a run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from typing_extensions import TypedDict  # pydantic reads only this TypedDict on 3.11

from labctl.errors import LabctlError
from labctl.lab.handle import LabHandle
from labctl.node.replies import read_reply
from labctl.nodeside.reply import shell_answer

NODE_SECONDS = 60.0
TCP_COUNTERS = ("ActiveOpens", "InSegs", "OutSegs", "RetransSegs", "InErrs", "OutRsts")
# One reply (nodeside/reply.py): {"rdma": `rdma -j statistic show`, "tcp": the two Tcp
# lines of /proc/net/snmp as strings, cut to the characters they hold}. siw has no
# counters: rdma prints [] and exits 1 ("Invalid argument").
_COMMAND = ["sh", "-c", shell_answer({
    "rdma": 'out=$(rdma -j statistic show 2>/dev/null); echo "${out:-[]}"',
    "tcp": "awk 'BEGIN { printf \"[\" } /^Tcp:/ { gsub(/[^A-Za-z0-9 -]/, \"\"); "
           "printf \"%s\\\"%s\\\"\", (n++ ? \", \" : \"\"), $0 } END { print \"]\" }' "
           "/proc/net/snmp",
})]
_HINT = "`labctl exec NODE -- rdma statistic show` shows what the node has"
_MAX_NAME = 64

Counters = dict[str, dict[str, int]]  # "rxe0/1" or "tcp" -> counter -> value


class CountersRecord(TypedDict):
    """`labctl counters NODE --json`."""

    lab: str
    node: str
    counters: Counters


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        return None
    return value


def parse_rdma(reply: Any) -> Counters:
    """`rdma -j statistic show`: one record per device port, counters as numbers."""
    found: Counters = {}
    if not isinstance(reply, list):
        return found
    for port in reply:
        if not isinstance(port, dict):
            continue
        name, number = port.get("ifname"), port.get("port")
        if not isinstance(name, str) or _count(number) is None or len(name) > _MAX_NAME:
            continue
        found[f"{name}/{number}"] = {
            key[:_MAX_NAME]: value for key, raw in port.items()
            if key not in ("ifname", "port") and (value := _count(raw)) is not None}
    return found


def parse_snmp_tcp(lines: list[str]) -> dict[str, int]:
    """The Tcp: header and value lines of /proc/net/snmp, the counters of TCP_COUNTERS."""
    if len(lines) != 2:
        return {}
    names, values = lines[0].split()[1:], lines[1].split()[1:]
    table = dict(zip(names, values, strict=False))
    return {k: int(table[k]) for k in TCP_COUNTERS
            if k in table and table[k].isdigit() and len(table[k]) < 20}


def read_counters(handle: LabHandle, node: str, timeout: float = NODE_SECONDS) -> Counters:
    """The node's counters, or LabctlError when it cannot be asked."""
    result = handle.run_in_netns(node, _COMMAND, timeout=timeout)
    reply = read_reply(result, sender=node, doing="read the counters of",
                       hint=_HINT.replace("NODE", node))
    if not isinstance(reply, dict):
        raise LabctlError(f"{node} sent unreadable counters (not an object)",
                          hint=_HINT.replace("NODE", node))
    rdma, tcp_lines = reply.get("rdma"), reply.get("tcp")
    counters = parse_rdma(rdma)
    if not handle.provider.capabilities.own_kernel:  # the engine's devices: keep the node's
        info = handle.node_state(node)
        own = info.rdma_dev if info else ""
        counters = {port: values for port, values in counters.items()
                    if port.rpartition("/")[0] == own}
    lines = tcp_lines if isinstance(tcp_lines, list) else []
    tcp = parse_snmp_tcp([line for line in lines if isinstance(line, str)])
    if tcp:
        counters["tcp"] = tcp
    return counters


def read_all(handle: LabHandle, nodes: list[str],
             timeout: float = NODE_SECONDS) -> dict[str, Counters | None]:
    """Each node's counters at once; None for a node that could not be read."""

    def one(node: str) -> Counters | None:
        try:
            return read_counters(handle, node, timeout)
        except LabctlError:
            return None

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return dict(zip(nodes, pool.map(one, nodes), strict=True))


def delta(before: Counters | None, after: Counters | None) -> Counters | None:
    """after - before for each counter in both (those that changed, plus zeros for the
    rest, so a reader sees which were read); None when either side is unknown."""
    if before is None or after is None:
        return None
    return {group: {key: value - before[group][key] for key, value in values.items()
                    if key in before[group]}
            for group, values in after.items() if group in before}


def changed(counters: Counters) -> Counters:
    """Only the counters that are not zero (what a change table shows)."""
    return {group: {k: v for k, v in values.items() if v}
            for group, values in counters.items() if any(values.values())}
