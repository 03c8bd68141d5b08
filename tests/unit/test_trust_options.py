"""Options are values, not options (issue 35, items 4 and 5): a corpus of hostile CLI values.

- --mirror reaches mmdebstrap (root, hooks as options): a URL only, and after `--`.
- every numeric option of every command, found in the typer app itself, refuses nan, inf,
  negative, zero (where the help does not allow it) and huge values with exit 2.
- paths the OS refuses (too long, a loop of links, a file as a directory) are exit 2.
- `validate` never shows the content of a file that is not a topology.
- a corrupt image-cache manifest is reported as such; the other images are still listed.
- the Docker host VM's files live inside the state dir.
- `capture -r` streams a pcap: memory bounded whatever its size; truncated pcaps are clean.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from labctl.data.recipes import RECIPES, check_mirror
from labctl.errors import UsageError
from labctl.images import builder
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]


def assert_clean_refusal(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, labctl's error/hint form, no traceback, and the words in the message."""
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert err.lstrip().startswith("error:"), err
    text = " ".join(err.split())
    for word in words:
        assert word in text, (word, err)


# --- --mirror -------------------------------------------------------------------------------
HOSTILE_MIRRORS = [
    "--customize-hook=touch /tmp/pwned",
    "--setup-hook=sh -c id",
    "-v",
    "-",  # mmdebstrap: read sources.list from stdin
    "deb http://mirror.example.org/debian trixie main",  # a sources.list line
    "http://mirror.example.org/debian --customize-hook=id",
    "http://mirror.example.org/debian\n--customize-hook=id",
    "http://x/debian#comment",
    "http://x/debian?q=1",
    "http://x/\x00",
    "http://x/\x1b[31m",
    "http:///debian",  # no host
    "http://:80/debian",
    "https://user@/debian",
    "file://host/srv/debian",  # a file URL has no host
    "file:relative",
    "ftp://mirror.example.org/debian",
    "gopher://x/",
    "/srv/debian",  # a path: mmdebstrap would read it as a sources.list file
    "mirror.example.org/debian",
    "",
    "http://" + "a" * 5000 + "/",
    'http://x/"quoted"',
    "http://x/a b",
]
GOOD_MIRRORS = ["http://mirror.example.org/debian", "https://mirror.example.org:8443/debian/",
                "file:///srv/debian", "http://[::1]:3142/debian", "HTTP://X.ORG/d",
                "http://user:pw@proxy.local/debian/"]


