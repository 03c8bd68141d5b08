"""Parsers for the example programs' text output (unit-tested on captured runs)."""

from __future__ import annotations

import re
from typing import Any

from labctl.bounded import parse_float, parse_int

_BYTES = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$", re.M)
_ITERS = re.compile(r"^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$", re.M)
_ADDRESS = re.compile(r"^[ \t]*(local|remote) address: [^\n]*, GID (\S+)$", re.M)


def parse_pingpong(output: str) -> dict[str, Any]:
    """ibv_{rc,uc,ud,srq}_pingpong (and labctl's Python one): the closing two lines, and
    the GIDs both ends used (`local_gid`, `remote_gid`), as the program printed them."""
    figures: dict[str, Any] = {}
    for side, gid in _ADDRESS.findall(output):
        figures.setdefault(f"{side}_gid", gid)
    bytes_match = _BYTES.search(output)
    iters_match = _ITERS.search(output)
    if bytes_match:
        figures["bytes"] = parse_int(bytes_match.group(1), "bytes")
        figures["seconds"] = parse_float(bytes_match.group(2), "seconds")
        figures["mbit_per_sec"] = parse_float(bytes_match.group(3), "Mbit/sec")
    if iters_match:
        figures["iters"] = parse_int(iters_match.group(1), "iters")
        figures["usec_per_iter"] = parse_float(iters_match.group(3), "usec/iter")
    return figures


# --- rping ---------------------------------------------------------------------------------
_PING = re.compile(r"^(server )?ping data: rdma-ping-(\d+): ", re.M)
_CMA_ERROR = re.compile(r"^cma event (RDMA_CM_EVENT_\w+), error (-?\d+)", re.M)


def parse_rping(output: str) -> dict[str, Any]:
    """rping -v: one "ping data: rdma-ping-N: ..." line per completed ping (client), or
    "server ping data: ..." (server); a failed connection prints "cma event X, error N"."""
    figures: dict[str, Any] = {}
    pings = _PING.findall(output)
    if pings:
        figures["pings"] = len(pings)
        figures["last_ping"] = parse_int(pings[-1][1], "a ping's number")
    error = _CMA_ERROR.search(output)
    if error:
        figures["cm_error"] = f"{error.group(1)} ({error.group(2)})"
    if "DISCONNECT EVENT" in output:
        figures["disconnected"] = True
    return figures


# --- perftest ------------------------------------------------------------------------------
# Result columns in the order perftest prints them (the header words are not split-able).
_LAT_COLUMNS = ("bytes", "iterations", "t_min_usec", "t_max_usec", "t_typical_usec",
                "t_avg_usec", "t_stdev_usec", "p99_usec", "p99_9_usec")
_BW_COLUMNS = ("bytes", "iterations", "bw_peak", "bw_average", "msg_rate_mpps")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_SETTING_KEY = re.compile(r"[A-Za-z][\w .*/-]*")


def _setting(part: str) -> tuple[str, str] | None:
    """A "Key : value" setting (value without a tab), or None. Split at the colon rather than by one
    regex: a lazy key followed by `\\s*:` took seconds on a long line of spaces (the output
    comes from the node, which may print anything)."""
    key, colon, value = part.partition(":")
    key, value = key.strip(), value.strip()
    if not colon or not value or "\t" in value or not _SETTING_KEY.fullmatch(key):
        return None
    return key, value


def _number(text: str) -> int | float:
    return (parse_int(text, "a perftest figure") if text.lstrip("-").isdigit()
            else parse_float(text, "a perftest figure"))


def parse_perftest(output: str) -> dict[str, Any]:
    """ib_{send,write,read}_{lat,bw}: the result row under the "#bytes" header, plus the
    test name and the settings that matter (device, connection, GID index, RDMA CM)."""
    figures: dict[str, Any] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.endswith(" Test") and "test" not in figures and ":" not in stripped:
            figures["test"] = stripped
        for part in re.split(r"\t{2,}", line):  # two settings a line, tab-separated
            setting = _setting(part)
            if not setting:
                continue
            key, value = setting
            if key == "Device":
                figures["device"] = value
            elif key == "Connection type":
                figures["connection"] = value
            elif key == "GID index":
                figures["gid_index"] = parse_int(value, "GID index") if value.isdigit() else value
            elif key == "rdma_cm QPs":
                figures["rdma_cm"] = value == "ON"
            elif key == "Link type":
                figures["link_type"] = value
        if not stripped.startswith("#bytes"):
            continue
        columns = _LAT_COLUMNS if "t_typical" in stripped else _BW_COLUMNS
        unit = re.search(r"BW average\[([^\]]+)\]", stripped)
        if unit:
            figures["bw_unit"] = unit.group(1)  # "MiB/sec" (perftest 25) or "MB/sec"
        for row in lines[i + 1:]:
            values = row.split()
            if not values:
                continue
            if not _NUMBER.match(values[0]):
                if row.startswith("-"):
                    break
                continue  # e.g. the atomic latency test's "Correlation coefficient" note
            if not all(_NUMBER.match(v) for v in values):
                break
            figures.update(zip(columns, (_number(v) for v in values), strict=False))
            break
    return figures


