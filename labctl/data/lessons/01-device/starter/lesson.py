#!/usr/bin/env python3
"""Lesson 1: open an RDMA device and ask it what it is.

    python3 lesson.py [-d DEVICE]

Fill in the two TODOs; `labctl lesson check 1 --lang python` says what is still wrong."""

from __future__ import annotations

import argparse
import sys

from rdma_common import IB_PORT, open_device, todo  # noqa: F401 (IB_PORT: for TODO 2)

PORT_STATES = {0: "PORT_NOP", 1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED",
               4: "PORT_ACTIVE", 5: "PORT_ACTIVE_DEFER"}


def query_device(ctx):
    """TODO 1: the device's attributes (a pyverbs Context can query them)."""
    todo("query the device's attributes (ctx.query_device())")


def query_port(ctx):
    """TODO 2: port 1's attributes (IB_PORT)."""
    todo("query port 1 (ctx.query_port())")


def main() -> None:
    p = argparse.ArgumentParser(prog="lesson")
    p.add_argument("-d", metavar="DEVICE")
    name, ctx = open_device(p.parse_args().d)  # see rdma_common.py

    dev = query_device(ctx)
    port = query_port(ctx)

    # stored in network byte order: pyverbs hands over the bytes as a host-order number
    guid = f"{int.from_bytes(dev.node_guid.to_bytes(8, sys.byteorder), 'big'):016x}"
    print(f"hca_id: {name}")
    print("node_guid: " + ":".join(guid[i:i + 4] for i in range(0, 16, 4)))
    print(f"max_qp: {dev.max_qp}")
    print(f"max_cqe: {dev.max_cqe}")
    print(f"state: {PORT_STATES.get(port.state, 'invalid state')} ({port.state})")
    print(f"active_mtu: {128 << port.active_mtu} ({port.active_mtu})")


if __name__ == "__main__":
    main()
