"""NVMe over Fabrics and NFS over RDMA, live in the workloads lab (rxe1..rxe3 rxe, siw1
siw2 siw): each run writes a random pattern, reads it back with O_DIRECT and compares the
SHA-256 sums in the client node; the tests assert the bytes were verified and that the
traffic went where the transport says (rxe's packet counters move for RDMA, not for TCP).
Small sizes: TCG moves a few MB/s over rxe.
"""

from __future__ import annotations

from typing import Any

import pytest

from labctl.runners.example_spec import RunContext
from labctl.runners.execute import RunResult, endpoint, failure_details
from labctl.runners.nvmeof import NQN_PREFIX
from labctl.runners.storage import WORKLOADS, run_storage
from tests.integration.conftest import labctl, run_records
from tests.integration.modulelab import ModuleLab

pytestmark = pytest.mark.integration

MIB = 4
SMALL = {"size_mib": MIB, "timeout": 240.0}


def explain(result: RunResult) -> str:
    return f"{result.label}: {result.status} ({result.reason})\n{failure_details(result)}"


def assert_verified(result: RunResult) -> None:
    assert result.status == "passed", explain(result)
    figures = result.figures
    assert figures["verified"] is True, explain(result)
    assert figures["write_bytes"] == figures["read_bytes"] == MIB * 1048576
    assert figures["write_mb_s"] > 0 and figures["read_mb_s"] > 0


def rxe_packets(record: dict[str, Any], node: str) -> int:
    node_counters = (record["counters"] or {}).get(node) or {}
    return int(node_counters.get("rxe0/1", {}).get("sent_pkts", 0))


