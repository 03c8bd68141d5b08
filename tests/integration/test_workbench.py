"""A live workbench lab (two nodes, the dev image, a read-write host folder in both and a
read-only one in node1): the folders both ways, `labctl cp` both ways, `exec --all`,
`run custom` passing (placeholders filled in) and failing (exit 1, output kept)."""

from __future__ import annotations

import filecmp
import os
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import LAB_NAME, labctl, only_record
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration
WB_LAB = os.environ.get("LABCTL_TEST_WB_LAB", f"{LAB_NAME}-wb"[:20])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workbench")


@pytest.fixture(scope="module")
def topology(workdir: Path) -> Path:
    """Two dev-image nodes, the host folder ./shared read-write at /work in both (node1
    also has it read-only at /data); ./extra is for `up --mount`."""
    (workdir / "shared").mkdir()
    (workdir / "extra").mkdir()
    (workdir / "extra" / "note.txt").write_text("extra\n")
    topology = {
        "name": WB_LAB,
        "defaults": {"image": "trixie-dev", "mounts": ["./shared:/work"]},
        "nodes": {"node1": {"mounts": ["./shared:/data:ro"]}, "node2": {}},
        "links": [{"endpoints": ["node1:eth1", "node2:eth1"]}],
    }
    path = workdir / "wb.yaml"
    path.write_text(yaml.safe_dump(topology, sort_keys=False))
    return path


# `up --mount` adds ./extra at /extra, read-only, to every node.
workbench = module_lab(WB_LAB, up_args=lambda topology: [
    "--mount", f"{topology.parent / 'extra'}:/extra:ro"])


@pytest.fixture(scope="module")
def wb_lab(workbench: ModuleLab) -> Path:
    """The host folder every node has read-write at /work."""
    return workbench.topology.parent / "shared"


def _exec(node: str, script: str) -> tuple[int, str, str]:
    result = labctl("exec", node, "--lab", WB_LAB, "--", "sh", "-c", script, timeout=120)
    return result.returncode, result.stdout, result.stderr


VERBS_PROGRAM = r"""
#include <stdio.h>
#include <infiniband/verbs.h>
int main(void) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return 1;
    for (int i = 0; i < n; i++) printf("device %s\n", ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return 0;
}
"""


def test_dev_image_builds_and_runs_verbs_code(wb_lab: Path) -> None:
    """A verbs program written on the host, compiled and run in the node, in /work."""
    (wb_lab / "devices.c").write_text(VERBS_PROGRAM)
    code, out, err = _exec("node1", "cd /work && gcc -Wall -o devices devices.c "
                           "$(pkg-config --cflags --libs libibverbs) && ./devices && "
                           "make --version >/dev/null && gdb --version >/dev/null && "
                           "strace -V >/dev/null && pkg-config --libs librdmacm && "
                           "python3 -c 'import pyverbs'")
    assert code == 0, err
    assert [line.strip() for line in out.splitlines()] == ["device rxe0", "-lrdmacm"]
    assert (wb_lab / "devices").is_file()  # the binary is on the host too


def test_host_folder_both_ways(wb_lab: Path) -> None:
    token = uuid.uuid4().hex
    (wb_lab / "from-host.txt").write_text(token + "\n")
    for node in ("node1", "node2"):
        code, out, err = _exec(node, "cat /work/from-host.txt")
        assert (code, out) == (0, token + "\n"), err
    code, _, err = _exec("node2", f"echo {token}-node2 > /work/from-node2.txt")
    assert code == 0, err
    assert (wb_lab / "from-node2.txt").read_text() == f"{token}-node2\n"
    # the other node sees it through the host (no cache in between)
    code, out, _ = _exec("node1", "cat /work/from-node2.txt")
    assert (code, out) == (0, f"{token}-node2\n")