# --- mckey ---------------------------------------------------------------------------------
_JOINED = re.compile(r"^mckey: joined dgid: (\S+)", re.M)
_STATUS = re.compile(r"^return status (-?\d+)", re.M)
_COUNTERS = re.compile(r"^labctl: expected (\d+) rdma_recvs (\d*) (\d*)$", re.M)


def parse_mckey(output: str) -> dict[str, Any]:
    """mckey (sender or receiver); on the receiver also labctl's counter line: how many
    receive completions the receiving rxe device made while mckey ran."""
    figures: dict[str, Any] = {}
    joined = _JOINED.findall(output)
    if joined:
        figures["joined"] = len(joined)
        figures["dgid"] = joined[0]
    if "data transfers complete" in output:
        figures["transfers_complete"] = True
    status = _STATUS.search(output)
    if status:
        figures["return_status"] = parse_int(status.group(1), "return status")
    counters = _COUNTERS.search(output)
    if counters:
        figures["expected"] = parse_int(counters.group(1), "expected receives")
        if counters.group(2) and counters.group(3):
            figures["delivered"] = (parse_int(counters.group(3), "rdma_recvs")
                                    - parse_int(counters.group(2), "rdma_recvs"))
    return figures


# --- librdmacm's other examples ------------------------------------------------------------
_END = re.compile(r"^(rdma_server|rdma_client): end (-?\d+)$", re.M)


def parse_rdma_server(output: str) -> dict[str, Any]:
    """rdma_server / rdma_client: one "start" line and "end N" (N is the return code)."""
    end = _END.search(output)
    return {"end": parse_int(end.group(2), "end status")} if end else {}


def parse_cmatose(output: str) -> dict[str, Any]:
    """udaddy and ucmatose: progress lines, "data transfers complete" and "return status N";
    a failure prints "PROGRAM: unable to ..." (e.g. a UD QP on siw)."""
    figures: dict[str, Any] = {}
    if "data transfers complete" in output:
        figures["transfers_complete"] = True
    status = _STATUS.search(output)
    if status:
        figures["return_status"] = parse_int(status.group(1), "return status")
    failure = re.search(r"^\w+: (unable to [^\n]*)$", output, re.M)
    if failure:
        figures["error"] = failure.group(1)
    return figures


_CMTIME_ROW = re.compile(r"^([a-z][a-z ]*[a-z])\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"
                         r"\s+(\d+)$", re.M)


def parse_cmtime(output: str) -> dict[str, Any]:
    """cmtime: the first table (connections with QPs). Per step: avg/iter, total(us),
    us/conn, sum(us), max(us), min(us); the figures kept are what a reader looks at."""
    figures: dict[str, Any] = {}
    table = output.split("qp_conn", 1)
    if len(table) < 2:
        return figures
    first = table[1].split("cm_conn", 1)[0]
    conns = re.match(r"\s+(\d+)", first)
    if conns:
        figures["connections"] = parse_int(conns.group(1), "connections")
    steps = {m.group(1): [parse_int(v, "a cmtime figure") for v in m.groups()[1:]]
             for m in _CMTIME_ROW.finditer(first)}
    if "full connect" in steps:
        figures["full_connect_us"] = steps["full connect"][1]  # total(us), all connections
        figures["full_connect_max_us"] = steps["full connect"][4]
    if "cm connect" in steps:
        figures["cm_connect_us_per_conn"] = steps["cm connect"][2] or steps["cm connect"][0]
    for name, key in (("create qp", "create_qp_us_per_conn"),
                      ("resolve addr", "resolve_addr_us_per_conn"),
                      ("resolve route", "resolve_route_us_per_conn")):
        if name in steps:
            figures[key] = steps[name][2]
    return figures


_STREAM = re.compile(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)"
                     r"\s+([\d.]+)$", re.M)


def parse_rstream(output: str) -> dict[str, Any]:
    """rstream / riostream: a result row under "name bytes xfers iters total time Gb/sec
    usec/xfer" (sizes like "4k", time with an "s")."""
    row = _STREAM.search(output)
    if not row:
        return {}
    return {"name": row.group(1), "size": row.group(2), "xfers": parse_int(row.group(3), "xfers"),
            "iters": parse_int(row.group(4), "iters"), "total": row.group(5),
            "seconds": parse_float(row.group(6), "seconds"),
            "gbit_per_sec": parse_float(row.group(7), "Gb/sec"),
            "usec_per_xfer": parse_float(row.group(8), "usec/xfer")}


_RCOPY = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Gb/sec$", re.M)
_RCOPY_CHECK = re.compile(r"^labctl: received (\d+) bytes, (identical|different)$", re.M)


def parse_rcopy(output: str) -> dict[str, Any]:
    """rcopy: the client's "N bytes in S seconds = G Gb/sec"; on the server labctl's line
    comparing the received file with the one the client sent."""
    figures: dict[str, Any] = {}
    sent = _RCOPY.search(output)
    if sent:
        figures.update(bytes=parse_int(sent.group(1), "bytes"),
                       seconds=parse_float(sent.group(2), "seconds"),
                       gbit_per_sec=parse_float(sent.group(3), "Gb/sec"))
    if "...done" in output:
        figures["done"] = True
    check = _RCOPY_CHECK.search(output)
    if check:
        figures["received_bytes"] = parse_int(check.group(1), "received bytes")
        figures["identical"] = check.group(2) == "identical"
    return figures
