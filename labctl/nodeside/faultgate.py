"""Node-side: the eBPF gate of one fault (stdlib only; sent to the node's python3 on stdin).

tc's u32 classifier picks the fault's packets by protocol and port; this program, a tc
action (act_bpf) after it, decides packet by packet whether the fault applies: the BTH
fields u32 cannot compare (opcode set, destination QP, PSN range), then the count window
("the first 3", "the 5th"), every n-th and a probability, counted in a pinned array map
(matched, hit). It returns TC_ACT_PIPE to apply the fault (the filter's class: netem, or
the next action) or TC_ACT_UNSPEC, which act_bpf turns into the action's own control word,
"continue" (tcplan.py), and u32 then treats the packet as not matched.
No compiler is needed in the node: the program is assembled here, instruction by instruction.

Usage: python3 - load NAME KEY=VALUE... | read NAME... | remove NAME...; every answer is
one line of labctl's reply format (nodeside/reply.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import struct
import sys

USAGE = "usage: python3 - load NAME KEY=VALUE... | read NAME... | remove NAME..."
PIN_DIR = "/sys/fs/bpf/labctl-fault"
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_MAP_CREATE, _MAP_LOOKUP, _PROG_LOAD, _OBJ_PIN, _OBJ_GET = 0, 1, 5, 6, 7
_MAP_ARRAY, _PROG_SCHED_ACT = 2, 4
_ACT_PIPE, _ACT_UNSPEC = 3, -1
BTH_OFFSET = 14 + 20 + 8  # Ethernet, IPv4 without options (u32 checks 0x45), UDP

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, len(attr))
    number = _SYS_BPF[platform.machine()]
    result = int(_libc.syscall(number, cmd, buf, len(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _ptr(buf: ctypes.Array[ctypes.c_char]) -> int:
    return ctypes.addressof(buf)


# --- a tiny eBPF assembler -----------------------------------------------------------------
def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def mov_imm(dst: int, imm: int) -> bytes:
    return _insn(0xB7, dst, imm=imm)


def mov_reg(dst: int, src: int) -> bytes:
    return _insn(0xBF, dst, src)


def add_imm(dst: int, imm: int) -> bytes:
    return _insn(0x07, dst, imm=imm)


def and_imm(dst: int, imm: int) -> bytes:
    return _insn(0x57, dst, imm=imm)


def mod_imm(dst: int, imm: int) -> bytes:
    return _insn(0x97, dst, imm=imm)


def be32(dst: int) -> bytes:
    return _insn(0xDC, dst, imm=32)


def ld_imm64(dst: int, imm: int, src: int = 0) -> bytes:
    return (_insn(0x18, dst, src, imm=imm & 0xFFFFFFFF)
            + _insn(0, imm=(imm >> 32) & 0xFFFFFFFF))


def ldx(size: str, dst: int, src: int, off: int) -> bytes:
    return _insn({"b": 0x71, "w": 0x61, "dw": 0x79}[size], dst, src, off)


def st_w(dst: int, off: int, imm: int) -> bytes:
    return _insn(0x62, dst, off=off, imm=imm)


def atomic_add(dst: int, src: int, off: int, fetch: bool) -> bytes:
    return _insn(0xDB, dst, src, off, 0x01 if fetch else 0x00)  # BPF_ADD | BPF_FETCH


def call(helper: int) -> bytes:
    return _insn(0x85, imm=helper)


def exit_() -> bytes:
    return _insn(0x95)


_JUMPS = {"==": 0x10, "!=": 0x50, ">": 0x20, ">=": 0x30, "<": 0xA0}


Jump = tuple[str, int, int, int, str]  # kind, opcode, dst, imm or src, label


def jmp_imm(op: str, dst: int, imm: int, label: str) -> Jump:
    return ("jmp", _JUMPS[op] | 0x05, dst, imm, label)


def goto(label: str) -> Jump:
    return ("jmp", 0x05, 0, 0, label)


def jmp_reg(op: str, dst: int, src: int, label: str) -> Jump:
    return ("jmpx", _JUMPS[op] | 0x0D, dst, src, label)


def assemble(items: list[object]) -> bytes:
    """Bytes and jumps (to labels given as strings in the list) into one program."""
    slots: list[bytes | Jump] = []
    labels: dict[str, int] = {}
    for item in items:
        if isinstance(item, str):
            labels[item] = len(slots)
        elif isinstance(item, bytes):
            slots += [item[i:i + 8] for i in range(0, len(item), 8)]
        else:
            slots.append(item)  # type: ignore[arg-type]  # a Jump
    out = b""
    for pc, slot in enumerate(slots):
        if isinstance(slot, bytes):
            out += slot
            continue
        kind, code, dst, arg, label = slot
        off = labels[label] - pc - 1
        out += (_insn(code, dst, off=off, imm=arg) if kind == "jmp"
                else _insn(code, dst, arg, off=off))
    return out


def gate_program(map_fd: int, opcodes: list[int], spec: dict[str, int]) -> bytes:
    """The act_bpf program for one fault; `spec` as `load` takes it (see _SPEC_KEYS)."""
    items: list[object] = [mov_reg(6, 1)]
    if spec["bth"]:
        items += [mov_reg(1, 6), mov_imm(2, BTH_OFFSET), mov_reg(3, 10), add_imm(3, -16),
                  mov_imm(4, 12), call(26),  # bpf_skb_load_bytes(skb, off, fp-16, 12)
                  jmp_imm("!=", 0, 0, "miss")]
        if opcodes:
            items.append(ldx("b", 7, 10, -16))
            items += [jmp_imm("==", 7, op, "opcode_ok") for op in opcodes]
            items += [goto("miss"), "opcode_ok"]
        if spec["qp"] >= 0:
            items += [ldx("w", 7, 10, -12), be32(7), and_imm(7, 0xFFFFFF),
                      jmp_imm("!=", 7, spec["qp"], "miss")]
        if spec["psn_lo"] > 0 or spec["psn_hi"] < 0xFFFFFF:
            items += [ldx("w", 7, 10, -8), be32(7), and_imm(7, 0xFFFFFF),
                      jmp_imm("<", 7, spec["psn_lo"], "miss"),
                      jmp_imm(">", 7, spec["psn_hi"], "miss")]
    items += [st_w(10, -20, 0), ld_imm64(1, map_fd, src=1), mov_reg(2, 10), add_imm(2, -20),
              call(1), jmp_imm("==", 0, 0, "miss"),  # bpf_map_lookup_elem(map, &0)
              mov_reg(8, 0), mov_imm(7, 1), atomic_add(8, 7, 0, fetch=True)]
    # r7: how many matched before this packet (0 for the first)
    if spec["every"] > 1:
        items += [mov_reg(2, 7), add_imm(2, 1), mod_imm(2, spec["every"]),
                  jmp_imm("!=", 2, 0, "miss")]
    if spec["skip"] > 0:
        items.append(jmp_imm("<", 7, spec["skip"], "miss"))
    if spec["count"] > 0:
        items += [ld_imm64(2, spec["skip"] + spec["count"] * spec["every"]),
                  jmp_reg(">=", 7, 2, "miss")]
    if spec["threshold"] < 0xFFFFFFFF:
        items += [call(7), ld_imm64(2, spec["threshold"]),  # bpf_get_prandom_u32
                  jmp_reg(">", 0, 2, "miss")]
    items += [mov_imm(7, 1), atomic_add(8, 7, 8, fetch=False),
              mov_imm(0, _ACT_PIPE), exit_(), "miss", mov_imm(0, _ACT_UNSPEC), exit_()]
    return assemble(items)


_SPEC_KEYS = ("bth", "qp", "psn_lo", "psn_hi", "every", "skip", "count", "threshold")


def parse_spec(words: list[str]) -> tuple[list[int], dict[str, int]]:
    opcodes: list[int] = []
    spec: dict[str, int] = {}
    for word in words:
        key, _, value = word.partition("=")
        if key == "opcodes":
            opcodes = [int(v) for v in value.split(",") if v]
        elif key in _SPEC_KEYS:
            spec[key] = int(value)
        else:
            raise SystemExit(f"unknown key {key!r}")
    missing = [k for k in _SPEC_KEYS if k not in spec]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}")
    return opcodes, spec


def _path_attr(path: str, fd: int) -> tuple[bytes, ctypes.Array[ctypes.c_char]]:
    name = ctypes.create_string_buffer(path.encode())
    return struct.pack("<QII", _ptr(name), fd, 0), name


def _mount_bpffs() -> None:
    if not os.path.ismount("/sys/fs/bpf"):
        os.makedirs("/sys/fs/bpf", exist_ok=True)
        if os.system("mount -t bpf bpf /sys/fs/bpf") != 0:
            raise SystemExit("cannot mount the BPF file system on /sys/fs/bpf")


def load(name: str, opcodes: list[int], spec: dict[str, int]) -> dict[str, str]:
    _mount_bpffs()
    directory = os.path.join(PIN_DIR, name)
    os.makedirs(directory, exist_ok=True)
    map_fd = _bpf(_MAP_CREATE, struct.pack("<IIIII", _MAP_ARRAY, 4, 16, 1, 0) + bytes(100))
    code = gate_program(map_fd, opcodes, spec)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack("<IIQQIIQII16s", _PROG_SCHED_ACT, len(code) // 8, _ptr(insns),
                       _ptr(license_), 1, len(log), _ptr(log), 0, 0, b"labctl_fault")
    try:
        prog_fd = _bpf(_PROG_LOAD, attr + bytes(128 - len(attr)))
    except OSError as exc:
        raise SystemExit(f"the kernel refused the program: {exc}\n"
                         f"{log.value.decode()[-2000:]}") from None
    for fd, leaf in ((prog_fd, "prog"), (map_fd, "map")):
        path = os.path.join(directory, leaf)
        if os.path.exists(path):
            os.unlink(path)
        attr_bytes, _keep = _path_attr(path, fd)
        _bpf(_OBJ_PIN, attr_bytes)
    return {"prog": os.path.join(directory, "prog")}


def read(name: str) -> list[int] | None:
    path = os.path.join(PIN_DIR, name, "map")
    if not os.path.exists(path):
        return None
    attr, _keep = _path_attr(path, 0)
    fd = _bpf(_OBJ_GET, attr)
    try:
        key = ctypes.create_string_buffer(4)
        value = ctypes.create_string_buffer(16)
        _bpf(_MAP_LOOKUP, struct.pack("<IIQQQ", fd, 0, _ptr(key), _ptr(value), 0))
        matched, hit = struct.unpack("<QQ", value.raw)
        return [matched, hit]
    finally:
        os.close(fd)


def remove(name: str) -> None:
    directory = os.path.join(PIN_DIR, name)
    for leaf in ("prog", "map"):
        path = os.path.join(directory, leaf)
        if os.path.exists(path):
            os.unlink(path)
    if os.path.isdir(directory):
        os.rmdir(directory)


# labctl's reply format (nodeside/reply.py; copied, as this file is sent alone: a unit
# test holds the copies to it)
REPLY_KEY, REPLY_VERSION = "labctl_reply", 1


def reply_line(data: object) -> str:
    return json.dumps({REPLY_KEY: REPLY_VERSION, "ok": True, "data": data}, separators=(",", ":"))


def reply_error_line(message: str) -> str:
    return json.dumps({REPLY_KEY: REPLY_VERSION, "ok": False, "error": message},
                      separators=(",", ":"))


def answer(command: str, names: list[str]) -> object:
    if command == "load" and names:
        return load(names[0], *parse_spec(names[1:]))
    if command == "read":
        return {name: read(name) for name in names}
    if command == "remove":
        for name in names:
            remove(name)
        return {}
    raise ValueError(f"unknown command {command!r} ({USAGE})")


def main(argv: list[str]) -> int:
    """Answer one reply line: the command's result, or why it failed (exit 1)."""
    try:
        print(reply_line(answer(argv[0] if argv else "", argv[1:])))
    except (OSError, ValueError, KeyError, SystemExit) as exc:
        why = exc.code if isinstance(exc, SystemExit) else (
            exc if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")
        print(reply_error_line(str(why)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
