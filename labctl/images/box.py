"""Vagrant boxes for the libvirt provider, made from labctl's own node images.

No box is downloaded: the box is the node image itself, booted the way qemu nodes boot it
(the image's kernel and stage-1 initrd, root on /dev/vda). A box directory
(cache_root()/boxes/NAME-KEY, content-addressed like the image) holds:
  box.img          the image's root.ext4 converted to qcow2 (what vagrant-libvirt uploads)
  metadata.json    vagrant-libvirt's box metadata (format, virtual size)
  Vagrantfile      box defaults: ssh as root with the box key, direct kernel boot
  vmlinux, initrd  the image's kernel; its stage 1 with a box /init plus a payload (the box's
                   stage 2, labctl/images/box-init.sh, and the key's public half)
  labctl_box_key   the box's own ssh key (made at build time, never shared)
  labctl.box       the tar `vagrant box add` takes
libvirt runs qemu as libvirt-qemu, which cannot read files under /root (where Vagrant keeps
boxes when labctl runs as root), so the kernel and initrd are also copied to
/var/lib/libvirt/boot/labctl-KEY, libvirt's usual place for boot files, and the box's
Vagrantfile uses that copy when it is there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from labctl import bounded, hostproc
from labctl.data.recipes import node_recipe
from labctl.errors import LabctlError, short_repr
from labctl.images.builder import Image, build_image
from labctl.images.cpio import CpioWriter
from labctl.locks import blocking_lock
from labctl.nodeside import NODE_INIT
from labctl.paths import cache_root
from labctl.progress import Progress

BOX_VERSION = "1"
BOOT_ROOT = Path("/var/lib/libvirt/boot")
STAGE2 = "/usr/local/sbin/labctl-box-init"
# The image's stage 1 ends by starting the qemu node's stage 2 (NODE_INIT); the box starts
# its own.
BOX_CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"

BOX_VAGRANTFILE = """\
# labctl's Vagrant box (libvirt): the node image booted like a qemu node. Made by
# `labctl image box`; see docs/vagrant.md.
Vagrant.configure("2") do |config|
  here = File.dirname(__FILE__)
  boot = "{boot}"
  boot = here unless File.readable?(File.join(boot, "vmlinux"))
  # No sudo and no vagrant user in the image: Vagrant logs in as root with the box key.
  config.ssh.username = "root"
  config.ssh.private_key_path = File.join(here, "labctl_box_key")
  config.ssh.insert_key = false
  config.ssh.sudo_command = "%c"
  config.ssh.shell = "sh"
  config.vm.synced_folder ".", "/vagrant", disabled: true
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(boot, "vmlinux")
    lv.initrd = File.join(boot, "initrd")
    lv.cmd_line = "{cmdline}"
    lv.disk_bus = "virtio"
  end
end
"""


@dataclass(frozen=True)
class Box:
    name: str  # the name `vagrant box add` gives it: labctl/IMAGE-KEY
    path: Path
    boot_dir: Path

    @property
    def file(self) -> Path:
        return self.path / "labctl.box"


def _resource_text(name: str) -> str:
    return resources.files("labctl.images").joinpath(name).read_text()


def box_init_text() -> str:
    return _resource_text("box-init.sh")


def box_stage1(image_init: str) -> str:
    """The image's stage 1, handing over to the box's stage 2 instead of the node's."""
    if NODE_INIT not in image_init:
        raise LabctlError(
            "the image's stage 1 does not start the node's stage 2 as expected",
            hint="labctl/images/box.py and labctl/images/initramfs-init.sh disagree: "
            "update NODE_INIT (labctl/nodeside/__init__.py)")
    return image_init.replace(NODE_INIT, STAGE2)


def box_key(image: Image) -> str:
    inputs = {"box": BOX_VERSION, "image": image.path.name, "init": box_init_text(),
              "vagrantfile": BOX_VAGRANTFILE, "cmdline": BOX_CMDLINE}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    return f"{image.path.name}-{digest}"


def box_for(image: Image) -> Box:
    key = box_key(image)
    return Box(f"labctl/{key}", cache_root() / "boxes" / key, BOOT_ROOT / f"labctl-{key}")


def box_initrd(image: Image, public_key: str) -> bytes:
    archive = CpioWriter()
    stage1 = box_stage1(_resource_text("initramfs-init.sh"))
    archive.file("init", stage1.encode(), 0o755)
    archive.directory("payload/root", 0o700)
    archive.directory("payload/root/.ssh", 0o700)
    archive.file("payload/root/.ssh/authorized_keys", (public_key.strip() + "\n").encode(), 0o600)
    archive.file(f"payload{STAGE2}", box_init_text().encode(), 0o755)
    return image.initrd.read_bytes() + archive.render()


