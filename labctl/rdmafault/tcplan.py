"""The tc commands that put one fault on a node's interface, and take it off again.

Layout on the interface (the node's egress, in the node's own kernel):
  root `prio` 1: with 16 bands, every priority mapped to band 1:1 (the traffic as before);
  each fault owns one band 1:B (B = 2..16), its `pref` B filters and a netem in 1:B.
A fault's filter is u32 (IPv4 without options; UDP 4791 for RoCE v2, TCP and a port for
siw) then act_bpf with the fault's gate (nodeside/faultgate.py), which answers per packet: apply
(pipe: on to the band's netem, or to the pedit that corrupts) or not (continue: u32 counts
it as not matched, the packet takes band 1:1). Corrupt on RoCE inverts the low PSN byte
after rxe computed the ICRC, so the receiver's ICRC check fails; on TCP it is netem's
corrupt (netem computes the checksum first, so TCP drops the segment).
"""

from __future__ import annotations

import shlex

from labctl.rdmafault.fault_spec import FaultSpec

ROOT = "1:"
FIRST_BAND, LAST_BAND = 2, 16  # band 1 keeps the traffic no fault picked
PIN_DIR = "/sys/fs/bpf/labctl-fault"
ROCE_V2_PORT = 4791
# IPv4 header (20) + UDP header (8) + BTH byte 11, the PSN's low byte: from the network
# header, where pedit's plain offsets count from.
PSN_LOW_BYTE_OFFSET = 20 + 8 + 11
ROOT_IS_NETEM_EXIT = 3  # the install script's exit when `link set --loss/--delay` owns root


def pin_name(fault_id: int) -> str:
    return f"f{fault_id}"


def netem_args(spec: FaultSpec) -> list[str] | None:
    """The band's netem for this fault, or None when the fault needs no netem."""
    if spec.action == "drop":
        return ["loss", "100%"]
    if spec.action in ("delay", "reorder"):
        # reorder: the chosen packets are held back, so the ones behind them overtake.
        return ["delay", str(spec.delay)]
    if spec.action == "duplicate":
        return ["duplicate", "100%"]
    if spec.transport == "tcp":  # corrupt
        return ["corrupt", "100%"]
    return None  # corrupt on RoCE: pedit, no netem


def _matches(spec: FaultSpec) -> list[list[str]]:
    """u32 match words, one list per filter (a TCP port: one for each direction)."""
    ipv4 = ["match", "u8", "0x45", "0xff", "at", "0"]
    if spec.transport == "roce":
        return [[*ipv4, "match", "ip", "protocol", "17", "0xff",
                 "match", "ip", "dport", str(ROCE_V2_PORT), "0xffff"]]
    tcp = [*ipv4, "match", "ip", "protocol", "6", "0xff"]
    if spec.tcp_port is None:
        return [tcp]
    return [[*tcp, "match", "ip", way, str(spec.tcp_port), "0xffff"]
            for way in ("dport", "sport")]


def filter_commands(ifname: str, band: int, fault_id: int, spec: FaultSpec) -> list[list[str]]:
    gate = ["action", "bpf", "object-pinned", f"{PIN_DIR}/{pin_name(fault_id)}/prog",
            "continue"]
    if netem_args(spec) is None:  # RoCE corrupt: flip the PSN byte, stay in band 1
        flowid = "1:1"
        after = ["action", "pedit", "munge", "offset", str(PSN_LOW_BYTE_OFFSET), "u8",
                 "invert", "pipe", "action", "csum", "udp"]
    else:
        flowid, after = f"1:{band}", []
    return [["tc", "filter", "add", "dev", ifname, "parent", ROOT, "prio", str(band),
             "protocol", "ip", "u32", *match, "flowid", flowid, *gate, *after]
            for match in _matches(spec)]


def _netem_handle(band: int) -> str:
    return f"{0x100 + band:x}:"


def _sh(argv: list[str]) -> str:
    return shlex.join(argv)


def install_script(ifname: str, band: int, fault_id: int, spec: FaultSpec) -> str:
    """sh script: the root prio when missing (refused over `link set`'s netem), the band's
    netem and the filters. Stops at the first failure (set -e)."""
    dev = shlex.quote(ifname)
    priomap = " ".join(["0"] * 16)
    lines = [
        "set -e",
        f"root=$(tc qdisc show dev {dev} root)",
        'case "$root" in',
        '  "qdisc prio 1: root"*) ;;',
        f'  "qdisc netem"*) echo "the root qdisc of {ifname} is link set\'s netem" >&2; '
        f"exit {ROOT_IS_NETEM_EXIT} ;;",
        f"  *) tc qdisc replace dev {dev} root handle 1: prio bands {LAST_BAND} "
        f"priomap {priomap} ;;",
        "esac",
    ]
    netem = netem_args(spec)
    if netem is not None:
        lines.append(_sh(["tc", "qdisc", "replace", "dev", ifname, "parent", f"1:{band}",
                          "handle", _netem_handle(band), "netem", *netem]))
    lines += [_sh(cmd) for cmd in filter_commands(ifname, band, fault_id, spec)]
    return "\n".join(lines) + "\n"


def remove_script(ifname: str, band: int, last_on_interface: bool) -> str:
    """sh script taking one band's fault off (each step may find nothing: not an error);
    with the interface's last fault, the root prio goes too (the kernel's default again)."""
    dev = shlex.quote(ifname)
    lines = [f"tc filter del dev {dev} parent 1: prio {band} 2>/dev/null || true",
             f"tc qdisc replace dev {dev} parent 1:{band} handle {_netem_handle(band)} "
             "pfifo 2>/dev/null || true"]
    if last_on_interface:
        lines.append(f'case "$(tc qdisc show dev {dev} root)" in "qdisc prio 1: root"*) '
                     f"tc qdisc del dev {dev} root ;; esac")
    return "\n".join(lines) + "\n"
