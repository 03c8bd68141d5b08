"""Ready probes labctl's examples share: shell text run as root for the server node.

Every value in them is an int made here or passes through shlex.quote (options are also
checked before a run, example_spec.py)."""

from __future__ import annotations

import shlex


class NetnsProbe(str):
    """A probe of labctl's own that only reads the node's network namespace (its sockets,
    RDMA CM ids, multicast groups) with stock tools (ss, rdma, ip): a provider may run it
    from the node's host (Provider.netns_argv). A plain str probe, such as a user's
    `run custom --ready`, runs in the node itself."""


CM_LISTEN = NetnsProbe("rdma res show cm_id | grep -q LISTEN")


def listening_probe(port: int) -> NetnsProbe:
    """Exit 0 once something listens on TCP `port` in the node."""
    return ports_listening_probe(port)


def ports_listening_probe(*ports: int) -> NetnsProbe:
    """Exit 0 once something listens on every one of the TCP `ports` in the node."""
    return NetnsProbe(" && ".join(f"ss -Hltn {shlex.quote(f'sport = :{int(port)}')} | grep -q ."
                                  for port in ports))


def group_joined_probe(group: str) -> NetnsProbe:
    """Exit 0 once the node is a member of multicast `group` (its IGMP join shows)."""
    return NetnsProbe(f"ip maddr show | grep -qwF -e {shlex.quote(group)}")