BOX_HINT = "see docs/vagrant.md, section Boxes"
BOX_TOOLS = "apt-get install qemu-utils openssh-client"
QUICK_SECONDS = 60  # qemu-img info, ssh-keygen
CONVERT_SECONDS = 1800  # qemu-img convert -c of the whole root file system, compressed


def _virtual_size(disk: Path) -> int:
    """The disk's size in GiB, rounded up, as `qemu-img info` reports it."""
    text = hostproc.run(["qemu-img", "info", "--output=json", str(disk)],
                        timeout=QUICK_SECONDS, what="qemu-img info", hint=BOX_HINT,
                        missing_hint=BOX_TOOLS).stdout
    try:
        size = bounded.load_object(text).get("virtual-size")
    except bounded.BoundedError as exc:
        raise LabctlError(f"qemu-img info about {disk}: {exc}",
                          hint="see docs/vagrant.md, section Boxes") from None
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise LabctlError(f"qemu-img info gave no disk size for {disk} ({short_repr(size)})",
                          hint="see docs/vagrant.md, section Boxes")
    return -(-size // (1 << 30))


def build_box(image_name: str = "trixie", packages: tuple[str, ...] = (), *,
              mirror: str | None = None, progress: Progress = lambda _msg: None) -> Box:
    """The cached box of `image_name` plus `packages` (a topology's `packages:`), built
    (with its image) when missing. Each image is a box of its own: the box key holds the
    image's key, which holds the package list."""
    image = build_image(node_recipe(image_name, packages), mirror, progress=progress)
    box = box_for(image)
    if not box.file.is_file():
        box.path.parent.mkdir(parents=True, exist_ok=True)
        with blocking_lock(box.path.parent / f".lock-{box.path.name}"):
            if not box.file.is_file():
                _build_locked(image, box, progress)
    install_boot_files(box)
    return box


def install_boot_files(box: Box) -> None:
    """The world-readable copy of the kernel and initrd that libvirt's qemu boots."""
    if (box.boot_dir / "initrd").is_file():
        return
    tmp = box.boot_dir.with_name(f".{box.boot_dir.name}.{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name in ("vmlinux", "initrd"):
            shutil.copyfile(box.path / name, tmp / name)
            os.chmod(tmp / name, 0o644)
        os.chmod(tmp, 0o755)
        tmp.rename(box.boot_dir)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if (box.boot_dir / "initrd").is_file():
            return
        raise LabctlError(f"cannot install the box's boot files in {box.boot_dir}: {exc}",
                          hint="run labctl as root") from None


def _build_locked(image: Image, box: Box, progress: Progress) -> None:
    started = time.monotonic()
    work = box.path.with_name(f".build-{box.path.name}-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        progress("box ssh key")
        key = work / "labctl_box_key"
        # RSA in PEM: Vagrant's ssh library reads it without extra gems (ed25519 needs two).
        hostproc.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-m", "PEM", "-N", "",
                      "-C", f"labctl box {box.path.name}", "-f", str(key)],
                     timeout=QUICK_SECONDS, what="ssh-keygen", hint=BOX_HINT,
                     missing_hint=BOX_TOOLS)
        public = (work / "labctl_box_key.pub").read_text()
        (work / "labctl_box_key.pub").unlink()
        progress("box initrd and kernel")
        (work / "initrd").write_bytes(box_initrd(image, public))
        shutil.copyfile(image.kernel, work / "vmlinux")
        progress("box disk (qcow2 of the image's root file system)")
        hostproc.run(["qemu-img", "convert", "-O", "qcow2", "-c", str(image.rootfs),
                      str(work / "box.img")], timeout=CONVERT_SECONDS, what="qemu-img convert",
                     hint=BOX_HINT, missing_hint=BOX_TOOLS)
        metadata = {"provider": "libvirt", "format": "qcow2",
                    "virtual_size": _virtual_size(work / "box.img")}
        (work / "metadata.json").write_text(json.dumps(metadata) + "\n")
        (work / "Vagrantfile").write_text(
            BOX_VAGRANTFILE.format(boot=box.boot_dir, cmdline=BOX_CMDLINE))
        (work / "manifest.json").write_text(json.dumps(
            {"name": box.name, "image": image.path.name, "kernel": image.manifest["kernel"],
             "build_seconds": round(time.monotonic() - started, 1)}, indent=2) + "\n")
        progress("box archive")
        with tarfile.open(work / "labctl.box.tmp", "w") as tar:
            for name in ("metadata.json", "Vagrantfile", "box.img", "vmlinux", "initrd",
                         "labctl_box_key"):
                tar.add(work / name, arcname=name)
        (work / "labctl.box.tmp").rename(work / "labctl.box")
        shutil.rmtree(box.path, ignore_errors=True)
        work.rename(box.path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
