"""A restored node's identity, from labctl, on the node's second serial port.

`python3 identity.py /dev/ttyS1 /dev/ttyS0`, run by node-init.sh in a machine labctl saves
for restores (labctl/vm/saved.py): it puts the port in raw mode, says on the console that
it waits (labctl saves the machine then), and blocks. Each node restored from that machine
continues here: labctl sends one message, this writes it into the node, answers on the
port and exits; node-init.sh goes on as in a cold boot, with the node's own node.env.

The message: b"LABCTL-IDENTITY <length>\\n" then <length> bytes of JSON:
  {"files": [{"path": ..., "mode": ..., "data": base64}, ...],
   "macs": [[template MAC, node MAC], ...],   the NICs get the node's MACs (rxe's GUID
                                               derives from its netdev's MAC)
   "time": seconds since the epoch,           the clock (the saved machine's is old)
   "entropy": base64}                          mixed in, then the kernel's CRNG reseeded:
                                               every restored node starts from the same
                                               RNG state otherwise
The answer: b"ok\\n" or b"fail <why>\\n". Stdlib only, imports kept few (startup under TCG).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
import time
import tty

HEADER = b"LABCTL-IDENTITY "
MAX_MESSAGE = 256 << 10
WAITING = "labctl: waiting for identity"
RNDRESEEDCRNG = 0x5207  # _IO('R', 0x07), Linux 5.18+
ALLOWED = ("/etc/", "/root/.ssh/")


def read_exactly(fd: int, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = os.read(fd, count - len(data))
        if not chunk:
            raise ValueError("the port closed mid-message")
        data += chunk
    return data


def read_message(fd: int) -> dict:
    header = b""
    while not header.endswith(b"\n"):
        header += read_exactly(fd, 1)
        if len(header) > 64:
            raise ValueError(f"no identity header: {header[:64]!r}")
    if not header.startswith(HEADER):
        raise ValueError(f"no identity header: {header[:64]!r}")
    length = header[len(HEADER):].strip()
    if not length.isdigit() or int(length) > MAX_MESSAGE:
        raise ValueError(f"bad identity length {length[:20]!r}")
    message = json.loads(read_exactly(fd, int(length)))
    if not isinstance(message, dict):
        raise ValueError("the identity is not an object")
    return message


def write_file(path: str, mode: int, data: bytes) -> None:
    if not path.startswith(ALLOWED) or "/../" in path:
        raise ValueError(f"refusing to write {path!r}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.identity"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode & 0o7777)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode & 0o7777)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def set_macs(pairs: list) -> None:
    """Each NIC with a template MAC gets the node's (NICs are down: not yet configured)."""
    by_mac = {}
    for dev in os.listdir("/sys/class/net"):
        try:
            with open(f"/sys/class/net/{dev}/address") as f:
                by_mac[f.read().strip()] = dev
        except OSError:
            continue
    lines = []
    for old, new in pairs:
        if old not in by_mac:
            raise ValueError(f"no NIC with the saved machine's MAC {old}")
        lines.append(f"link set dev {by_mac[old]} address {new}\n")
    if lines:
        subprocess.run(["ip", "-batch", "-"], input="".join(lines).encode(), check=True)


def reseed(entropy: bytes) -> None:
    fd = os.open("/dev/urandom", os.O_WRONLY)
    try:
        os.write(fd, entropy)
        fcntl.ioctl(fd, RNDRESEEDCRNG)
    finally:
        os.close(fd)


def apply(message: dict) -> None:
    time.clock_settime(time.CLOCK_REALTIME, float(message["time"]))
    reseed(base64.b64decode(message["entropy"]))
    for item in message["files"]:
        write_file(str(item["path"]), int(item["mode"]), base64.b64decode(item["data"]))
    set_macs(list(message["macs"]))


def main(argv: list[str]) -> int:
    port, console = argv[1], argv[2]
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
    tty.setraw(fd)
    with open(console, "w") as out:
        out.write(WAITING + "\n")
    try:
        apply(read_message(fd))
    except (ValueError, KeyError, TypeError, OSError, subprocess.CalledProcessError) as exc:
        why = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        sys.stderr.write(f"identity: {why}\n")
        with open(console, "w") as out:
            out.write(f"labctl: identity failed: {why}\n")
        os.write(fd, f"fail {why}\n".encode())
        return 1
    os.write(fd, b"ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