@pytest.mark.parametrize("mirror", HOSTILE_MIRRORS)
def test_check_mirror_refuses_what_is_not_a_mirror_url(mirror: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_mirror(mirror)
    assert "--mirror" in caught.value.message and "e.g." in (caught.value.hint or "")


@pytest.mark.parametrize("mirror", GOOD_MIRRORS)
def test_check_mirror_accepts_urls(mirror: str) -> None:
    assert check_mirror(mirror) == mirror


MIRROR_COMMANDS = [["up", "two-node"], ["image", "build"], ["image", "box"],
                   ["docker-host", "up"]]


@pytest.mark.parametrize("command", MIRROR_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("mirror", HOSTILE_MIRRORS[:6])
def test_every_mirror_option_refuses_an_option(
        command: list[str], mirror: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = run_main(monkeypatch, capsys, *command, f"--mirror={mirror}")
    assert_clean_refusal(code, out, err, "--mirror")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "state").exists()


def test_mmdebstrap_gets_the_mirror_after_the_end_of_options(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """mmdebstrap reads options after its arguments too (Getopt::Long's permute): the
    suite, target and mirror come after `--`, so none of them can be an option."""
    seen: list[list[str]] = []
    monkeypatch.setattr(builder, "_run_streamed", lambda argv, progress, log: seen.append(argv))
    builder._mmdebstrap(RECIPES["trixie"], tmp_path / "root", "http://mirror.example.org/debian",
                        lambda _m: None, tmp_path / "log")
    argv = seen[0]
    end = argv.index("--")
    assert argv[end + 1:] == ["trixie", str(tmp_path / "root"), "http://mirror.example.org/debian"]
    assert all(a.startswith("--") for a in argv[1:end])


def test_mmdebstrap_refuses_a_hostile_mirror_even_past_the_cli(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A caller that skipped the CLI (the library, a provider) still cannot pass a hook."""
    monkeypatch.setattr(builder, "_run_streamed",
                        lambda *a: pytest.fail("mmdebstrap ran"))  # pragma: no cover
    with pytest.raises(UsageError):
        builder._mmdebstrap(RECIPES["trixie"], tmp_path / "root", "--customize-hook=id",
                            lambda _m: None, tmp_path / "log")
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(UsageError):
        builder.build_image(RECIPES["trixie"], "--customize-hook=id")
    assert not (tmp_path / "cache").exists()


# --- the image cache ------------------------------------------------------------------------
GOOD_MANIFEST = {"name": "trixie", "key": "trixie-0123456789abcdef", "suite": "trixie",
                 "kernel_suite": "trixie", "kernel": "6.12.0-1-amd64", "rdma_core": "56.1-1",
                 "siw": True, "packages": {}, "added_packages": [], "rootfs_bytes": 400 << 20,
                 "build_seconds": 321.5}
CORRUPT_MANIFESTS: list[tuple[str, bytes]] = [
    ("not-json", b"{not json"),
    ("empty", b""),
    ("a-list", b"[1, 2]"),
    ("nan", b'{"name": NaN}'),
    ("deep", b"[" * 100_000 + b"]" * 100_000),
    ("binary", b"\xff\xfe\x00garbage"),
    ("missing-keys", b'{"name": "trixie"}'),
    ("wrong-types", json.dumps({**GOOD_MANIFEST, "rootfs_bytes": "big"}).encode()),
    ("bool-size", json.dumps({**GOOD_MANIFEST, "rootfs_bytes": True}).encode()),
    ("too-large", b'{"name": "' + b"x" * (2 << 20) + b'"}'),
]


def make_image(cache: Path, name: str, manifest: bytes) -> Path:
    path = cache / "images" / name
    path.mkdir(parents=True)
    (path / "manifest.json").write_bytes(manifest)
    for name in ("vmlinux", "initrd.cpio", "root.ext4"):  # what qemu opens from it
        (path / name).write_bytes(b"")
    return path


@pytest.mark.parametrize(("label", "manifest"), CORRUPT_MANIFESTS,
                         ids=[c[0] for c in CORRUPT_MANIFESTS])
def test_image_list_shows_a_corrupt_image_and_the_others(
        label: str, manifest: bytes, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    make_image(tmp_path, "trixie-0123456789abcdef", json.dumps(GOOD_MANIFEST).encode())
    bad = make_image(tmp_path, f"trixie-{label}", manifest)
    (tmp_path / "images" / "logs").mkdir()  # not images: not listed, not corrupt
    (tmp_path / "images" / "stray-file").write_text("")
    code, out, err = run_main(monkeypatch, capsys, "image", "list")
    assert code == 0 and "Traceback" not in out + err
    assert "0123456789abcdef" in out and "6.12.0-1-amd64" in out
    flat = " ".join(err.split())
    assert f"image trixie-{label} in the cache is corrupt" in flat
    assert f"rm -r {bad}" in flat and "labctl image build --force" in flat
    code, out, err = run_main(monkeypatch, capsys, "image", "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [i["key"] for i in listed["images"]] == ["trixie-0123456789abcdef"]
    assert [c["path"] for c in listed["corrupt"]] == [str(bad)]


def test_image_manifest_that_is_a_link_or_a_fifo_is_corrupt(tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "manifest.json").symlink_to("/etc/passwd")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "manifest.json")
    for path in (linked, fifo):
        with pytest.raises(builder.CorruptImage):
            builder.Image.at(path)
        assert builder.usable_image(path) is None
    assert builder.usable_image(tmp_path / "absent") is None


def test_build_image_rebuilds_over_a_corrupt_image(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """A corrupt image is not returned (it would crash later): it is built anew, and the
    corrupt directory replaced."""
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    final = builder.image_dir(RECIPES["trixie"])
    make_image(tmp_path, final.name, b"{corrupt")
    built: list[Path] = []

    def fake_build(recipe: object, mirror: object, final: Path, force: bool,
                   progress: object) -> builder.Image:
        built.append(final)
        return builder.Image(final, final, final, final, {})

    monkeypatch.setattr(builder, "_check_host_tools", lambda: None)
    monkeypatch.setattr(builder, "_build_locked", fake_build)
    builder.build_image(RECIPES["trixie"])
    assert built == [final]
    assert builder.cached_image(RECIPES["trixie"]) is None


# --- every numeric option -------------------------------------------------------------------
def numeric_options() -> list[tuple[list[str], str, type]]:
    """(command path, flag, int or float) of every numeric option of every labctl command,
    from the typer app itself: an option added tomorrow is in this list."""
    import typing

    import typer
    from typer.core import TyperGroup

    from labctl.cli.app import app

    def number_type(annotation: object) -> type | None:
        if annotation in (int, float):
            return typing.cast(type, annotation)
        return next((t for a in typing.get_args(annotation) if (t := number_type(a))), None)

    found: list[tuple[list[str], str, type]] = []

    def walk(command: object, path: list[str]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        for param in getattr(command, "params", []):
            kind = number_type(param.type_descriptor.annotation)
            if kind is not None and param.opts[0].startswith("-"):
                found.append((path, max(param.opts, key=len), kind))

    walk(typer.main.get_command(app), [])
    return found


NUMERIC_OPTIONS = numeric_options()
# The arguments a command needs before its options are looked at.
REQUIRED_ARGS = {"up": ["two-node"], "validate": ["two-node"], "cp": ["a", "b"],
                 "asyncwatch": ["node1"], "run perftest": ["ib_send_bw"],
                 "link set": ["node1:eth1"], "fault add": ["node1:eth1", "drop"]}
ZERO_ALLOWED = {("capture", "--count")}  # 0: no limit, as its help says
BAD_NUMBERS = ["nan", "inf", "-inf", "1e308", "-1", "0", str(10**30)]


def test_the_app_has_numeric_options() -> None:
    assert len(NUMERIC_OPTIONS) > 60  # the walk finds them (run has over 50)
    assert (["run", "pingpong"], "--mtu", int) in NUMERIC_OPTIONS
    assert (["capture"], "--duration", float) in NUMERIC_OPTIONS


# Each option with each bad value, but for the zeros an option's help allows.
REFUSALS = [(path, flag, kind, value) for value in BAD_NUMBERS
            for path, flag, kind in NUMERIC_OPTIONS
            if not (value == "0" and (path[0], flag) in ZERO_ALLOWED)]


@pytest.mark.parametrize(("path", "flag", "kind", "value"), REFUSALS,
                         ids=[f"{v}-{' '.join(p)} {f}" for p, f, _, v in REFUSALS])
def test_every_numeric_option_refuses_what_its_help_does_not_allow(
        path: list[str], flag: str, kind: type, value: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Refused as the command line is parsed (no lab needed, nothing made): exit 2, the flag
    named, no traceback. A value of the option's type is refused in labctl's error/hint
    form; text that is not a number at all (nan for a whole number) by typer's parser."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    args = [*path, *REQUIRED_ARGS.get(" ".join(path), []), f"{flag}={value}"]
    code, out, err = run_main(monkeypatch, capsys, *args)
    parses = kind is float or value.lstrip("-").isdigit()
    if parses:
        assert_clean_refusal(code, out, err, flag)
    else:
        assert code == 2 and "Traceback" not in out + err
        assert "invalid value" in err and flag in err
    assert not (tmp_path / "state").exists() and not (tmp_path / "cache").exists()


# --- validate never shows a file that is not a topology ------------------------------------
SECRET = "S3CRETxyzzy"
# Files that are not topologies, each holding the secret where an error message could quote
# it: a key, a value, an alias, a tag, a duplicate key, a parse error near it.
SECRET_FILES = [
    f"root:$y$j9T${SECRET}:19700:0:99999:7:::\ndaemon:*:19700:0:99999:7:::\n",  # /etc/shadow
    f"{SECRET}: 1\n",
    f"password: {SECRET}\nuser: admin\n",
    f"name: {SECRET}\n",  # one topology key is not enough
    f"token: *{SECRET}\n",  # undefined alias
    f"token: !{SECRET} x\n",  # unknown tag
    f"{SECRET}: 1\n{SECRET}: 2\n",  # duplicate key
    f"- {SECRET}\n- x\n",
    f"{SECRET}\n",
    f"key: [{SECRET} \nother: x\n",  # parse error after it
    f'key: "{SECRET}\n',  # unterminated quote
    f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n-----END OPENSSH PRIVATE KEY-----\n",
    f"\xff{SECRET}\n",
    f"a:\n\tb: {SECRET}\n",  # a tab
    f"{{{SECRET}: [1, 2}}\n",
    f"k: '{SECRET}' extra\n",
]


@pytest.mark.parametrize("content", SECRET_FILES, ids=range(len(SECRET_FILES)))
@pytest.mark.parametrize("command", ["validate", "up", "down"])
def test_a_root_only_file_linked_as_a_topology_is_not_shown(
        content: str, command: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """labctl runs as root: a topology.yaml linked to a root-only file must not print it
    through its error (reading.py, "what is quoted")."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    # Wide enough for any tmp_path (a pytest-xdist worker's is longer): rich folds a path
    # longer than the line inside the path (and would fold a secret it showed in two).
    monkeypatch.setenv("COLUMNS", "200")
    secret = tmp_path / "secret"
    secret.write_bytes(content.encode("utf-8", errors="surrogateescape")
                       if "\xff" not in content else content.encode("latin-1"))
    secret.chmod(0o600)
    (tmp_path / "topology.yaml").symlink_to(secret)
    code, out, err = run_main(monkeypatch, capsys, command, str(tmp_path / "topology.yaml"))
    assert code == 2 and "Traceback" not in out + err, (code, out, err)
    assert SECRET not in out + err and SECRET[:4] not in out + err
    assert "topology.yaml" in err


def test_a_topology_with_a_typo_is_still_quoted(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """Once a file looks like a topology, its errors quote it: that is what helps."""
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nnodes: {a: {memroy: 512}}\n")
    code, _, err = run_main(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "unknown key 'memroy'; did you mean 'memory'?" in " ".join(err.split())
    path.write_text("name: t\nnodes:\n  a: *undefined\n")
    code, _, err = run_main(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "found undefined alias 'undefined'" in err


def test_the_plausibility_keys_are_the_topology_keys() -> None:
    from labctl.topology.model import Topology
    from labctl.topology.reading import TOPOLOGY_KEYS

    assert set(Topology.model_fields) == TOPOLOGY_KEYS


# --- the Docker host VM's files follow the state dir ----------------------------------------
def test_docker_host_files_live_inside_a_given_state_dir(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """LABCTL_STATE_DIR=/tmp/x once put the VMs, their locks and the share in /tmp."""
    from labctl.dockerhost import hostnet, vm

    state = tmp_path / "x"
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    for name in ("default", "sw1"):
        made = vm.DockerHostVM(name)
        paths = [vm.vm_dir(name).path, vm.lock_file(name), made.socket, made.labdir.path]
        assert all(p.is_relative_to(state) for p in paths), paths
    assert vm.share_dir().is_relative_to(state) and hostnet.lock_path().is_relative_to(state)
    (state / ".docker-hosts" / "docker-host-sw1").mkdir(parents=True)
    (tmp_path / "docker-host-sw2").mkdir()  # beside the state dir: not one of its VMs
    assert vm.vm_names() == ["sw1"]


def test_docker_host_files_keep_their_default_place(monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.dockerhost import vm

    monkeypatch.delenv("LABCTL_STATE_DIR", raising=False)
    assert vm.vm_dir().path == Path("/var/lib/labctl/docker-host")
    assert vm.share_dir() == Path("/var/lib/labctl/docker-host-share")


# --- capture -r streams ---------------------------------------------------------------------
def test_decode_keeps_no_frame_it_has_printed(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    """`capture -r` prints and counts each frame, then lets it go: when frame N is printed,
    no earlier frame is alive (before, every frame was kept in a list to the end)."""
    import gc
    import weakref

    from labctl.wire import summary
    from tests.unit.roce_pcap import write_pcap

    path = tmp_path / "run.pcap"
    frames = write_pcap(path, 0.3)
    seen: list[weakref.ref[object]] = []
    alive_at_print: list[int] = []
    real_line = summary.line

    def watching_line(frame: summary.Frame, clock: summary.Clock) -> str:
        if len(seen) % 50 == 49:  # a full collection per frame took 100 s in the whole suite
            gc.collect()
            alive_at_print.append(sum(ref() is not None for ref in seen))
        seen.append(weakref.ref(frame))
        return real_line(frame, clock)

    monkeypatch.setattr(summary, "line", watching_line)
    code, out, err = run_main(monkeypatch, capsys, "capture", "-r", str(path))
    assert code == 0, err
    assert len(seen) == frames > 200 and len(alive_at_print) == frames // 50
    assert max(alive_at_print) <= 1  # at most the frame just before, still being let go
    assert f"RC_SEND_ONLY {(frames + 1) // 2}" in out


# Linux carries a process's peak RSS across exec(): a child forked from this (large) test
# process starts with this process's RSS as its peak. So the child is started by a small
# Python in between, and its own rusage (os.wait4) is what that one reports.
_MEASURE = ("import os, subprocess, sys\n"
            "child = subprocess.Popen(sys.argv[2:])\n"
            "_, status, usage = os.wait4(child.pid, 0)\n"
            "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")


def _child_peak_rss_mib(args: list[str], out: Path) -> tuple[float, int]:
    """Run `python -m labctl ARGS` (stdout and stderr to `out`); its peak RSS in MiB, from
    getrusage of that process alone, and its exit code."""
    rss = out.with_suffix(".rss")
    with out.open("wb") as sink:
        code = subprocess.run([sys.executable, "-c", _MEASURE, str(rss), sys.executable,
                               "-m", "labctl", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                              stdout=sink, stderr=sink, timeout=600, check=False).returncode
    return int(rss.read_text()) / 1024, code


def test_decoding_a_50_mb_pcap_costs_bounded_memory(tmp_path: Path) -> None:
    """50 MB of jumbo RoCE frames: the child's peak RSS is what labctl and scapy cost to
    start (about 90 MiB) plus a frame, not the file."""
    from tests.unit.roce_pcap import write_pcap

    path = tmp_path / "big.pcap"
    frames = write_pcap(path, 50, payload=60_000)
    assert path.stat().st_size >= 50_000_000
    peak, code = _child_peak_rss_mib(["capture", "-r", str(path)], tmp_path / "out")
    output = (tmp_path / "out").read_text()
    assert code == 0 and "Traceback" not in output, output[-2000:]
    assert f"RC_SEND_ONLY {(frames + 1) // 2}" in output
    assert peak < 160, f"peak RSS {peak:.0f} MiB for a 50 MB pcap"


def _bad_pcaps() -> list[tuple[str, bytes]]:
    from tests.unit import roce_pcap

    good = roce_pcap._PCAP_HEADER + b"".join(
        struct.pack("<IIII", 1, i, len(f), len(f)) + f
        for i, f in enumerate(roce_pcap._frame(i, i % 2 == 1) for i in range(4)))
    return [
        ("truncated-record", good[:-100]),
        ("truncated-record-header", good[:24 + 8]),
        ("header-only", good[:24]),
        ("short-header", good[:10]),
        ("empty", b""),
        ("huge-caplen", roce_pcap._PCAP_HEADER + struct.pack("<IIII", 1, 0, 0xFFFFFFF0,
                                                              0xFFFFFFF0) + b"x" * 100),
        ("zeros", b"\0" * 4096),
        ("pcapng", b"\x0a\x0d\x0d\x0a" + b"\0" * 100),
        ("text", b"not a capture\n" * 10),
        ("bad-linktype", good[:20] + struct.pack("<I", 0xFFFF) + good[24:]),
        ("gzip-garbage", b"\x1f\x8b\x08\x00" + b"\xff" * 200),
    ]


BAD_PCAPS = _bad_pcaps()
NOTED = {"truncated-record", "huge-caplen", "bad-linktype"}  # what scapy warns about


@pytest.mark.parametrize(("label", "data"), BAD_PCAPS, ids=[b[0] for b in BAD_PCAPS])
def test_a_damaged_pcap_is_a_clean_result_or_refusal(
        label: str, data: bytes, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / f"{label}.pcap"
    path.write_bytes(data)
    code, out, err = run_main(monkeypatch, capsys, "capture", "-r", str(path))
    assert "Traceback" not in out + err
    if code == 0:  # what could be read is decoded, and counted; the damage is noted
        assert "counts:" in out
        assert ("note:" in err) == (label in NOTED), err
        assert not err.startswith("WARNING")  # said in labctl's words, not scapy's
    else:
        assert_clean_refusal(code, out, err, "is not a pcap file")


FUZZ_KINDS = ["roce", "mad", "tcp", "mpa"]


@pytest.mark.parametrize("kind", FUZZ_KINDS)
def test_random_frames_decode_without_a_traceback(
        kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """A capture is data from nodes: 500 random RoCE, MAD, TCP and iWARP frames each."""
    import random

    from tests.unit.roce_pcap import tcp_frame, udp_frame, write_records

    rng = random.Random(kind)
    frames = []
    for i in range(500):
        body = rng.randbytes(rng.randrange(0, 300))
        if kind == "roce":
            frames.append(udp_frame(4791, body))
        elif kind == "mad":  # UD SEND to QP1: a MAD, as the RDMA CM sends them
            frames.append(udp_frame(4791, bytes([0x64, 0, 0xFF, 0xFF, 0, 0, 0, 1]) + bytes(4)
                                    + body))
        elif kind == "tcp":
            frames.append(tcp_frame(40000 + i % 3, 5000, rng.randrange(1 << 32),
                                    rng.choice([2, 16, 24]), body))
        else:
            frames += [tcp_frame(40000 + i, 5000, 0, 2, b""),
                       tcp_frame(40000 + i, 5000, 1, 24, b"MPA ID Req Frame" + body)]
    path = tmp_path / "fuzz.pcap"
    write_records(path, frames)
    code, out, err = run_main(monkeypatch, capsys, "capture", "-r", str(path))
    assert code == 0 and "Traceback" not in out + err, err
    assert out.count("\n") == len(frames) + 1


def test_iwarp_follows_a_bounded_number_of_connections() -> None:
    from labctl.wire.iwarp import MAX_CONNECTIONS, IwarpDecoder

    decoder = IwarpDecoder()
    for port in range(MAX_CONNECTIONS + 10):
        decoder.feed(("10.0.0.1", 1024 + port, "10.0.0.2", 5000), 0, b"", True)
    messages, why = decoder.feed(("10.0.0.1", 99, "10.0.0.2", 5000), 1, b"x", False)
    assert messages == [] and "not followed" in why
    assert len(decoder._conns) == MAX_CONNECTIONS


# --- paths the OS refuses ---------------------------------------------------------------------
def _refused_paths(tmp: Path) -> dict[str, str]:
    (tmp / "loop").symlink_to("loop")
    (tmp / "afile").write_text("")
    return {
        "name-too-long": str(tmp / ("a" * 300)),  # ENAMETOOLONG: one name over 255 bytes
        "path-too-long": str(tmp) + "/ab" * 2100 + "/x",  # ENAMETOOLONG: over PATH_MAX
        "link-loop": str(tmp / "loop" / "x"),  # ELOOP
        "file-as-directory": str(tmp / "afile" / "x"),  # ENOTDIR
    }


PATH_CASES = ["name-too-long", "path-too-long", "link-loop", "file-as-directory"]
# Every path a user gives to a command of this part of labctl (cp and --mount: see
# tests/unit for theirs), with {} for the path.
PATH_COMMANDS = [
    ["validate", "{}"], ["up", "{}"], ["down", "{}"],
    ["capture", "-r", "{}"], ["capture", "-r", "{pcap}", "--ladder", "{}.png"],
    ["capture", "node1:eth1", "-w", "{}"], ["bench", "--plot", "{}"],
    ["run", "pingpong", "--capture-dir", "{}"], ["run", "all", "--capture-dir", "{}"],
]


@pytest.mark.parametrize("command", PATH_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("case", PATH_CASES)
def test_a_path_the_os_refuses_is_exit_2(command: list[str], case: str,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    path = _refused_paths(tmp_path)[case]
    pcap = tmp_path / "run.pcap"
    pcap.write_bytes(b"")  # --ladder's path is checked before the pcap is read
    args = [a.replace("{pcap}", str(pcap)).replace("{}", path) for a in command]
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert_clean_refusal(code, out, err)
    reason = {"link-loop": "Too many levels of symbolic links",
              "file-as-directory": "Not a directory"}.get(case, "File name too long")
    assert reason in " ".join(err.split()), err
    assert not (tmp_path / "state").exists()


def test_check_path_kinds(tmp_path: Path) -> None:
    from labctl.cli.common import check_path

    (tmp_path / "f").write_text("")
    assert check_path("--x", tmp_path / "f", "read") == tmp_path / "f"
    assert check_path("--x", tmp_path / "missing", "read") == tmp_path / "missing"
    assert check_path("--x", tmp_path / "new.png", "write") == tmp_path / "new.png"
    assert check_path("--x", tmp_path / "newdir", "dir") == tmp_path / "newdir"
    for value, kind, says in [(tmp_path, "write", "is a directory"),
                              (tmp_path / "f", "dir", "is not a directory"),
                              (tmp_path / "no" / "new.png", "write", "no directory"),
                              (str(tmp_path / "a\0b"), "read", "null byte")]:
        with pytest.raises(UsageError) as caught:
            check_path("--x", value, kind)  # type: ignore[arg-type]
        assert says in caught.value.message and caught.value.hint


def test_capture_worker_values_are_never_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """`capture -w ./-x.pcap` or a filter are values: --opt=VALUE, positionals after --."""
    from labctl.capture import process
    from labctl.capture.target import CaptureTarget
    from labctl.capture.worker import argument_parser

    seen: list[list[str]] = []

    class FakeProc:
        stderr: tuple[bytes, ...] = ()  # _read_stderr reads nothing

    monkeypatch.setattr(process.Capture, "_popen",
                        staticmethod(lambda argv, stdout: seen.append(argv) or FakeProc()))
    target = CaptureTarget("node1", "eth1", "labctl-t", "-tap0")
    process.Capture(target, Path("-x.pcap"), count=5, bpf="-w /tmp/y")
    argv = seen[0]
    assert argv[argv.index("--") + 1:] == ["labctl-t", "-tap0"]
    assert "--write=-x.pcap" in argv and "--filter=-w /tmp/y" in argv
    args = argument_parser().parse_args(argv[argv.index("labctl.capture.worker") + 1:])
    assert (args.netns, args.device, args.write, args.filter, args.count) == (
        "labctl-t", "-tap0", "-x.pcap", "-w /tmp/y", 5)


def test_a_comma_in_the_state_dir_adds_no_qemu_option(tmp_path: Path) -> None:
    """qemu splits its option lists at commas: a path in one is escaped (`,,`)."""
    from labctl.vm.machine import QemuMachine, Share

    machine = QemuMachine(tmp_path / "lab,readonly=on" / "node1", "labctl-t-node1")
    argv = machine.argv(accel="tcg", memory_mib=512, cpus=1, kernel=tmp_path / "k",
                        append="console=ttyS0", ssh_port=2222, mgmt_mac="52:54:00:00:00:01",
                        nics=[], shares=(Share("tag0", str(tmp_path / "a,b"), True),))
    drive = argv[argv.index("-drive") + 1]
    qmp = argv[argv.index("-qmp") + 1]
    fsdev = argv[argv.index("-fsdev") + 1]
    assert "lab,,readonly=on" in drive and drive.count(",readonly=on") == 1  # only inside ,,
    assert "lab,,readonly=on" in qmp
    assert f"path={tmp_path}/a,,b," in fsdev


def test_box_disk_size_from_qemu_img(tmp_path: Path) -> None:
    import shutil

    from labctl.images import box

    if shutil.which("qemu-img") is None:
        pytest.skip("qemu-img is not installed")
    disk = tmp_path / "d.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "3G"], check=True)
    assert box._virtual_size(disk) == 3


@pytest.mark.parametrize("output", ["", "not json", "[]", '{"virtual-size": "big"}',
                                    '{"virtual-size": -1}', '{"virtual-size": true}', "{}",
                                    '{"virtual-size": NaN}', "[" * 10_000])
def test_box_disk_size_refuses_an_unusable_answer(output: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.errors import LabctlError
    from labctl.images import box

    monkeypatch.setattr(box.hostproc, "run", lambda argv, **_kwargs: subprocess.CompletedProcess(
        argv, 0, output, ""))
    with pytest.raises(LabctlError) as caught:
        box._virtual_size(Path("/x/box.img"))
    assert "qemu-img info" in caught.value.message and caught.value.hint