def test_read_only_folders_refuse_writes(wb_lab: Path) -> None:
    (wb_lab / "ro-seen.txt").write_text("seen\n")
    code, out, _ = _exec("node1", "cat /data/ro-seen.txt /extra/note.txt")
    assert (code, out) == (0, "seen\nextra\n")
    for path in ("/data/x.txt", "/extra/x.txt"):
        code, _, err = _exec("node1", f"echo no > {path}")
        assert code != 0 and "Read-only file system" in err
    assert not (wb_lab / "x.txt").exists()


def test_cp_both_ways(wb_lab: Path, workdir: Path) -> None:
    tree = workdir / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(100_000))
    out = labctl("cp", "--lab", WB_LAB, str(tree), "node2:/root/", check=True).stdout
    assert "node2:/root/" in out
    labctl("cp", "--lab", WB_LAB, str(tree / "a.txt"), "node2:/root/renamed.txt", check=True)
    code, listing, _ = _exec("node2", "cd /root && find tree renamed.txt | sort")
    assert code == 0
    assert listing.split() == ["renamed.txt", "tree", "tree/a.txt", "tree/sub", "tree/sub/b.bin"]
    back = workdir / "back"
    back.mkdir()
    labctl("cp", "--lab", WB_LAB, "node2:/root/tree", str(back), check=True)
    labctl("cp", "--lab", WB_LAB, "node2:/root/renamed.txt", str(back / "r.txt"), check=True)
    compare = filecmp.dircmp(tree, back / "tree")
    assert not (compare.left_only or compare.right_only or compare.diff_files)
    assert filecmp.cmp(tree / "sub" / "b.bin", back / "tree" / "sub" / "b.bin", shallow=False)
    assert (back / "r.txt").read_text() == "a\n"
    missing = labctl("cp", "--lab", WB_LAB, "node2:/root/no-such", str(back))
    assert missing.returncode == 2
    assert "no such file or directory in the node" in missing.stderr


def test_exec_all_labels_every_node(wb_lab: Path) -> None:
    result = labctl("exec", "--all", "--lab", WB_LAB, "--", "hostname", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["node1: node1", "node2: node2"]
    failed = labctl("exec", "--all", "--lab", WB_LAB, "--", "sh", "-c",
                    'echo "out $(hostname)"; [ "$(hostname)" = node1 ] || { echo bad >&2; '
                    "exit 3; }", timeout=120)
    assert failed.returncode == 1
    assert failed.stdout.splitlines() == ["node1: out node1", "node2: out node2"]
    assert "node2: bad" in failed.stderr.splitlines()
    assert "node2 (exit 3)" in failed.stderr


def test_run_custom_passes_with_placeholders(wb_lab: Path) -> None:
    started = time.monotonic()
    result = labctl(
        "run", "custom", "--lab", WB_LAB, "--json", "--port", "18620", "--ready-port", "18620",
        "--server-cmd", "echo dev={device} gid={gid_index}; ib_send_bw -d {device} -x {gid_index} "
        "-n 20 -p {port}",
        "--client-cmd", "ib_send_bw -d {device} -x {gid_index} -n 20 -p {port} {server_ip}",
        timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    record = only_record(result.stdout)
    assert record["status"] == "passed"
    assert record["server_argv"][:2] == ["sh", "-c"]
    assert record["client_argv"][2] == "ib_send_bw -d rxe0 -x 1 -n 20 -p 18620 10.77.1.1"
    assert "dev=rxe0 gid=1" in record["server_output"]
    assert "BW average" in record["client_output"] or "#bytes" in record["client_output"]
    assert time.monotonic() - started < 240


def test_run_custom_failure_exits_1_with_output(wb_lab: Path) -> None:
    result = labctl("run", "custom", "--lab", WB_LAB, "--server-cmd", "echo listening; exit 0",
                    "--client-cmd", "echo from-client-{client_ip}; exit 7", timeout=120)
    assert result.returncode == 1
    assert "client exited with 7" in result.stderr
    assert "from-client-10.77.1.2" in result.stderr
    assert "listening" in result.stderr
