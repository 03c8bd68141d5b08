"""The labels labctl puts on Docker engine objects (containers, overlay networks): state
the engine keeps, read back by status and down (as containerlab does).

Lab names are unique per state directory only, and one engine (a local one, the hosts of
a swarm) may serve labs of several: each object also carries its owner, the digest of its
lab directory's path that the lab's network namespace carries (labnet.owner_mark)."""

from __future__ import annotations

LABEL = "labctl"


def lab_labels(lab: str, owner: str) -> dict[str, str]:
    return {LABEL: "1", f"{LABEL}.lab": lab, f"{LABEL}.owner": owner}


def lab_selector(lab: str) -> dict[str, str]:
    """The engine's list filter: by lab name (the owner is checked on what comes back)."""
    return {"label": f"{LABEL}.lab={lab}"}


def owned_by(labels: dict[str, str] | None, lab: str, owner: str) -> bool:
    """Whether an object with `labels` is lab `lab`'s of this state directory: its owner
    label is `owner`, or it has none (made by an older labctl, which had no owners)."""
    labels = labels or {}
    return labels.get(f"{LABEL}.lab") == lab and labels.get(f"{LABEL}.owner", owner) == owner
