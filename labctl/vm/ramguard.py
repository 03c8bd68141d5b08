"""Keep a saved machine's RAM file whole under the nodes restored from it.

Restored nodes map the saved RAM file privately (copy on write): the pages they only read
stay the host's one page-cache copy, shared by every node restored from that file. qemu 7.2
breaks that when the guest frees memory: free page reporting (virtio-balloon) makes qemu
discard the pages, and for file-backed RAM its `ram_block_discard_range` first punches a
hole in the *file* (`fallocate(PUNCH_HOLE)`), private mapping or not, which would zero
those pages under every other node and in the saved machine itself. Newer qemu releases
only drop the private copy there (`madvise(MADV_DONTNEED)`, which qemu 7.2 also does right
after the hole punch), and that is what this filter makes qemu 7.2 do: a seccomp filter,
installed in the child before it execs qemu, makes every `fallocate` with exactly
PUNCH_HOLE|KEEP_SIZE return success without touching the file.

Hand-written (eight BPF instructions through ctypes) rather than libseccomp's Python
binding: that binding is not on PyPI (Debian ships it for the system Python only), and
the filter has nothing to generate. The same filter also reaches qemu's block layer, which
punches holes only to discard (labctl's drives keep qemu's default discard=ignore) or to
write zeroes on a file system without FALLOC_FL_ZERO_RANGE (ext4, xfs and btrfs have it;
tmpfs does not): docs/lifecycle.md says so.
"""

from __future__ import annotations

import ctypes
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000  # | errno 0: the call "succeeds" without running
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

# host machine -> (AUDIT_ARCH_*, __NR_fallocate)
_ARCHES = {"x86_64": (0xC000003E, 285), "aarch64": (0xC00000B7, 47)}

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_RET_K = 0x06
# offsets in struct seccomp_data: nr, arch, then args[] at 16 (8 bytes each, little endian)
_NR, _ARCH, _ARG1_LOW = 0, 4, 24


def supported() -> bool:
    """Whether this host's architecture has the filter (else restored nodes cannot share
    a saved RAM file safely)."""
    return platform.machine() in _ARCHES


def filter_program(machine: str | None = None) -> bytes:
    """The filter's instructions (struct sock_filter[]) for `machine` (this host's)."""
    arch, nr = _ARCHES[machine or platform.machine()]

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    allow = 7  # the index of the last instruction: every jump below lands there
    return b"".join([
        op(_LD_W_ABS, _ARCH),
        op(_JEQ_K, arch, 0, allow - 2),
        op(_LD_W_ABS, _NR),
        op(_JEQ_K, nr, 0, allow - 4),
        op(_LD_W_ABS, _ARG1_LOW),  # fallocate's mode (an int: its low word)
        op(_JEQ_K, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, allow - 6),
        op(_RET_K, SECCOMP_RET_ERRNO | 0),
        op(_RET_K, SECCOMP_RET_ALLOW),
    ])


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class PunchHoleGuard:
    """Built in the parent, installed in the child (Popen's preexec_fn) before it execs:
    the child does no more than two prctl calls."""

    def __init__(self) -> None:
        code = filter_program()
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._program = _Program(len(code) // 8, ctypes.addressof(self._buffer))
        self._libc = ctypes.CDLL(None, use_errno=True)

    def __call__(self) -> None:
        # Failing here fails the Popen: qemu never runs unguarded over a shared RAM file.
        if self._libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if self._libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                            ctypes.byref(self._program), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
