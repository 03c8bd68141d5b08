"""A topology file is untrusted input (issue 35, item 2): its mounts may not share the host's
own directories unless the command line says so, `validate` and `up` show every mount, and
counts (links, a qemu node's PCI slots, memory and CPUs against the host) are checked by
`validate` before `up` makes anything. The file corpus is in tests/unit/topology/bad
(mounts-*, qemu-*); the cases that need a temporary directory or the host's figures are
here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from labctl.lab import lifecycle
from labctl.topology.errors import TopologyError
from labctl.topology.host import (
    FLAG,
    QEMU_PC_SLOTS,
    HostFacts,
    refusal,
    resolve_allowances,
)
from labctl.topology.load import load_lab, parse_topology
from labctl.topology.model import MAX_LINKS
from tests.unit.clirun import run_main

TWO = "nodes:\n  node1:\n    mounts: [{mount!r}]\n  node2: {{}}\n" \
      "links:\n  - endpoints: [node1:eth1, node2:eth1]\n"


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state" / "labs"))
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "state" / "labs").mkdir(parents=True)
    (tmp_path / "cache").mkdir()
    (tmp_path / "proj").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _topology(tmp_path: Path, mount: str, name: str = "trust", extra: str = "") -> Path:
    path = tmp_path / "proj" / "t.yaml"
    path.write_text(f"name: {name}\n{extra}" + TWO.format(mount=mount))
    return path


def _refused(path: Path, **kwargs: object) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        load_lab(path, **kwargs)  # type: ignore[arg-type]
    assert info.value.exit_code == 2
    return info.value


# --------------------------------------------------------------------------- which folders

REFUSED = [
    ("/", "the host's root directory"),
    ("/etc", "a system directory of the host"),
    ("/etc/ssh", "inside the host's system directory /etc"),
    ("/proc", "a system directory of the host"),
    ("/proc/self", "inside the host's system directory /proc"),
    ("/sys/kernel", "inside the host's system directory /sys"),
    ("/dev", "a system directory of the host"),
    ("/boot", "a system directory of the host"),
    ("/usr", "a system directory of the host"),
    ("/usr/local/src", "inside the host's system directory /usr"),
    ("/bin", "a system directory of the host"),
    ("/sbin", "a system directory of the host"),
    ("/lib", "a system directory of the host"),
    ("/lib64", "a system directory of the host"),
    ("/lib32", "a system directory of the host"),
    ("/var", "a system directory of the host"),
    ("/var/lib/labctl", "inside the host's system directory /var"),
    ("/var/lib/docker", "inside the host's system directory /var"),
    ("/run", "a system directory of the host"),
    ("/root", "a system directory of the host"),
    ("/root/.ssh", "inside the host's system directory /root"),
    ("/opt", "a system directory of the host"),
    ("/home", "the root of every user's home directory"),
    ("/home/alice", "a whole home directory (its shell startup files and ~/.ssh)"),
    ("/tmp", "the host's shared /tmp (every user's and service's sockets)"),
]


@pytest.mark.parametrize(("path", "why"), REFUSED, ids=[r[0] for r in REFUSED])
def test_host_directories_are_refused(path: str, why: str) -> None:
    assert refusal(Path(path)) == why


@pytest.mark.parametrize("path", ["/home/alice/src", "/tmp/project", "/srv/data", "/mnt/x",
                                  "/media/usb/src", "/work/rdma"])
def test_project_folders_are_not(path: str) -> None:
    assert refusal(Path(path)) is None


def test_labctls_own_state_and_cache_are_refused(tmp_path: Path) -> None:
    state, cache = tmp_path / "state" / "labs", tmp_path / "cache"
    assert refusal(state) == "labctl's state directory"
    assert refusal(state / "lab1") == f"inside labctl's state directory {state}"
    assert refusal(tmp_path / "state") == f"a parent of labctl's state directory {state}"
    assert refusal(tmp_path) == f"a parent of labctl's state directory {state}"
    assert refusal(cache / "img") == f"inside labctl's image cache {cache}"
    assert refusal(tmp_path / "proj") is None


def test_a_symlink_in_the_topologys_folder_is_where_it_leads(tmp_path: Path) -> None:
    (tmp_path / "proj" / "conf").symlink_to("/etc")
    err = _refused(_topology(tmp_path, "./conf:/work"))
    assert err.message == (
        f"{tmp_path}/proj/t.yaml:4: nodes.node1.mounts[0]: the host folder './conf' (/etc) "
        "is a system directory of the host; a node runs code as root and would reach the "
        "host's files there")
    assert err.hint == ("mount a project folder instead; to share this one anyway, say so on "
                        f"the command line: {FLAG} /etc")


def test_a_symlink_chain_to_the_state_dir(tmp_path: Path) -> None:
    (tmp_path / "proj" / "a").symlink_to(tmp_path / "proj" / "b")
    (tmp_path / "proj" / "b").symlink_to(tmp_path / "state" / "labs")
    err = _refused(_topology(tmp_path, "a:/work:ro"))
    assert f"the host folder 'a' ({tmp_path}/state/labs) is labctl's state directory;" \
        in err.message


def test_dotdot_to_the_state_dir_is_refused(tmp_path: Path) -> None:
    err = _refused(_topology(tmp_path, "../state/labs/../..:/work"))
    assert f"({tmp_path}) is a parent of labctl's state directory {tmp_path}/state/labs" \
        in err.message


def test_the_flag_allows_the_folder_and_below_only(tmp_path: Path) -> None:
    allowed = resolve_allowances(["/etc"])
    lab = load_lab(_topology(tmp_path, "/etc/ssh:/work:ro"), allowances=allowed)
    assert lab.nodes[0].mounts[0].source == "/etc/ssh"
    _refused(_topology(tmp_path, "/usr:/work"), allowances=allowed)
    _refused(_topology(tmp_path, "/:/work"), allowances=allowed)


def test_a_topology_key_cannot_allow_it(tmp_path: Path) -> None:
    path = _topology(tmp_path, "/etc:/work", extra="allow_host_mount: [/etc]\n")
    err = _refused(path)
    assert err.message == f"{path}:2: allow_host_mount: unknown key 'allow_host_mount'"


def test_the_source_recorded_is_the_resolved_one(tmp_path: Path) -> None:
    (tmp_path / "proj" / "src").mkdir()
    (tmp_path / "proj" / "link").symlink_to("src")
    lab = load_lab(_topology(tmp_path, "./link/../link:/work"))
    assert lab.nodes[0].mounts[0].source == str(tmp_path / "proj" / "src")


# --------------------------------------------------------------------------- the CLI

def test_validate_shows_every_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "proj" / "src").mkdir()
    path = tmp_path / "proj" / "t.yaml"
    path.write_text("name: trust\ndefaults: {mounts: ['./src:/src:ro']}\nnodes:\n"
                    "  node1: {mounts: ['/etc/ssh:/hostssh']}\n  node2: {}\n"
                    "links:\n  - endpoints: [node1:eth1, node2:eth1]\n")
    code, out, err = run_main(monkeypatch, capsys, "validate", str(path))
    assert code == 2
    assert f"hint: mount a project folder instead; to share this one anyway, say so on the " \
        f"command line: {FLAG} /etc/ssh" in " ".join(err.split())
    code, out, err = run_main(monkeypatch, capsys, "validate", str(path), FLAG, "/etc/ssh")
    assert (code, err) == (0, "")
    src = tmp_path / "proj" / "src"
    assert out.splitlines()[-4:] == [
        "mounts (host folder -> node path):",
        f"  node1  {src} -> /src  ro",
        "  node1  /etc/ssh -> /hostssh  rw",
        f"  node2  {src} -> /src  ro",
    ]
    code, out, _ = run_main(monkeypatch, capsys, "validate", "--json", str(path), FLAG,
                            "/etc/ssh")
    assert code == 0
    nodes = json.loads(out)["nodes"]
    assert nodes[0]["mounts"] == [
        {"source": str(src), "target": "/src", "readonly": True},
        {"source": "/etc/ssh", "target": "/hostssh", "readonly": False}]


def _state_is_untouched(tmp_path: Path) -> None:
    assert list((tmp_path / "state" / "labs").iterdir()) == []


@pytest.mark.parametrize("args", [
    ["--mount", "/etc:/x"],
    ["--mount", "/:/x:ro"],
    ["--mount", "state/labs:/x"],
])
def test_up_mount_is_refused_before_anything_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str]) -> None:
    (tmp_path / "proj" / "src").mkdir()
    path = _topology(tmp_path, "src:/src")
    code, _, err = run_main(monkeypatch, capsys, "up", str(path), *args)
    assert code == 2
    assert f"--mount '{args[1]}': the host folder" in err
    assert f"hint: mount a project folder instead; to share this one anyway, say so on the " \
        f"command line: {FLAG} " in " ".join(err.split())  # as wrapped to the terminal
    _state_is_untouched(tmp_path)


def test_up_refuses_a_topology_mount_before_anything_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "up", str(_topology(tmp_path, "/proc:/p")))
    assert code == 2
    assert "nodes.node1.mounts[0]: the host folder '/proc' is a system directory" in err
    assert out == ""
    _state_is_untouched(tmp_path)


def test_up_prints_the_mounts_before_it_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "proj" / "src").mkdir()
    (tmp_path / "extra").mkdir()
    started: list[lifecycle.UpOptions] = []

    def no_lab(path: Path, options: lifecycle.UpOptions, progress: object,
               resolved: object) -> None:
        started.append(options)
        raise lifecycle.LabctlError("stopped by the test")

    monkeypatch.setattr(lifecycle, "up", no_lab)
    code, out, _ = run_main(monkeypatch, capsys, "up", str(_topology(tmp_path, "src:/src")),
                            "--mount", "extra:/extra:ro", FLAG, "/etc")
    assert code == 1
    assert out.splitlines() == [
        "mounts (host folder -> node path):",
        f"  node1  {tmp_path}/proj/src -> /src  rw",
        f"  node1  {tmp_path}/extra -> /extra  ro",
        f"  node2  {tmp_path}/extra -> /extra  ro",
    ]
    assert started[0].allow_host_mounts == ("/etc",)


# --------------------------------------------------------------------------- counts

def _nics(count: int, provider: str = "qemu", mounts: int = 0) -> str:
    folders = ", ".join(f"'proj:/m{i}'" for i in range(mounts))
    lines = [f"name: t\nprovider: {provider}\ndefaults: {{rdma: none}}\nnodes:\n"
             f"  a: {{mounts: [{folders}]}}\n  b: {{}}",
             "links:" if count else "links: []"]
    lines += [f"  - endpoints: [a:eth{i}, b:eth{i}]" for i in range(1, count + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("nics", "mounts"), [(QEMU_PC_SLOTS, 0), (20, 6), (0, 16)])
def test_a_qemu_node_may_fill_its_pci_slots(nics: int, mounts: int) -> None:
    topology = parse_topology(_nics(nics, mounts=mounts))
    assert len(topology.links) == nics
    assert len(topology.nodes["a"].mounts or []) == mounts


@pytest.mark.parametrize(("nics", "mounts"), [(QEMU_PC_SLOTS + 1, 0), (34, 0), (11, 16),
                                              (99, 0)])
def test_a_qemu_node_beyond_its_pci_slots_is_refused(nics: int, mounts: int) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(_nics(nics, mounts=mounts), "t.yaml")
    # node a has the mounts; b, at the other end of every link, is refused too when the
    # links alone are too many
    over = [(5, "a", mounts)] + ([(6, "b", 0)] if nics > QEMU_PC_SLOTS else [])
    assert [p.text("t.yaml") for p in info.value.problems] == [
        f"t.yaml:{line}: nodes.{node}: node {node} has {nics} links and {held} mounts: a "
        f"qemu node has PCI slots for {QEMU_PC_SLOTS} of them together"
        for line, node, held in over]


@pytest.mark.parametrize("provider", ["docker", "vagrant"])
def test_pci_slots_are_a_qemu_fact(provider: str) -> None:
    topology = parse_topology(_nics(40, provider))
    assert (topology.provider, len(topology.links)) == (provider, 40)


def test_too_many_links() -> None:
    links = "\n".join(f"  - endpoints: [a:eth{i % 99 + 1}, b:eth{i % 99 + 1}]"
                      for i in range(MAX_LINKS + 1))
    text = ("name: t\nprovider: docker\naddressing: {pool: 10.0.0.0/8, prefix: 30}\n"
            f"nodes: {{a: {{}}, b: {{}}}}\nlinks:\n{links}\n")
    with pytest.raises(TopologyError) as info:
        parse_topology(text, "t.yaml")
    # the first problem; the links that reuse an interface after eth99 are the others
    assert info.value.problems[0].text("t.yaml") == (
        f"t.yaml:5: links: too many links: {MAX_LINKS + 1} (at most {MAX_LINKS})")


SMALL = HostFacts(memory_mib=2048, cpus=2)
RESOURCES = [
    ("node memory", "defaults: {rdma: none}\nnodes: {a: {memory: 4096}, b: {}}",
     "t.yaml:4: nodes.a.memory: node a asks for 4096 MiB of memory; this host has 2048 MiB"),
    ("default memory", "defaults: {memory: 3000, rdma: none}\nnodes: {a: {}, b: {}}",
     "t.yaml:3: defaults.memory: node a asks for 3000 MiB of memory; this host has 2048 MiB"),
    ("memory in total", "defaults: {rdma: none}\nnodes: {a: {memory: 1024}, b: {memory: 1024}, "
     "c: {}}",
     "t.yaml:4: nodes: the nodes ask for 2560 MiB of memory together; this host has 2048 "
     "MiB"),
    ("node cpus", "defaults: {rdma: none}\nnodes: {a: {}, b: {cpus: 3}}",
     "t.yaml:4: nodes.b.cpus: node b asks for 3 CPUs; this host has 2"),
    ("default cpus", "defaults: {cpus: 64, rdma: none}\nnodes: {a: {}}",
     "t.yaml:3: defaults.cpus: node a asks for 64 CPUs; this host has 2"),
]


@pytest.mark.parametrize(("body", "message"), [r[1:] for r in RESOURCES],
                         ids=[r[0] for r in RESOURCES])
@pytest.mark.parametrize("provider", ["qemu", "vagrant"])
def test_memory_and_cpus_against_the_host(tmp_path: Path, body: str, message: str,
                                          provider: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(f"name: t\nprovider: {provider}\n{body}\n")
    with pytest.raises(TopologyError) as info:
        load_lab(path, host=SMALL)
    assert info.value.message == f"{path}:" + message.removeprefix("t.yaml:")
    assert info.value.exit_code == 2


def test_every_node_too_big_is_said_and_a_default_once(tmp_path: Path) -> None:
    """Nodes too big each get their line; a default too big is one problem however many
    nodes take it; the total is not said when a node alone is too big."""
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ndefaults: {rdma: none, cpus: 4}\n"
                    "nodes: {a: {memory: 4096}, b: {memory: 3000}, c: {}, d: {}}\n")
    with pytest.raises(TopologyError) as info:
        load_lab(path, host=SMALL)
    assert [p.text("t.yaml") for p in info.value.problems] == [
        "t.yaml:2: defaults.cpus: node a asks for 4 CPUs; this host has 2",
        "t.yaml:3: nodes.a.memory: node a asks for 4096 MiB of memory; this host has 2048 MiB",
        "t.yaml:3: nodes.b.memory: node b asks for 3000 MiB of memory; this host has 2048 MiB",
    ]
    assert info.value.hint == "give the node at most 2\nhint: give the node less memory"


def test_a_clash_of_the_defaults_mounts_is_said_once(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "data").mkdir()
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ndefaults: {rdma: none, mounts: [./src:/work, ./data:/work]}\n"
                    "nodes: {a: {}, b: {mounts: [./data:/data, ./src:/data]}}\n")
    with pytest.raises(TopologyError) as info:
        load_lab(path)
    assert [p.text("t.yaml") for p in info.value.problems] == [
        "t.yaml:2: defaults.mounts[1]: node a already mounts a folder at /work",
        "t.yaml:3: nodes.b.mounts[1]: node b already mounts a folder at /data",
    ]


def test_what_fits_passes_and_docker_is_not_compared(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    head = "name: t\ndefaults: {rdma: none}\n"
    path.write_text(head + "nodes: {a: {memory: 1024}, b: {memory: 1024, cpus: 2}}\n")
    assert [n.memory_mib for n in load_lab(path, host=SMALL).nodes] == [1024, 1024]
    path.write_text(head + "provider: docker\nnodes: {a: {memory: 65536, cpus: 64}}\n")
    load_lab(path, host=SMALL)  # a container's memory is a ceiling; its engine may be remote
    path.write_text(head + "nodes: {a: {memory: 65536, cpus: 64}}\n")
    load_lab(path)  # no host given (the library, the goldens): not compared


def test_the_hosts_figures() -> None:
    facts = HostFacts.this()
    assert facts.cpus == os.cpu_count()
    assert facts.memory_mib == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20


def test_validate_and_up_compare_with_this_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(HostFacts, "this", classmethod(lambda cls: SMALL))
    path = tmp_path / "proj" / "t.yaml"
    path.write_text("name: t\nnodes: {a: {cpus: 4, rdma: none}}\n")
    for command in ("validate", "up"):
        code, _, err = run_main(monkeypatch, capsys, command, str(path))
        assert code == 2
        assert "nodes.a.cpus: node a asks for 4 CPUs; this host has 2" in err
        assert "hint: give the node at most 2" in err
    _state_is_untouched(tmp_path)
