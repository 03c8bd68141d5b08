"""rping on siw (7.x kernel, TCG) stalls about one run in ten once connected: the server
waits for the client's next step of the exchange (its buffer advertisement, or the first
RDMA READ's completion), the client prints nothing and runs into its bound, and its exit
disconnects the server ("wait for RDMA_READ_ADV state 10", "wait for RDMA_READ_COMPLETE
state 10": 10 is rping's DISCONNECTED). docs/reliability.md item 14. The live siw tests
allow that stall, by this signature only, twice in a row."""

from __future__ import annotations

import re
from typing import Any

SIW_STALL = re.compile(r"wait for RDMA_(READ|WRITE)_(ADV|COMPLETE) state 10")
RPING_ATTEMPTS = 3


def siw_stall(record: dict[str, Any]) -> str:
    """The stall's words when a failed rping record is that stall, else ""."""
    found = SIW_STALL.search(record["server_output"])
    timed_out = record["reason"].startswith("client exited with 124")
    return found.group(0) if found and timed_out else ""
