"""Are the swarm's ports reachable from here to a peer? Standard library only: `labctl
doctor` pipes this file to `python3 - PEER...` in a Docker host VM and reads its one line of
labctl's reply format (labctl/nodeside/reply.py).

TCP 2377 (cluster management) and 7946 (gossip): a connection that opens, or is refused
(the peer's kernel answered with a reset: nothing listens yet, but nothing filters), is
reachable; a timeout means a filter drops it. UDP 7946 and 4789 (VXLAN): a refusal (ICMP
port unreachable) proves the path; silence means open (a listener) or filtered, which
only a running swarm can tell apart.
"""

from __future__ import annotations

import json
import socket
import sys

TCP_PORTS = (2377, 7946)
UDP_PORTS = (7946, 4789)


def tcp(peer: str, port: int) -> str:
    try:
        with socket.create_connection((peer, port), timeout=3):
            return "open"
    except ConnectionRefusedError:
        return "reachable (closed)"
    except OSError as exc:
        return f"blocked ({exc.__class__.__name__})"


def udp(peer: str, port: int) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect((peer, port))
            sock.send(b"labctl-doctor")
            sock.recv(1)
            return "open"
        except ConnectionRefusedError:
            return "reachable (closed)"
        except TimeoutError:
            return "open or filtered"
        except OSError as exc:
            return f"blocked ({exc.__class__.__name__})"


# labctl's reply format (nodeside/reply.py; copied, as this file is sent alone: a unit
# test holds the copies to it)
REPLY_KEY, REPLY_VERSION = "labctl_reply", 1


def reply_line(data: object) -> str:
    return json.dumps({REPLY_KEY: REPLY_VERSION, "ok": True, "data": data}, separators=(",", ":"))


def main(peers: list[str]) -> None:
    result = {}
    for peer in peers:
        result[peer] = {f"{p}/tcp": tcp(peer, p) for p in TCP_PORTS}
        result[peer].update({f"{p}/udp": udp(peer, p) for p in UDP_PORTS})
    print(reply_line(result))


if __name__ == "__main__":
    main(sys.argv[1:])
