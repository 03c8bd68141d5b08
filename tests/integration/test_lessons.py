"""The lessons as a learner and a course's CI meet them: `labctl lesson start` copies the
starter and brings the lesson's lab up with the folder mounted, `labctl lesson check`
builds and runs the program in real nodes (rxe; siw for lesson 10) and judges it from the
wire and the counters. For each lesson: the starter fails with the finding its text promises, the
reference solution passes, and a typical wrong answer fails with the finding that names
the mistake; the Python side once for the one-node lesson and for every two-node lesson
from the fourth on.

One lab (named after LABCTL_TEST_LAB with "-les") and one lesson folder, started once: each
later lesson takes the folder over as a learner moving on would (its starter's lesson.c and
lesson.py, the marker saying which lesson), so the common files are built once and the
lab is never made again. Lesson 10 (siw) has a lab and a folder of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labctl.lab import lifecycle
from tests.integration.conftest import REPO, labctl
from tests.integration.leftovers import lab_leftovers
from tests.unit.jsonshape import parsed

pytestmark = pytest.mark.integration
LAB = (os.environ.get("LABCTL_TEST_LAB", "itest") + "-les")[:20]
SIW_LAB = (os.environ.get("LABCTL_TEST_LAB", "itest") + "-siw")[:20]  # lesson 10's
LESSONS = REPO / "labctl" / "data" / "lessons"
# Typical wrong answers: the reference solution with one mistake, (lesson folder, the
# solution's text, the mistake's).
WRONG = {
    "guid-byte-order": ("01-device", "uint64_t guid = be64toh(dev.node_guid);",
                        "uint64_t guid = dev.node_guid;"),
    "short-receive": ("02-send-recv", "\tcheck(ibv_post_recv(",
                      "\tsge.length = 1024;\n\tcheck(ibv_post_recv("),
    "send-instead": ("03-rdma-write", ".opcode = IBV_WR_RDMA_WRITE,", ".opcode = IBV_WR_SEND,"),
    "write-instead": ("04-rdma-read", ".opcode = IBV_WR_RDMA_READ,",
                      ".opcode = IBV_WR_RDMA_WRITE,"),
    "immediate-byte-order": ("05-write-imm", "wr.imm_data = htonl(IMMEDIATE);",
                             "wr.imm_data = IMMEDIATE;"),
    "compare-swap-instead": ("06-atomic-add", ".opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,",
                             ".opcode = IBV_WR_ATOMIC_CMP_AND_SWP,"),
    "no-grh": ("07-ud-address-handle", ".is_global = 1,", ".is_global = 0,"),
    "no-grh-python": ("07-ud-address-handle", "is_global=1", "is_global=0"),
    "receive-without-grh": ("07-ud-address-handle", ".length = GRH_BYTES + sizeof(MESSAGE),",
                            ".length = sizeof(MESSAGE),"),
    "one-retry-short": ("09-retry-timeout", "#define RETRY_CNT 6", "#define RETRY_CNT 2"),
    "connect-without-route": ("08-rdma-cm",
                              '\tcheck(rdma_resolve_route(lab->id, RESOLVE_MS), '
                              '"rdma_resolve_route");\n'
                              "\trdma_ack_cm_event(next_event(lab, "
                              "RDMA_CM_EVENT_ROUTE_RESOLVED));\n", ""),
}
RDMA_CM_WANTED = ("this lesson wants RDMA CM: rdma_resolve_addr, rdma_resolve_route and "
                  "rdma_connect on the client, rdma_bind_addr, rdma_listen and rdma_accept "
                  "on the server")


@pytest.fixture(scope="module", autouse=True)
def lesson_lab() -> Iterator[None]:
    lifecycle.destroy(LAB)  # left by an interrupted earlier run
    yield
    lifecycle.destroy(LAB)
    assert lab_leftovers(LAB) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's one lesson folder: `lesson start 1` copies the starter and brings the
    lab up with it mounted."""
    path = tmp_path_factory.mktemp("lessons") / "lesson"
    result = labctl("lesson", "start", "1", str(path), "--lab", LAB, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (path / "lesson.c").is_file() and (path / "rdma_common.py").is_file()
    return path


@pytest.fixture(scope="module")
def siw_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Lesson 10's folder and its own lab (siw): `lesson start 10` brings it up."""
    lifecycle.destroy(SIW_LAB)
    path = tmp_path_factory.mktemp("lessons") / "lesson-siw"
    result = labctl("lesson", "start", "10", str(path), "--lab", SIW_LAB, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    yield path
    lifecycle.destroy(SIW_LAB)
    assert lab_leftovers(SIW_LAB) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}


def take_over(folder: Path, number: int, lesson: str) -> None:
    """The folder moves on to lesson `number`: its starter's lesson.c and lesson.py and the
    marker `lesson start` writes. The common files and their build stay."""
    for name in ("lesson.c", "lesson.py"):
        shutil.copyfile(LESSONS / lesson / "starter" / name, folder / name)
    (folder / ".lesson").write_text(json.dumps({"lesson": number, "hints": 0}) + "\n")


def check(number: int, lang: str = "c", lab: str = LAB,
          ) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """`labctl lesson check N --json`: its exit, its findings and the whole verdict."""
    result = labctl("lesson", "check", str(number), "--lab", lab, "--lang", lang, "--json",
                    timeout=600)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    verdict = parsed("lesson-check", result.stdout)
    assert verdict["passed"] == (result.returncode == 0), verdict
    return result.returncode, verdict["findings"], verdict


def use(folder: Path, source: Path) -> None:
    shutil.copyfile(source, folder / source.name)


def use_wrong(folder: Path, name: str, lang: str = "c") -> None:
    """The solution's lesson.c (or lesson.py) with the mistake `name` made in it (exactly
    once)."""
    lesson, right, wrong = WRONG[name]
    text = solution(lesson, lang).read_text()
    assert text.count(right) == 1, f"{name}: the solution changed"
    (folder / solution(lesson, lang).name).write_text(text.replace(right, wrong))


def failed(findings: list[dict[str, Any]]) -> list[str]:
    return [f["text"] for f in findings if not f["passed"]]


def solution(lesson: str, lang: str = "c") -> Path:
    return LESSONS / lesson / "solution" / ("lesson.c" if lang == "c" else "lesson.py")


def test_lesson_1_device_query(folder: Path) -> None:
    code, findings, _ = check(1)
    assert code == 1
    assert failed(findings) == [
        "your program exited 1: TODO: query the device's attributes (ibv_query_device)"]

    code, findings, _ = check(1, "python")
    assert code == 1
    assert failed(findings) == [
        "your program exited 1: TODO: query the device's attributes (ctx.query_device())"]

    use_wrong(folder, "guid-byte-order")
    code, findings, _ = check(1)
    assert code == 1
    (wrong,) = failed(findings)
    assert wrong.startswith("node_guid: yours is ") and "ibv_devinfo's is" in wrong

    use(folder, solution("01-device"))
    code, findings, _ = check(1)
    assert code == 0, "\n".join(failed(findings))
    assert {f["text"].split(":")[0] for f in findings if f["check"] == "devinfo"} == {
        "hca_id", "node_guid", "max_qp", "max_cqe", "state", "active_mtu"}


def test_lesson_2_send_recv(folder: Path) -> None:
    take_over(folder, 2, "02-send-recv")

    code, findings, _ = check(2)
    assert code == 1
    texts = failed(findings)
    assert texts[0] == ("your server exited 1: TODO: post a receive for the whole buffer "
                        "(ibv_post_recv)")
    assert any(t.startswith("your client put no SEND on the wire") for t in texts)

    use_wrong(folder, "short-receive")
    code, findings, verdict = check(2)
    assert code == 1
    texts = failed(findings)
    assert any(t.startswith("the server answered NAK: remote operational error") for t in texts)
    assert any(t.startswith("the server printed no digest") for t in texts)

    use(folder, solution("02-send-recv"))
    code, findings, verdict = check(2)
    assert code == 0, "\n".join(failed(findings))
    assert verdict["sent"]["client"].get("RC_SEND_FIRST", 0) >= 1


def test_lesson_3_rdma_write(folder: Path) -> None:
    take_over(folder, 3, "03-rdma-write")

    code, findings, _ = check(3)
    assert code == 1
    assert ("your client exited 1: TODO: RDMA WRITE the whole buffer into the server's "
            "(IBV_WR_RDMA_WRITE)") in failed(findings)

    use_wrong(folder, "send-instead")
    code, findings, _ = check(3)
    assert code == 1
    texts = failed(findings)
    assert any(t.startswith("your client sent RC_SEND_") and "this lesson wants RDMA WRITE"
               in t for t in texts), texts
    assert any(t.startswith("the server answered RNR NAK") for t in texts), texts

    use(folder, solution("03-rdma-write"))
    code, findings, verdict = check(3)
    assert code == 0, "\n".join(failed(findings))
    assert "RC_SEND_FIRST" not in verdict["sent"]["client"]
    assert Path(verdict["pcap"]).is_file()


def test_lesson_4_rdma_read(folder: Path) -> None:
    take_over(folder, 4, "04-rdma-read")

    code, findings, _ = check(4)
    assert code == 1
    assert ("your client exited 1: TODO: RDMA READ the server's whole buffer into this one "
            "(IBV_WR_RDMA_READ)") in failed(findings)

    # a WRITE into a buffer the server lets the peer read but not write
    use_wrong(folder, "write-instead")
    code, findings, _ = check(4)
    assert code == 1
    texts = failed(findings)
    assert any(t.startswith("your client sent RC_RDMA_WRITE_FIRST") and
               "this lesson wants RDMA READ: post IBV_WR_RDMA_READ" in t for t in texts), texts
    assert any(t.startswith("the server answered NAK: invalid request") for t in texts), texts

    use(folder, solution("04-rdma-read"))
    code, findings, verdict = check(4)
    assert code == 0, "\n".join(failed(findings))
    assert set(verdict["sent"]["client"]) <= {"RC_RDMA_READ_REQUEST", "RC_ACKNOWLEDGE"}
    assert verdict["sent"]["server"]["RC_RDMA_READ_RESPONSE_FIRST"] >= 1

    use(folder, solution("04-rdma-read", "python"))
    code, findings, _ = check(4, "python")
    assert code == 0, "\n".join(failed(findings))


def test_lesson_5_write_with_immediate(folder: Path) -> None:
    take_over(folder, 5, "05-write-imm")

    code, findings, _ = check(5)
    assert code == 1
    assert failed(findings)[0] == ("your server exited 1: TODO: post a receive for the "
                                   "immediate (ibv_post_recv)")

    use_wrong(folder, "immediate-byte-order")
    code, findings, _ = check(5)
    assert code == 1
    assert failed(findings) == [
        "your server printed `immediate 0x0500dec0`, not `immediate 0xc0de0005`: the client "
        "sets wr.imm_data = htonl(0xc0de0005) (it travels in network byte order) and the "
        "server prints ntohl(wc.imm_data) from its receive's completion"]

    use(folder, solution("05-write-imm"))
    code, findings, verdict = check(5)
    assert code == 0, "\n".join(failed(findings))
    assert verdict["sent"]["client"]["RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"] >= 1

    use(folder, solution("05-write-imm", "python"))
    code, findings, _ = check(5, "python")
    assert code == 0, "\n".join(failed(findings))


def test_lesson_6_atomic_fetch_and_add(folder: Path) -> None:
    take_over(folder, 6, "06-atomic-add")

    code, findings, _ = check(6)
    assert code == 1
    assert ("your client exited 1: TODO: add ADD to the server's counter "
            "(IBV_WR_ATOMIC_FETCH_AND_ADD)") in failed(findings)

    # compares the counter (1000) with 24: no swap, the old value back, the counter as it was
    use_wrong(folder, "compare-swap-instead")
    code, findings, _ = check(6)
    assert code == 1
    texts = failed(findings)
    assert texts[0] == (
        "your client sent RC_COMPARE_SWAP; this lesson wants an atomic fetch-and-add: post "
        "IBV_WR_ATOMIC_FETCH_AND_ADD with the peer's rkey and address and compare_add = ADD")
    assert texts[1].startswith("your client put no fetch-and-add on the wire (it sent "
                               "RC_COMPARE_SWAP ")
    assert texts[2:] == [
        "your server printed `counter 1000`, not `counter 1024`: the fetch-and-add adds "
        "compare_add (ADD, 24) to the 8 bytes at the peer's address"]

    use(folder, solution("06-atomic-add"))
    code, findings, verdict = check(6)
    assert code == 0, "\n".join(failed(findings))
    assert set(verdict["sent"]["client"]) == {"RC_FETCH_ADD"}
    assert set(verdict["sent"]["server"]) == {"RC_ATOMIC_ACKNOWLEDGE"}

    use(folder, solution("06-atomic-add", "python"))
    code, findings, _ = check(6, "python")
    assert code == 0, "\n".join(failed(findings))


def test_lesson_7_ud_address_handle(folder: Path) -> None:
    take_over(folder, 7, "07-ud-address-handle")

    code, findings, _ = check(7)
    assert code == 1
    texts = failed(findings)
    assert ("your client exited 1: TODO: an address handle for the server (ibv_create_ah)"
            in texts), texts
    assert ("your client put no datagram on the wire (it sent nothing): post an IBV_WR_SEND "
            "on the UD queue pair with wr.wr.ud.ah, remote_qpn and remote_qkey") in texts, texts

    # the address handle without the GRH: rxe refuses it on RoCE
    use_wrong(folder, "no-grh")
    code, findings, _ = check(7)
    assert code == 1
    texts = failed(findings)
    assert (
        "your client exited 1: lesson: ibv_create_ah: Invalid argument: the address handle "
        "was refused: on RoCE it needs the GRH (is_global = 1, grh.dgid = the server's GID, "
        "grh.sgid_index = your GID index)") in texts, texts

    use_wrong(folder, "no-grh-python", "python")
    code, findings, _ = check(7, "python")
    assert code == 1
    texts = failed(findings)
    assert any(t.startswith("your client exited 1: pyverbs.pyverbs_error.PyverbsRDMAError: "
                            "Failed to create AH") and t.endswith(
        ": the address handle was refused: on RoCE it needs the GRH (is_global = 1, "
        "grh.dgid = the server's GID, grh.sgid_index = your GID index)") for t in texts), texts

    # a receive as long as the message: no room for the GRH, rxe drops the datagram
    use_wrong(folder, "receive-without-grh")
    code, findings, verdict = check(7)
    assert code == 1
    texts = failed(findings)
    assert texts[0] == (
        "your server exited 1: lesson: no completion within 10 s: no datagram reached the "
        "server's receive: the device drops one that does not fit the receive (the 40-byte "
        "GRH and the payload: GRH_BYTES longer than the message) or that names another QP "
        "number or Q_Key, and says nothing"), texts
    assert verdict["sent"]["client"] == {"UD_SEND_ONLY": 1}

    use(folder, solution("07-ud-address-handle"))
    code, findings, verdict = check(7)
    assert code == 0, "\n".join(failed(findings))
    assert set(verdict["sent"]["client"]) == {"UD_SEND_ONLY"}

    use(folder, solution("07-ud-address-handle", "python"))
    code, findings, _ = check(7, "python")
    assert code == 0, "\n".join(failed(findings))


def faults_on(lab: str) -> list[dict[str, Any]]:
    result = labctl("fault", "list", "--lab", lab, "--json", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    faults: list[dict[str, Any]] = json.loads(result.stdout)["faults"]
    return faults


def test_lesson_9_retry_cnt_and_timeout_under_a_fault(folder: Path) -> None:
    """The lesson's fault (drop the client's first 12 WRITE packets: three tries of a
    4-packet message) is on the wire for each run and gone after it, however it ended."""
    take_over(folder, 9, "09-retry-timeout")

    # the starter: retry_cnt 1, so two tries and the error; none of them reaches the server
    code, findings, verdict = check(9)
    assert code == 1
    texts = failed(findings)
    assert (
        "your client exited 1: lesson: a work request completed with transport retry counter "
        "exceeded: your client's QP sent its WRITE retry_cnt + 1 times, got no ACK for any of "
        "them and gave up (IBV_WC_RETRY_EXC_ERR): the fault drops the first 3 tries (12 "
        "packets), so retry_cnt must be at least 3, and the timeout long enough that no retry "
        "goes to a try that arrived") in texts, texts
    # how many packets the two tries had sent when the 4 ms timer fired varies under TCG
    assert any(t.startswith("the fault dropped ") and " not the 12 it holds back" in t
               for t in texts), texts
    assert ("your client's device gave up on a work request after retry_cnt retries "
            "(retry_exceeded_err changed by 1)") in texts, texts
    assert "client" not in verdict["sent"]
    assert faults_on(LAB) == []

    # one retry short: the three tries the fault takes, then the error
    use_wrong(folder, "one-retry-short")
    code, findings, _ = check(9)
    assert code == 1
    texts = failed(findings)
    assert texts[1].startswith("your client exited 1: lesson: a work request completed with "
                               "transport retry counter exceeded: "), texts
    assert ("your client's device sent the message again fewer than the 3 times the fault "
            "needs (completer_retry_err counts each retry): raise retry_cnt to at least 3 "
            "(completer_retry_err changed by 2)") in texts, texts
    assert "the fault (drop write count=12) acted on 12 packets" in [
        f["text"] for f in findings if f["passed"]]

    # a fault of the user's own on the lab: refused before anything runs, and kept
    added = labctl("fault", "add", "node1:eth1", "drop", "--opcode", "ack", "--lab", LAB)
    assert added.returncode == 0, added.stdout + added.stderr
    refused = labctl("lesson", "check", "9", "--lab", LAB, timeout=600)
    assert refused.returncode == 1
    assert f"\nerror: lab {LAB} has faults on it already\n" in refused.stderr, refused.stderr
    assert len(faults_on(LAB)) == 1
    assert labctl("fault", "clear", "--lab", LAB).returncode == 0

    use(folder, solution("09-retry-timeout"))
    code, findings, verdict = check(9)
    assert code == 0, "\n".join(failed(findings))
    assert verdict["sent"]["client"] == {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2,
                                         "RC_RDMA_WRITE_LAST": 1}

    # (the Python solution passes in tests/integration/test_lesson_grade.py's lesson 9 class)

    # Ctrl-C while the programs run (the C solution, built already): the fault is taken
    # off on the way out
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "lesson", "check", "9", "--lab",
                             LAB], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not faults_on(LAB):
            assert proc.poll() is None and time.monotonic() < deadline, "no fault seen"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert faults_on(LAB) == []


def test_lesson_8_rdma_cm(folder: Path) -> None:
    take_over(folder, 8, "08-rdma-cm")

    code, findings, _ = check(8)
    assert code == 1
    texts = failed(findings)
    assert texts[0] == ("your server exited 1: TODO: listen for the client with RDMA CM "
                        "(rdma_create_id, rdma_bind_addr, rdma_listen)"), texts
    assert ("your client put no RDMA CM connection request on the wire; "
            + RDMA_CM_WANTED) in texts, texts

    # lesson 2's program: the SEND arrives, the QP numbers went over TCP
    use(folder, solution("02-send-recv"))
    code, findings, _ = check(8)
    assert code == 1
    assert failed(findings) == [
        "your programs exchanged QP numbers themselves over TCP and made no RDMA CM "
        "connection; " + RDMA_CM_WANTED]

    use_wrong(folder, "connect-without-route")
    code, findings, _ = check(8)
    assert code == 1
    assert (
        "your client exited 1: lesson: rdma_connect: Invalid argument: rdma_connect needs "
        "the route: after RDMA_CM_EVENT_ADDR_RESOLVED call rdma_resolve_route and wait for "
        "RDMA_CM_EVENT_ROUTE_RESOLVED, then make the queue pair and connect"
    ) in failed(findings), failed(findings)

    use(folder, solution("08-rdma-cm"))
    code, findings, verdict = check(8)
    assert code == 0, "\n".join(failed(findings))
    assert {"CM_REQ", "CM_RTU", "RC_SEND_FIRST"} <= set(verdict["sent"]["client"])
    assert "CM_REP" in verdict["sent"]["server"]

    use(folder, solution("08-rdma-cm", "python"))
    code, findings, _ = check(8, "python")
    assert code == 0, "\n".join(failed(findings))


def test_lesson_10_the_same_program_on_siw(siw_folder: Path) -> None:
    code, findings, verdict = check(10, lab=SIW_LAB)
    assert code == 1
    texts = failed(findings)
    assert (
        "your client exited 1: lesson: ibv_post_send: Invalid argument: siw refused the work "
        "request: iWARP has no immediate data (no IBV_WR_RDMA_WRITE_WITH_IMM or "
        "IBV_WR_SEND_WITH_IMM) and no atomics; post an IBV_WR_RDMA_WRITE, then an "
        "IBV_WR_SEND that tells the server") in texts, texts
    assert verdict["sent"]["client"] == {"MPA_REQUEST": 1}
    assert verdict["sent"]["server"] == {"MPA_REPLY": 1}

    # lesson 3's program, right on rxe: it asks for GID index 1 and swaps QP numbers
    use(siw_folder, solution("03-rdma-write"))
    code, findings, _ = check(10, lab=SIW_LAB)
    assert code == 1
    texts = failed(findings)
    assert texts[0] == (
        "your server exited 1: lesson: ibv_query_gid: Invalid argument: siw has a single GID "
        "(index 0) and iWARP does not address a peer by GID: connect through RDMA CM by IP "
        "address (rdma_resolve_addr, rdma_connect) instead of swapping QP numbers and GIDs")
    assert texts[2].startswith("your client put no RDMA CM connection request on the wire; "
                               "on iWARP the queue pair can only be connected through RDMA "
                               "CM"), texts

    use(siw_folder, solution("10-siw-iwarp"))
    code, findings, verdict = check(10, lab=SIW_LAB)
    assert code == 0, "\n".join(failed(findings))
    assert set(verdict["sent"]["client"]) == {"MPA_REQUEST", "RDMA_WRITE", "SEND"}

    use(siw_folder, solution("10-siw-iwarp", "python"))
    code, findings, _ = check(10, "python", lab=SIW_LAB)
    assert code == 0, "\n".join(failed(findings))
