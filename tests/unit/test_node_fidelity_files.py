"""What makes a node the Debian machine it claims to be, in the files that make it: stage 1's
/dev links (built into the initramfs and copied into devtmpfs), the qemu node's mounts,
the loop driver, and the image's package list with the reason for every `important`
package it leaves out (tests/integration/fidelity.py checks live nodes)."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.data.recipes import node_packages
from labctl.images import builder
from labctl.vm import machine

REPO = Path(__file__).resolve().parents[2]
STAGE1 = (REPO / "labctl/images/initramfs-init.sh").read_text()
FSTAB = REPO / "labctl/nodeside/vm-fstab.conf"


@pytest.fixture
def initrd_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The files of a stage-1 initramfs written by the builder (no modules: the module
    resolution needs a real root file system), extracted by GNU cpio."""
    if shutil.which("cpio") is None:
        pytest.skip("GNU cpio not installed")
    rootdir = tmp_path / "rootfs"
    (rootdir / "usr/bin").mkdir(parents=True)
    (rootdir / "usr/bin/busybox").write_bytes(b"\x7fELF busybox")
    monkeypatch.setattr(builder, "_module_files", lambda *_args: [])
    builder._write_initrd(rootdir, "7.0.0-test", tmp_path / "initrd.cpio")
    out = tmp_path / "initrd"
    out.mkdir()
    subprocess.run(["cpio", "-idm", "--quiet", "-F", str(tmp_path / "initrd.cpio")], cwd=out,
                   check=True)
    return out


def test_the_initramfs_carries_the_links_udev_makes_on_debian(initrd_tree: Path) -> None:
    links = {p.name: str(p.readlink()) for p in (initrd_tree / "devlinks").iterdir()}
    assert links == {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
                     "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
                     "core": "/proc/kcore"}
    assert (initrd_tree / "init").read_text() == STAGE1


def _stage1_dev_lines() -> str:
    """Stage 1's lines that fill /dev, between mounting devtmpfs and the first report."""
    start = STAGE1.index("mount -t devtmpfs devtmpfs /dev\n")
    end = STAGE1.index('echo "labctl: stage initramfs"')
    lines = STAGE1[start:end].splitlines()[1:]
    assert any(line.startswith("cp -a /devlinks/. /dev/") for line in lines), lines
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kcore", [True, False])
def test_stage1_copies_the_links_into_dev_and_keeps_core_only_with_kcore(
        initrd_tree: Path, tmp_path: Path, kcore: bool) -> None:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    proc.mkdir()
    if kcore:
        (proc / "kcore").write_bytes(b"")
    script = (_stage1_dev_lines().replace("/devlinks/", f"{initrd_tree}/devlinks/")
              .replace("/proc/kcore", str(proc / "kcore")).replace("/dev/", f"{dev}/"))
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    made = {p.name: str(p.readlink()) for p in dev.iterdir()}
    assert made.pop("fd") == "/proc/self/fd" and made.pop("stdout") == "/proc/self/fd/1"
    assert made.pop("stdin") == "/proc/self/fd/0" and made.pop("stderr") == "/proc/self/fd/2"
    assert made == ({"core": "/proc/kcore"} if kcore else {})


def test_the_links_reach_the_root_file_system_with_dev() -> None:
    """They are made in devtmpfs before it moves to the new root, not in the initramfs's
    own /dev, which the move leaves behind."""
    assert STAGE1.index("cp -a /devlinks/. /dev/") < STAGE1.index("mount --move /dev ")


