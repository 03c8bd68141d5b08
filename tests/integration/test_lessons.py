"""The lessons as a learner and a course's CI meet them: `labctl lesson start` copies the
starter and brings the lesson's lab up with the folder mounted, `labctl lesson check`
builds and runs the program in real nodes (rxe) and judges it from the wire and the
counters. For each lesson: the starter fails with the finding its text promises, the
reference solution passes, and a typical wrong answer fails with the finding that names
the mistake; the Python side once per kind of lesson (one node, two nodes).

One lab (named after LABCTL_TEST_LAB with "-les"), made again for each lesson's folder."""

from __future__ import annotations

import os
import shutil
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
LESSONS = REPO / "labctl" / "data" / "lessons"
# Typical wrong answers: the reference solution with one mistake, (lesson folder, the
# solution's text, the mistake's).
WRONG = {
    "guid-byte-order": ("01-device", "uint64_t guid = be64toh(dev.node_guid);",
                        "uint64_t guid = dev.node_guid;"),
    "short-receive": ("02-send-recv", "\tcheck(ibv_post_recv(",
                      "\tsge.length = 1024;\n\tcheck(ibv_post_recv("),
    "send-instead": ("03-rdma-write", ".opcode = IBV_WR_RDMA_WRITE,", ".opcode = IBV_WR_SEND,"),
    "wrong-rkey": ("03-rdma-write", "wr.wr.rdma.rkey = lab->peer.rkey;",
                   "wr.wr.rdma.rkey = lab->peer.rkey + 1;"),
}


@pytest.fixture(scope="module", autouse=True)
def lesson_lab() -> Iterator[None]:
    lifecycle.destroy(LAB)  # left by an interrupted earlier run
    yield
    lifecycle.destroy(LAB)
    assert lab_leftovers(LAB) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}


def start(number: int, folder: Path) -> None:
    result = labctl("lesson", "start", str(number), str(folder), "--lab", LAB, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (folder / "lesson.c").is_file() and (folder / "rdma_common.py").is_file()


def check(number: int, lang: str = "c") -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """`labctl lesson check N --json`: its exit, its findings and the whole verdict."""
    result = labctl("lesson", "check", str(number), "--lab", LAB, "--lang", lang, "--json",
                    timeout=600)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    verdict = parsed("lesson-check", result.stdout)
    assert verdict["passed"] == (result.returncode == 0), verdict
    return result.returncode, verdict["findings"], verdict


def use(folder: Path, source: Path) -> None:
    shutil.copyfile(source, folder / source.name)


def use_wrong(folder: Path, name: str) -> None:
    """The solution's lesson.c with the mistake `name` made in it (exactly once)."""
    lesson, right, wrong = WRONG[name]
    text = solution(lesson).read_text()
    assert text.count(right) == 1, f"{name}: the solution changed"
    (folder / "lesson.c").write_text(text.replace(right, wrong))


def failed(findings: list[dict[str, Any]]) -> list[str]:
    return [f["text"] for f in findings if not f["passed"]]


def solution(lesson: str, lang: str = "c") -> Path:
    return LESSONS / lesson / "solution" / ("lesson.c" if lang == "c" else "lesson.py")


def test_lesson_1_device_query(tmp_path: Path) -> None:
    folder = tmp_path / "lesson1"
    start(1, folder)

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
    assert code == 0, findings
    assert {f["text"].split(":")[0] for f in findings if f["check"] == "devinfo"} == {
        "hca_id", "node_guid", "max_qp", "max_cqe", "state", "active_mtu"}


def test_lesson_2_send_recv(tmp_path: Path) -> None:
    folder = tmp_path / "lesson2"
    start(2, folder)

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
    assert code == 0, findings
    assert verdict["sent"]["client"].get("RC_SEND_FIRST", 0) >= 1


def test_lesson_3_rdma_write(tmp_path: Path) -> None:
    folder = tmp_path / "lesson3"
    start(3, folder)

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

    use_wrong(folder, "wrong-rkey")
    code, findings, _ = check(3)
    assert code == 1
    assert any(t.startswith("the server answered NAK: remote access error")
               for t in failed(findings)), findings

    use(folder, solution("03-rdma-write"))
    code, findings, verdict = check(3)
    assert code == 0, findings
    assert "RC_SEND_FIRST" not in verdict["sent"]["client"]
    assert Path(verdict["pcap"]).is_file()

    use(folder, solution("03-rdma-write", "python"))
    code, findings, _ = check(3, "python")
    assert code == 0, findings