def test_nvmeof_over_rdma_and_tcp_on_rxe(workloads_lab: ModuleLab) -> None:
    """The CLI's path: one command, both transports, one record each."""
    done = labctl("run", "nvmeof", "--lab", workloads_lab.name, "--server", "rxe1",
                  "--client", "rxe2", "--size-mib", str(MIB), "--json", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    records = run_records(done.stdout)
    assert [r["variant"] for r in records] == ["rdma", "tcp"]
    for record in records:
        assert record["status"] == "passed" and record["figures"]["verified"] is True, record
        assert record["figures"]["write_bytes"] == MIB * 1048576
        assert record["figures"]["target"].startswith("/dev/nvme")
    rdma, tcp = records
    # MIB MiB each way over RoCE: at least one packet per KiB (the path MTU is 1024)
    assert rxe_packets(rdma, "rxe2") > MIB * 1024, rdma["counters"]
    assert rxe_packets(tcp, "rxe2") == 0, tcp["counters"]
    assert "rdma_cms:    rdma-cm" in rdma["client_output"]


def test_nvmeof_over_rdma_on_siw(workloads_lab: ModuleLab) -> None:
    result = run_storage(workloads_lab.handle, WORKLOADS[("nvmeof", "rdma")], "siw1", "siw2",
                         SMALL)
    assert_verified(result)
    assert "labctl: discovered nqn.2014-08.org.rdma-lab:labctl.siw1.rdma" in \
        result.client_output


@pytest.mark.parametrize(("transport", "server", "client"), [
    ("rdma", "rxe3", "rxe1"), ("rdma", "siw2", "siw1"), ("tcp", "rxe2", "rxe3")])
def test_nfs(workloads_lab: ModuleLab, transport: str, server: str, client: str) -> None:
    result = run_storage(workloads_lab.handle, WORKLOADS[("nfs", transport)], server, client,
                         SMALL)
    assert_verified(result)
    assert f"proto={transport}," in result.client_output, explain(result)
    if transport == "rdma":
        assert "portlist: rdma 20049" in result.server_output


def test_a_previous_run_s_target_and_connection_are_removed_first(
        workloads_lab: ModuleLab) -> None:
    """What a run killed midway leaves (a target on the server, a connection on the
    client) is removed by the next run before it starts, and the next run passes."""
    handle = workloads_lab.handle
    workload = WORKLOADS[("nvmeof", "tcp")]
    ctx = RunContext(endpoint(handle, "rxe3"), endpoint(handle, "rxe2"), SMALL)
    setup = handle.run("rxe3", workload.spec.server_argv(ctx), timeout=120)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    nqn = f"{NQN_PREFIX}rxe3.tcp"
    connect = handle.run("rxe2", ["sh", "-c", 'modprobe nvme-tcp && nvme connect -t tcp '
                                  '-a "$1" -s 4420 -n "$2"', "sh", ctx.server.address, nqn],
                         timeout=120)
    assert connect.returncode == 0, connect.stdout + connect.stderr
    result = run_storage(handle, workload, "rxe3", "rxe2", SMALL)
    assert_verified(result)
    assert result.client_output.startswith(f"labctl: disconnected {nqn}\n"), explain(result)
    assert f"labctl: removed subsystem {nqn}" in result.server_output.split("labctl: target")[0]
    left = handle.run("rxe2", ["sh", "-c", "cat /sys/class/nvme/*/subsysnqn 2>/dev/null; true"],
                      timeout=60)
    assert NQN_PREFIX not in left.stdout, left.stdout


# What blktests' nvme group needs of a node, without blktests (docs/workloads.md, "blktests
# in a node"): a loop device backing an nvmet namespace, the target set up through
# configfs, the kernel host connected to it over rdma on the same node (blktests'
# NVMET_TRTYPES=rdma on siw), bash's process substitution and awk to compare. $1: the
# node's data address. A port and NQN of their own (4421, ...:fidelity.loop), removed in
# the trap, so the runner's targets above are never touched.
LOOP_TARGET = r"""
set -u
A=$1 NQN=nqn.2014-08.org.rdma-lab:fidelity.loop PORT=7703 SVC=4421
C=/sys/kernel/config N=/sys/kernel/config/nvmet
S=$N/subsystems/$NQN P=$N/ports/$PORT
dir=$(mktemp -d) dev=
cleanup() {
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  rm -f "$P/subsystems/$NQN"; [ -d "$P" ] && rmdir "$P"
  if [ -d "$S/namespaces/1" ]; then echo 0 > "$S/namespaces/1/enable"; rmdir "$S/namespaces/1"; fi
  [ -d "$S" ] && rmdir "$S"
  [ -n "$dev" ] && losetup -d "$dev"
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "failed: $*"; dmesg | tail -n 12; exit 1; }
grep -q " $C configfs " /proc/mounts || mount -t configfs configfs "$C" || fail configfs
truncate -s 32M "$dir/backing" && dev=$(losetup -f --show "$dir/backing") || fail losetup
echo "loop $dev"
modprobe -a nvmet nvmet-rdma nvme-rdma || fail modprobe
mkdir "$S" && echo 1 > "$S/attr_allow_any_host" && mkdir "$S/namespaces/1" &&
  echo "$dev" > "$S/namespaces/1/device_path" && echo 1 > "$S/namespaces/1/enable" ||
  fail "namespace on $dev"
mkdir "$P" && echo rdma > "$P/addr_trtype" && echo ipv4 > "$P/addr_adrfam" &&
  echo "$A" > "$P/addr_traddr" && echo "$SVC" > "$P/addr_trsvcid" &&
  ln -s "$S" "$P/subsystems/$NQN" || fail "port rdma $A:$SVC"
try=1
until nvme connect -t rdma -a "$A" -s "$SVC" -n "$NQN" > /dev/null; do
  [ $try -ge 3 ] && fail connect
  try=$((try + 1)); sleep 2
done
blk=
for i in $(seq 50); do
  for c in /sys/class/nvme-subsystem/* /sys/class/nvme/*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    for n in "$c"/nvme*n*; do
      case ${n##*/} in nvme*c*) ;; *) [ -b "/dev/${n##*/}" ] && blk=${n##*/};; esac
    done
  done
  [ -n "$blk" ] && break
  sleep 0.2
done
[ -n "$blk" ] || fail "no block device of $NQN"
echo "connected /dev/$blk (tries $try)"
echo "size KiB $(awk -v b="$blk" '$4 == b {print $3}' /proc/partitions)"
dd if=/dev/urandom of="$dir/pattern" bs=1M count=4 2>/dev/null
dd if="$dir/pattern" of="/dev/$blk" bs=1M oflag=direct conv=fsync 2>/dev/null || fail "write"
cmp <(dd if="/dev/$blk" bs=1M count=4 iflag=direct 2>/dev/null) "$dir/pattern" &&
  echo "fabric read matches" || fail "fabric read differs"
diff <(sha256sum < "$dir/pattern" | awk '{print $1}') \
     <(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | sha256sum | awk '{print $1}') &&
  echo "loop device holds it" || fail "the loop device differs"
"""


def test_nvmet_over_rdma_on_a_loop_device_within_one_siw_node(
        workloads_lab: ModuleLab) -> None:
    """blktests' nvme group's mechanisms, in one node: a loop-backed namespace served over
    rdma (siw) to the node itself, 4 MiB written through the fabric and read back both
    through it and from the loop device underneath; nothing of it is left."""
    handle = workloads_lab.handle
    address = endpoint(handle, "siw1").address
    done = handle.run("siw1", ["bash", "-c", LOOP_TARGET, "bash", address], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("loop /dev/loop"), done.stdout
    assert lines[1].startswith("connected /dev/nvme"), done.stdout
    assert lines[2:] == ["size KiB 32768", "fabric read matches", "loop device holds it"]
    left = handle.run("siw1", ["sh", "-c", "losetup -a; ls /sys/kernel/config/nvmet/ports "
                               "/sys/kernel/config/nvmet/subsystems; ls /sys/class/nvme"],
                      timeout=60)
    assert "fidelity" not in left.stdout and "7703" not in left.stdout, left.stdout
    assert "/dev/loop" not in left.stdout, left.stdout