def _fstab() -> list[list[str]]:
    return [line.split() for line in FSTAB.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_a_qemu_node_mounts_what_debian_mounts() -> None:
    entries = {fields[1]: fields for fields in _fstab()}
    assert all(len(fields) == 6 for fields in entries.values())
    assert {point: fields[2] for point, fields in entries.items()} == {
        "/proc": "proc", "/sys": "sysfs", "/sys/kernel/debug": "debugfs",
        "/sys/kernel/tracing": "tracefs", "/dev/pts": "devpts", "/run": "tmpfs",
        "/run/lock": "tmpfs", "/tmp": "tmpfs", "/dev/shm": "tmpfs", "/dev/mqueue": "mqueue"}
    assert "mode=1777" in entries["/run/lock"][3]
    # devtmpfs and a fresh /run have no mount points below them: mount makes them
    for point in ("/dev/pts", "/dev/shm", "/dev/mqueue", "/run/lock"):
        assert "X-mount.mkdir" in entries[point][3].split(","), point
    points = [fields[1] for fields in _fstab()]
    assert points.index("/run") < points.index("/run/lock")  # mount -a mounts in order
    assert points.index("/sys") < points.index("/sys/kernel/debug")
    script = (REPO / "labctl/nodeside/node-init.sh").read_text()
    configfs = script.index("mount -t configfs configfs /sys/kernel/config")
    assert script.index("modprobe -a $modules") < configfs  # rdma_cm loads configfs


def test_every_vm_and_vagrant_node_loads_the_loop_driver() -> None:
    script = (REPO / "labctl/nodeside/node-init.sh").read_text()
    for kind in ("vm", "vagrant"):
        line = re.search(rf"^\s*{kind}\) modules=\"([^\"]*)\"", script, re.MULTILINE)
        assert line is not None and "loop" in line.group(1).split(), kind
    assert "loop" in builder.NODE_MODULES  # stored uncompressed, as the others loaded at boot


LEFT_OUT = {"init", "systemd-sysv", "cron", "cron-daemon-common", "logrotate", "ifupdown",
            "dhcpcd-base", "linux-sysctl-defaults", "debconf-i18n", "apt-utils", "whiptail"}


def test_each_important_package_left_out_has_its_reason_in_the_list_and_the_docs() -> None:
    text = (REPO / "labctl/images/node-packages.txt").read_text()
    reasons = text[text.index("# Left out of `important`"):]
    named = set(re.findall(r"[a-z][a-z0-9.+-]+", " ".join(
        line.split(None, 1)[1].split("  ")[0] for line in reasons.splitlines()[2:])))
    assert named == LEFT_OUT
    assert not LEFT_OUT & set(node_packages())
    table = (REPO / "docs/nodes.md").read_text().split("| package | why not |")[1]
    documented = {name for row in table.splitlines() if row.startswith("| ")
                  for name in re.findall(r"[a-z][a-z0-9.+-]+", row.split("|")[1])}
    assert documented == LEFT_OUT
    for tool_package in ("e2fsprogs", "fdisk", "cpio", "less", "nano", "vim-tiny", "nftables",
                         "dmidecode"):
        assert tool_package in node_packages()


def test_a_qemu_node_runs_udev_with_the_kernels_interface_names() -> None:
    """udevd runs in every qemu node as on Debian (/dev/disk/by-*, the links of devices a
    test suite makes), started after the point where a machine is saved for restores
    (udevd reads boot_id, which the kernel makes once: a saved machine that ran it gave
    every node restored from it the same boot_id), in restored nodes too, and settled,
    bounded, before the network step names the NICs by MAC; net.ifnames=0 keeps udev from
    renaming eth0 and eth1 to ens2 and ens6."""
    script = (REPO / "labctl/nodeside/node-init.sh").read_text()
    block = script[script.index("    step udev\n"):]
    block = block[:block.index("\nfi\n")]
    assert script.rindex('if [ "$KIND" = vm ]; then', 0, script.index("    step udev\n")) \
        == script.index("    step udev\n") - len('if [ "$KIND" = vm ]; then\n')
    started = block.index("/usr/lib/systemd/systemd-udevd --daemon")
    # coldplug replays the virtio disks' events only (the reason is beside it)
    trigger = " ".join(block[block.index("udevadm trigger --type"):].split()[:6])
    assert trigger == ("udevadm trigger --type=devices \\ --subsystem-match=block "
                       "--sysname-match='vd*'"), trigger
    assert started < block.index("udevadm trigger --type")
    assert block.count("udevadm trigger") == 2  # the one above and its failure's text
    settle = re.search(r"udevadm settle --timeout=(\d+)", block)
    assert settle is not None and 0 < int(settle.group(1)) <= 120
    assert "must " in block[settle.start() - 80:settle.start()]  # a timeout fails the node
    udev = script.index("    step udev\n")
    assert script.index("    step saving\n") < udev < script.index("step network\n")
    assert "net.ifnames=0" in machine.KERNEL_APPEND.split()


def test_a_qemu_nodes_root_disk_has_a_serial_for_its_by_id_link(tmp_path: Path) -> None:
    node = machine.QemuMachine(tmp_path / "node1", "labctl-lab-node1")
    argv = node.argv(accel="tcg", memory_mib=512, cpus=1, kernel=tmp_path / "vmlinux",
                     append="console=ttyS0", ssh_port=2222, mgmt_mac="52:54:00:00:00:01",
                     nics=[])
    pairs = list(itertools.pairwise(argv))
    drives = [value for flag, value in pairs if flag == "-drive"]
    assert drives == [f"file={node.disk},if=none,id=root,format=qcow2,cache=unsafe"]
    blk = [value for flag, value in pairs if flag == "-device" and "drive=" in value]
    assert blk == ["virtio-blk-pci,drive=root,serial=labctl-root"]
    devices = [value for flag, value in pairs if flag == "-device"]
    assert devices[0] == blk[0]  # the first virtio device: /dev/vda, before any -drive's
