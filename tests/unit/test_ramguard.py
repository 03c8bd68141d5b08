"""The seccomp filter restored nodes' qemu runs under (labctl/vm/ramguard.py), in a real
child process: a hole punched in a file is a no-op that reports success, every other use
of the file, fallocate's other modes included, is untouched."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from labctl.vm import ramguard

# fallocate(fd, MODE, offset, length) on argv[1], from a child: prints its return value
FALLOCATE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDWR)
rc = libc.fallocate(fd, int(sys.argv[2]), ctypes.c_long(int(sys.argv[3])), ctypes.c_long(4096))
os.pwrite(fd, b"written", 60000)
print(rc, ctypes.get_errno() if rc else 0)
"""
PUNCH_HOLE = ramguard.FALLOC_FL_PUNCH_HOLE | ramguard.FALLOC_FL_KEEP_SIZE
ZERO_RANGE = 0x10


def _fallocate(path: Path, mode: int, offset: int, guarded: bool) -> str:
    done = subprocess.run([sys.executable, "-c", FALLOCATE, str(path), str(mode), str(offset)],
                          capture_output=True, text=True, check=True,
                          preexec_fn=ramguard.PunchHoleGuard() if guarded else None)
    return done.stdout.strip()


@pytest.fixture
def ram(tmp_path: Path) -> Path:
    path = tmp_path / "ram"
    path.write_bytes(b"\x90" * 65536)
    return path


def test_a_punched_hole_reports_success_and_leaves_the_file_whole(ram: Path) -> None:
    assert _fallocate(ram, PUNCH_HOLE, 0, guarded=True) == "0 0"
    data = ram.read_bytes()
    assert data[:4096] == b"\x90" * 4096  # not punched
    assert data[60000:60007] == b"written"  # the child's other writes reach the file


def test_without_the_guard_the_hole_is_real(ram: Path) -> None:
    """What the guard prevents: the same call, unguarded, zeroes the file's pages."""
    assert _fallocate(ram, PUNCH_HOLE, 0, guarded=False) == "0 0"
    assert ram.read_bytes()[:4096] == b"\0" * 4096


def test_fallocates_other_modes_still_run(ram: Path) -> None:
    assert _fallocate(ram, ZERO_RANGE, 8192, guarded=True) == "0 0"
    assert ram.read_bytes()[8192:12288] == b"\0" * 4096
    assert _fallocate(ram, ramguard.FALLOC_FL_PUNCH_HOLE, 0, guarded=True) != "0 0"  # EINVAL
    assert ram.read_bytes()[:4096] == b"\x90" * 4096


@pytest.mark.parametrize(("machine", "arch", "nr"),
                         [("x86_64", 0xC000003E, 285), ("aarch64", 0xC00000B7, 47)])
def test_the_program_checks_arch_then_syscall_then_mode(machine: str, arch: int,
                                                        nr: int) -> None:
    code = ramguard.filter_program(machine)
    ops = [struct.unpack("<HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
    assert [k for _, _, _, k in ops] == [4, arch, 0, nr, 24, PUNCH_HOLE,
                                         ramguard.SECCOMP_RET_ERRNO,
                                         ramguard.SECCOMP_RET_ALLOW]
    # every failed comparison jumps to the last instruction: allow
    for index, (code_, jt, jf, _) in enumerate(ops):
        if code_ == 0x15:
            assert jt == 0 and index + 1 + jf == len(ops) - 1


def test_an_unknown_host_architecture_has_no_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ramguard.platform, "machine", lambda: "riscv64")
    assert not ramguard.supported()
