"""UCX and Open MPI (labctl run ucx, ucx-info, mpi): parsers on outputs captured from a
trixie-workloads lab (UCX 1.18.1, Open MPI 5.0.7, mpi4py 4.0.3), the argv and
environment of each transport, the host file and the lab's ssh setup."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners import labssh
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.runners.mpi import (
    CLEANUP,
    check_mpi_options,
    check_nodes,
    cleanup_note,
    hostfile_text,
    mpirun_argv,
    parse_mpi_bench,
    parse_transports,
    run_transport,
    transport_mca,
)
from labctl.runners.ucx import (
    UCX_ON_IWARP,
    UCX_SPECS,
    parse_ucx_info,
    parse_ucx_perftest,
    ucx_specs,
)
from labctl.topology.resolved import Interface, Node

OUTPUTS = Path(__file__).parent / "outputs"


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


# --- ucx_perftest ------------------------------------------------------------------------------
def test_tag_lat_over_rc_verbs_final_row_and_the_transport_the_messages_took() -> None:
    figures = parse_ucx_perftest(output("ucx-tag_lat-rdma.client.txt"))
    assert figures["time_kind"] == "latency"
    assert figures["iterations"] == 500
    assert figures["usec_percentile"] > 0 and figures["usec_average"] > 0
    assert figures["mb_per_sec_overall"] == 0.0  # 8-byte messages: "0.00"
    assert figures["lanes"] == ["rc_verbs/rxe0:1"]  # UCX_PROTO_INFO: RDMA, not the tcp aux


def test_tag_bw_over_tcp_is_overhead_and_bandwidth() -> None:
    figures = parse_ucx_perftest(output("ucx-tag_bw-tcp.client.txt"))
    assert figures["time_kind"] == "overhead"
    assert figures["iterations"] == 100
    assert figures["mb_per_sec_overall"] > 1
    assert figures["lanes"] == ["tcp/eth1"]


def test_exact_values_of_a_final_row() -> None:
    text = ("|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall "
            "|  average  |  overall  |\n"
            "Final:                   200      1.000 6364.956  7264.061        9.82       8.60"
            "         157         138\n")
    assert parse_ucx_perftest(text) == {
        "iterations": 200, "usec_percentile": 1.0, "usec_average": 6364.956,
        "usec_overall": 7264.061, "mb_per_sec_average": 9.82, "mb_per_sec_overall": 8.6,
        "msg_per_sec_average": 157.0, "msg_per_sec_overall": 138.0, "time_kind": "latency"}


def test_a_run_that_aborted_has_no_figures() -> None:
    # UCX_TLS=ud_verbs on rxe: the UD endpoint times out, UCX aborts with a backtrace.
    text = output("ucx-tag_lat-ud_verbs.client.txt")
    assert "unhandled timeout error" in text
    assert parse_ucx_perftest(text) == {}


def _ctx(device: str = "rxe0", device_type: str = "rxe", **options: Any) -> RunContext:
    server = Endpoint("rxe1", device, device_type, 1, "10.77.1.1", "eth1")
    client = Endpoint("rxe2", device, device_type, 1, "10.77.1.2", "eth1")
    return RunContext(server, client, options)


def test_rdma_runs_rc_verbs_on_the_device_with_tcp_for_the_wireup() -> None:
    spec = UCX_SPECS["tag_lat", "rdma"]
    ctx = _ctx()
    assert spec.server_argv(ctx) == ["env", "UCX_TLS=rc_verbs,tcp",
                                     "UCX_NET_DEVICES=rxe0:1,eth1", "ucx_perftest", "-P", "0",
                                     "-p", "13337"]
    assert spec.client_argv(ctx) == ["env", "UCX_TLS=rc_verbs,tcp",
                                     "UCX_NET_DEVICES=rxe0:1,eth1", "UCX_PROTO_INFO=y",
                                     "ucx_perftest", "10.77.1.1", "-P", "0", "-p", "13337",
                                     "-t", "tag_lat", "-s", "8", "-n", "500", "-w", "10"]


def test_tcp_runs_on_the_data_interface_with_the_chosen_size_and_port() -> None:
    argv = UCX_SPECS["tag_bw", "tcp"].client_argv(_ctx(size=4096, iters=7, port=20000))
    assert argv[1:3] == ["UCX_TLS=tcp", "UCX_NET_DEVICES=eth1"]
    assert argv[-10:] == ["-p", "20000", "-t", "tag_bw", "-s", "4096", "-n", "7", "-w", "10"]


def test_siw_is_refused_for_rdma_in_ucx_own_words_but_tcp_runs() -> None:
    assert not UCX_SPECS["tag_lat", "rdma"].supports("siw")
    assert "device uverbs0 of type iWARP is not supported" in UCX_ON_IWARP
    assert UCX_SPECS["tag_lat", "tcp"].supports("siw")


def test_rdma_runs_come_first_so_a_refusal_starts_nothing() -> None:
    labels = [s.variant for s in ucx_specs(("tag_lat", "tag_bw"), ("rdma", "tcp"))]
    assert labels == ["tag_lat-rdma", "tag_bw-rdma", "tag_lat-tcp", "tag_bw-tcp"]
    assert all(s.packages == ("ucx-utils",) for s in UCX_SPECS.values())
    # UCX loads its modules before it listens: longer than the examples' 30 s under load
    assert all(s.ready_seconds == 120.0 for s in UCX_SPECS.values())


# --- ucx_info -d ---------------------------------------------------------------------------------
def test_ucx_info_on_rxe_lists_rc_and_ud_verbs_on_the_device() -> None:
    info = parse_ucx_info(output("ucx_info.rxe.txt"))
    assert "rc_verbs/rxe0:1" in info["transports"] and "ud_verbs/rxe0:1" in info["transports"]
    assert "tcp/eth1" in info["transports"]
    assert "rxe0" in info["memory_domains"]
    assert info["ucx_says"] == []


def test_ucx_info_on_siw_has_no_device_and_says_why() -> None:
    info = parse_ucx_info(output("ucx_info.siw.txt"))
    assert not any("siw0" in t or "verbs" in t for t in info["transports"])
    assert info["memory_domains"] == ["self", "tcp", "sysv", "posix", "cma"]
    assert info["ucx_says"] == ["device uverbs0 of type iWARP is not supported"]  # once


# --- Open MPI ---------------------------------------------------------------------------
def test_mpi_bench_pingpong_rows_and_the_checked_allreduce() -> None:
    figures = parse_mpi_bench(output("mpi-ucx.rank0.txt"))
    sizes = [row["size"] for row in figures["pingpong"]]
    assert sizes == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert figures["pingpong"][0] == {"size": 8, "mb_per_sec": 0.0, "usec": 22336.9,
                                      "usec_stddev": 30248.0, "samples": 50}
    assert figures["pingpong_usec"] == 22336.9
    assert figures["pingpong_mb_per_sec"] == 0.05
    assert figures["allreduce"] == {"ranks": 3, "iterations": 50, "sum": 6, "expected": 6,
                                    "wrong": 0, "usec_mean": 128005.2, "usec_max": 1248282.8,
                                    "correct": True}


def test_mpi4py_bench_alone_gives_pingpong_but_no_allreduce() -> None:
    figures = parse_mpi_bench(output("mpi4py-bench-pingpong.tcp.txt"))
    assert len(figures["pingpong"]) == 8 and figures["pingpong"][0]["samples"] == 100
    assert "allreduce" not in figures


@pytest.mark.parametrize("line", [
    "labctl-allreduce: ranks 3 iterations 5 sum 7 expected 6 wrong 5 usec_mean 1.0 usec_max 2.0",
    # a rank that claims a wrong expectation: labctl computes N(N+1)/2 itself
    "labctl-allreduce: ranks 3 iterations 5 sum 7 expected 7 wrong 0 usec_mean 1.0 usec_max 2.0",
])
def test_a_wrong_allreduce_sum_is_not_correct(line: str) -> None:
    assert parse_mpi_bench(line)["allreduce"]["correct"] is False


def test_hostfile_gives_each_node_one_slot() -> None:
    assert hostfile_text(["10.77.1.1", "10.77.1.2", "10.77.1.3"]) == (
        "10.77.1.1 slots=1\n10.77.1.2 slots=1\n10.77.1.3 slots=1\n")


def test_mpirun_runs_as_root_over_the_lab_ssh_and_holds_everything_to_the_data_subnet() -> None:
    mca = transport_mca("tcp", "10.77.1.0/24", ["rxe0"], ["eth1"])
    assert mca == ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                   "--mca", "btl_tcp_if_include", "10.77.1.0/24"]
    argv = mpirun_argv(3, "10.77.1.0/24", mca, 50, 1024, 300)
    assert argv[:3] == ["timeout", "--kill-after=10", "300"]
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in argv and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in argv
    assert "--allow-run-as-root" in argv
    assert argv[argv.index("-np") + 1] == "3"
    assert argv[argv.index("--prtemca") + 1:argv.index("--prtemca") + 3] == [
        "oob_tcp_if_include", "10.77.1.0/24"]
    agent = argv[argv.index("plm_rsh_agent") + 1]
    assert agent == "ssh -F /root/.ssh/labctl-mpi.config"
    assert "=" not in agent  # PRRTE cuts the agent it passes on at the first "="
    config = labssh.ssh_config()
    assert "  StrictHostKeyChecking yes\n" in config and "  BatchMode yes\n" in config
    assert "  IdentityFile /root/.ssh/labctl-mpi\n" in config
    assert "  UserKnownHostsFile /root/.ssh/labctl-mpi.known_hosts\n" in config
    assert argv[-9:] == ["-x", "PYTHONPATH=/opt/labctl", "python3", "-m",
                         "labctl.nodeside.mpi_bench", "--iters", "50", "--max-size", "1024"]


def test_ucx_transport_uses_the_rdma_devices_and_rc_verbs() -> None:
    assert transport_mca("ucx", "10.77.1.0/24", ["rxe0"], ["eth1"]) == [
        "--mca", "pml", "ucx", "--mca", "btl", "self",
        "-x", "UCX_TLS=rc_verbs,self,sm,tcp", "-x", "UCX_NET_DEVICES=rxe0:1,eth1"]


def test_cleanup_kills_by_exact_name_only() -> None:
    script = CLEANUP[2]
    assert "pkill -KILL -x prted" in script
    assert "pkill -KILL -f '^python3 -m labctl.nodeside.mpi_bench'" in script


@pytest.mark.parametrize(("text", "note"), [
    ("found 0 0\nleft 0 0\n", ""),
    ("found 1 1\nleft 0 0\n", "rxe2: killed 1 prted, 1 ranks"),
    ("found 1 0\nleft 1 0\n", "rxe2: killed 1 prted, 0 ranks; 1 prted, 0 ranks remain"),
    ("", "rxe2: killed ? prted, ? ranks; ? prted, ? ranks remain"),  # no answer: say so
])
def test_cleanup_says_what_an_mpirun_left(text: str, note: str) -> None:
    assert cleanup_note("rxe2", text) == note


def _node(name: str, rdma: str, address: str, image: str = "trixie-workloads") -> Node:
    iface = Interface(name="eth1", segment=0, mac="02:00:00:00:00:01", ipv4=f"{address}/24",
                      mtu=1500)
    return Node(name=name, index=1, rdma=rdma, memory_mib=512, cpus=1, image=image,
                interfaces=(iface,))


RXE = [_node("rxe1", "rxe", "10.77.1.1"), _node("rxe2", "rxe", "10.77.1.2")]


def test_nodes_on_one_segment_give_its_subnet() -> None:
    assert check_nodes(RXE, ("ucx", "tcp")) == "10.77.1.0/24"


def test_ucx_on_siw_is_refused_with_exit_2_but_tcp_is_not() -> None:
    nodes = [*RXE, _node("siw1", "siw", "10.77.1.4")]
    with pytest.raises(UsageError) as refused:
        check_nodes(nodes, ("ucx",))
    assert refused.value.exit_code == 2
    assert "siw1 has siw" in refused.value.message and "iWARP" in refused.value.message
    assert check_nodes(nodes, ("tcp",)) == "10.77.1.0/24"


def test_nodes_in_two_subnets_or_without_open_mpi_are_refused() -> None:
    with pytest.raises(UsageError, match="2 subnets"):
        check_nodes([*RXE, _node("far", "rxe", "10.77.2.1")], ("tcp",))
    plain = [dataclasses.replace(n, image="trixie") for n in RXE]
    with pytest.raises(UsageError, match="lacks openmpi-bin, python3-mpi4py"):
        check_nodes(plain, ("tcp",))


def test_bad_options_are_refused() -> None:
    assert parse_transports("both") == ("ucx", "tcp")
    with pytest.raises(UsageError, match="unknown MPI transport"):
        parse_transports("ib")
    assert check_mpi_options(None, None, None) == (50, 1024, 300.0)
    with pytest.raises(UsageError, match="--iters"):
        check_mpi_options(0, None, None)


# --- the lab's ssh ------------------------------------------------------------------------------
HOST_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID3LbV476LYYAQNVxyfKMJZ+XN+uddRCIUlNnTPJLqAK "
            "labctl-wlm-three-rxe1")  # `ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key` in rxe1


def test_known_hosts_pins_each_data_address_to_its_node_host_key() -> None:
    key = labssh.public_host_key(HOST_KEY + "\n")
    assert key == HOST_KEY.rsplit(" ", 1)[0]
    assert labssh.known_hosts({"10.77.1.1": key}) == f"10.77.1.1 {key}\n"


@pytest.mark.parametrize("text", ["", "ssh-rsa AAAA", "ssh-ed25519 AAAA; rm -rf /",
                                  HOST_KEY + "\n10.0.0.1 ssh-ed25519 AAAA"])
def test_anything_but_one_ed25519_key_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="unexpected host key"):
        labssh.public_host_key(text)


def test_the_lab_key_is_made_once_in_the_lab_directory(tmp_path: Path) -> None:
    handle = cast(LabHandle, SimpleNamespace(labdir=SimpleNamespace(path=tmp_path),
                                             lab=SimpleNamespace(name="wlm-unit")))
    private, public = labssh.lab_key(handle)
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert public.startswith("ssh-ed25519 ") and public.strip().endswith("labctl-mpi-wlm-unit")
    key_file = tmp_path / "mpi-ssh" / "id_ed25519"
    assert key_file.stat().st_mode & 0o077 == 0
    assert (tmp_path / "mpi-ssh").stat().st_mode & 0o077 == 0
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key_file)], capture_output=True,
                             text=True, check=True).stdout
    assert derived.split()[:2] == public.split()[:2]
    assert labssh.lab_key(handle) == (private, public)  # the same pair next time


def test_node_side_files_and_sshd_are_fixed_paths_on_the_data_address() -> None:
    assert "'/root/.ssh/labctl-mpi.authorized_keys'" in labssh._INSTALL
    assert "'/root/.ssh/labctl-mpi.config'" in labssh._INSTALL
    start = labssh._start_sshd("10.77.1.1")[2]
    assert "ListenAddress=10.77.1.1:22" in start
    assert "AuthorizedKeysFile=/root/.ssh/labctl-mpi.authorized_keys" in start
    assert labssh.STOP_SSHD[2].startswith("[ -f /run/labctl-mpi-sshd.pid ]")


@pytest.mark.parametrize(("replace", "why"), [
    (r"(?m)^(\s*)(\d+)(\s)", "a number labctl accepts (5000 characters"),  # a size
    (r"usec_mean \S+", "a finite number (1e999)"),
])
def test_a_transport_whose_rank0_printed_unreadable_figures_fails_with_the_reason(
        replace: str, why: str) -> None:
    """mpirun exits 0, but rank 0's figures do not read (5,000 digits, 1e999): a failed
    transport saying why, not a traceback, and the nodes still cleaned up."""
    import re

    good = output("mpi-ucx.rank0.txt")
    new = (r"\g<1>" + "9" * 5000 + r"\g<3>") if "usec_mean" not in replace \
        else "usec_mean 1e999"
    hostile = re.sub(replace, new, good, count=1)
    assert hostile != good
    asked: list[list[str]] = []

    def run(node: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, hostile if len(asked) == 1 else "", "")

    handle = cast(LabHandle, SimpleNamespace(run=run, rdma_device=lambda name: "rxe0"))
    result = run_transport(handle, RXE, "ucx", "10.77.1.0/24", 10, 64, 30.0)
    assert result.status == "failed"
    assert result.reason.startswith("cannot read rank 0's output: ") and why in result.reason
    assert len(asked) == 3  # mpirun, then the cleanup in both nodes
