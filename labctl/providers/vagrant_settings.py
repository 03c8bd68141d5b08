"""What `labctl up` chose for a Vagrant lab on libvirt, kept in LABDIR/vagrant-env.json:
each node's box and the libvirt driver. Every later Vagrant call of the lab (repair,
status, down) builds its plan (labctl.providers.vagrant_plan) with the same choices.

The file keeps its first format (the environment variables that carried the choices,
LABCTL_BOXES as a JSON string), so labs made before stay readable. Its existence also
tells `down` that the lab may have started libvirtd. It is data: read bounded, and only
well-formed values of the known keys are taken (anything else is as if not chosen).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from labctl import bounded
from labctl.store.state import atomic_write

DRIVERS = ("kvm", "qemu")
MAX_BOX_NAME = 200
MAX_BYTES = 64 << 10  # a box name per node: a few hundred bytes a lab
FILE_NAME = "vagrant-env.json"


@dataclass(frozen=True)
class VagrantSettings:
    boxes: dict[str, str] = field(default_factory=dict)  # node -> box (labctl/IMAGE-KEY)
    libvirt_driver: str = ""  # "kvm" | "qemu"; "" when not chosen

    def env(self) -> dict[str, str]:
        """As the environment variables the plan reads (LABCTL_BOXES, LABCTL_LIBVIRT_DRIVER)."""
        env = {}
        if self.boxes:
            env["LABCTL_BOXES"] = json.dumps(self.boxes, sort_keys=True)
        if self.libvirt_driver:
            env["LABCTL_LIBVIRT_DRIVER"] = self.libvirt_driver
        return env

    def to_json(self) -> str:
        return json.dumps(self.env(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> VagrantSettings:
        """The settings in `text`; BoundedError if it is not a JSON object. Values that are
        not what labctl writes are left out."""
        data = bounded.load_object(text, limit=MAX_BYTES)
        driver = data.get("LABCTL_LIBVIRT_DRIVER")
        return cls(boxes=_boxes(data.get("LABCTL_BOXES")),
                   libvirt_driver=driver if driver in DRIVERS else "")


def _boxes(raw: object) -> dict[str, str]:
    if not isinstance(raw, str):
        return {}
    try:
        boxes = bounded.load_object(raw)
    except ValueError:
        return {}
    # only a box is looked up by node name: other keys do no harm, bad names are left out
    return {node: name for node, name in boxes.items()
            if isinstance(name, str) and 0 < len(name) <= MAX_BOX_NAME
            and name.isprintable() and " " not in name}


def path_in(labdir: Path) -> Path:
    return labdir / FILE_NAME


def write(labdir: Path, settings: VagrantSettings) -> None:
    atomic_write(path_in(labdir), settings.to_json())


def read(labdir: Path) -> VagrantSettings:
    """The lab's settings; none chosen when the file is missing or not a JSON object."""
    try:
        return VagrantSettings.from_json(bounded.read_text(path_in(labdir), MAX_BYTES))
    except (OSError, ValueError):
        return VagrantSettings()
