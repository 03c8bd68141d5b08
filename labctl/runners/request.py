"""One `labctl run` as the user asked for it, checked once before the lab is opened: the
run options (CheckedOptions, taken as they are by the runners), the pairs it goes
between, the lab, and how its results are shown. The CLI builds it from its options; the
command's own choices (an example's variant, a workload's transports) pick what runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.lab.handle import LabHandle, open_lab
from labctl.runners.example_spec import CheckedOptions
from labctl.runners.pairs import check_selection, select_pairs
from labctl.runners.schedule import Pair


@dataclass(frozen=True)
class PairChoice:
    """--pairs, --server, --client and --jobs."""

    pairs: str = "first"
    server: str | None = None
    client: str | None = None
    jobs: int = 1

    def check(self) -> None:
        """What is wrong without the lab (exit 2 before it is opened)."""
        check_selection(self.pairs, self.server, self.client, self.jobs)

    def select(self, handle: LabHandle) -> list[Pair]:
        return select_pairs(handle.lab, self.pairs, self.server, self.client)


@dataclass(frozen=True)
class RunRequest:
    options: CheckedOptions
    choice: PairChoice
    lab: str | None  # --lab: None for LABCTL_LAB or the only lab
    as_json: bool = False
    show_output: bool = False
    capture: bool = False
    capture_dir: Path | None = None

    def __post_init__(self) -> None:
        self.choice.check()

    def open(self) -> tuple[LabHandle, list[Pair]]:
        """The lab and the pairs the run goes between."""
        handle = open_lab(self.lab)
        return handle, self.choice.select(handle)
