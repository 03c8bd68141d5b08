"""`labctl lesson`: the shipped lessons load and hold what their text promises; the judge's
findings from real ibv_devinfo output and a real capture; the CLI's refusals (exit 2)
before any lab is touched. The live checks are tests/integration/test_lessons.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labctl.course import catalog, judge
from labctl.course import lesson_fault as lesson_fault_module
from labctl.course.check import _marked, _split_exit, _wire
from labctl.errors import LabctlError, UsageError
from labctl.runners.execute import RunResult
from labctl.topology.load import load_lab
from labctl.wire import cm, iwarp, roce
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

DATA = Path(__file__).parent / "data" / "course"
CAPTURES = Path(__file__).parent / "captures"
DEVINFO = (DATA / "ibv_devinfo-v-rxe0.txt").read_text()
COMMON = {"Makefile", "rdma_common.c", "rdma_common.h", "rdma_common.py"}


def test_the_shipped_lessons_load_in_order_with_their_parts() -> None:
    lessons = catalog.lessons()
    assert [x.number for x in lessons] == list(range(1, 11))
    for item in lessons:
        assert catalog.text(item).startswith(f"# Lesson {item.number}: ")
        for part in ("starter", "solution"):
            assert set(catalog.files(item, part)) == COMMON | {"lesson.c", "lesson.py"}
        starter = catalog.files(item, "starter")
        assert b"TODO" in starter["lesson.c"] and b"TODO" in starter["lesson.py"]
        assert b"TODO" not in catalog.files(item, "solution")["lesson.c"]
        with catalog.resources.as_file(catalog.topology_file(item)) as path:
            lab = load_lab(path)
        assert all(n.rdma == item.rdma for n in lab.nodes)


def test_every_opcode_a_lesson_names_is_one_the_decoder_gives() -> None:
    """A misspelt opcode would make an any_of check fail for every program and a none_of
    check pass for every program: each name is one the capture's decoder prints."""
    known = ({roce.opcode_name(code) for code in range(256)}
             | {f"CM_{name}" for name in cm.CM_ATTRIBUTES.values()}
             | set(iwarp.RDMAP_OPCODES.values()))
    named: set[str] = set()
    for item in catalog.lessons():
        for check in item.checks:
            if isinstance(check, catalog.OpcodesCheck):
                named |= set(check.any_of + check.none_of)
            if isinstance(check, catalog.OpcodesCheck | catalog.PrintsCheck):
                check.says.format(found="x")  # no placeholder but {found}
    assert named - known == set()
    assert {"RC_RDMA_READ_REQUEST", "RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE",
            "UD_SEND_ONLY", "RDMA_WRITE", "SEND"} <= named


def test_a_lesson_that_does_not_exist_names_the_ones_there_are() -> None:
    with pytest.raises(UsageError) as caught:
        catalog.lesson(99)
    assert caught.value.message == "there is no lesson 99"
    assert caught.value.hint == ("the lessons are 1, 2, 3, 4, 5, 6, 7, 8, 9, 10: "
                                 "`labctl lesson list`")


def test_the_pattern_digest_is_the_one_the_programs_print() -> None:
    # rdma_common.c's and rdma_common.py's FNV-1a over the pattern, as a live server prints
    assert judge.expected_digest() == "b067bcd54bc3aac5"


def _devinfo_run(stdout: str, code: int = 0, stderr: str = "") -> judge.Observation:
    return judge.Observation([judge.ProgramRun("program", "node1", code, stdout, stderr)],
                             devinfo=judge.devinfo_fields(DEVINFO))


SOLUTION_1 = ("hca_id: rxe0\nnode_guid: 00b7:8eff:fe58:0101\nmax_qp: 1048560\n"
              "max_cqe: 32767\nstate: PORT_ACTIVE (4)\nactive_mtu: 1024 (3)\n")


def test_lesson_1_compares_each_field_with_the_real_ibv_devinfo() -> None:
    lesson = catalog.lesson(1)
    findings = judge.judge(lesson, _devinfo_run(SOLUTION_1))
    assert judge.passed(findings) and len(findings) == 7
    swapped = SOLUTION_1.replace("00b7:8eff:fe58:0101", "0101:58fe:ff8e:b700")
    findings = judge.judge(lesson, _devinfo_run(swapped.replace("max_cqe: 32767\n", "")))
    assert [f.text for f in findings if not f.passed] == [
        "node_guid: yours is '0101:58fe:ff8e:b700', ibv_devinfo's is '00b7:8eff:fe58:0101'",
        "your program printed no `max_cqe:` line (ibv_devinfo says 32767)"]


def test_a_starter_stopped_at_its_todo_is_one_finding_not_a_list_of_fields() -> None:
    findings = judge.judge(catalog.lesson(1), _devinfo_run(
        "", 1, "TODO: query the device's attributes (ibv_query_device)\n"))
    assert [(f.passed, f.text) for f in findings] == [
        (False, "your program exited 1: TODO: query the device's attributes "
                "(ibv_query_device)")]


def _pair(server_out: str, client_out: str, sent: dict[str, int], recvs: int,
          naks: list[str] | None = None, codes: tuple[int | None, int | None] = (0, 0),
          ) -> judge.Observation:
    return judge.Observation(
        [judge.ProgramRun("server", "node1", codes[0], server_out, "", ""),
         judge.ProgramRun("client", "node2", codes[1], client_out, "",
                          "" if codes[1] is not None else "server did not start listening")],
        sent={"client": sent}, naks=naks or [],
        counters={"server": {"rdma_recvs": recvs}, "client": {"rdma_sends": 0}})


def test_lesson_3_passes_a_write_and_names_a_send_as_the_mistake() -> None:
    lesson = catalog.lesson(3)
    good = f"buffer 4096 bytes fnv1a64 {judge.expected_digest()}\n"
    writes = {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2, "RC_RDMA_WRITE_LAST": 1}
    assert judge.passed(judge.judge(lesson, _pair(good, "wrote 4096 bytes\n", writes, 0)))

    sends = {"RC_SEND_FIRST": 7, "RC_SEND_MIDDLE": 12, "RC_SEND_LAST": 6}
    obs = _pair("lesson: the peer closed the TCP connection\n",
                "lesson: a work request completed with RNR retry counter exceeded\n", sends,
                0, ["RNR NAK"] * 7, (1, 1))
    assert [f.text for f in judge.judge(lesson, obs) if not f.passed] == [
        "your server exited 1: lesson: the peer closed the TCP connection",
        "your client exited 1: lesson: a work request completed with RNR retry counter "
        "exceeded",
        "your client sent RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST packets; this lesson "
        "wants RDMA WRITE: post IBV_WR_RDMA_WRITE with the peer's rkey and address",
        "your client put no RDMA WRITE on the wire (it sent RC_SEND_FIRST 7, RC_SEND_LAST 6, "
        "RC_SEND_MIDDLE 12): post an ibv_send_wr with opcode IBV_WR_RDMA_WRITE",
        "the server printed no digest of its buffer (`buffer N bytes fnv1a64 HEX`): the "
        "server's buffer does not hold the client's 4096 bytes: write the whole buffer to "
        "the peer's address with its rkey",
        "the server answered RNR NAK (7 times): the server had no receive posted when the "
        "message came: post the receive before the client sends"]


def test_a_wrong_buffer_and_counter_changes_are_findings_of_their_own() -> None:
    wrong = "buffer 4096 bytes fnv1a64 0000000000000000\n"
    writes = {"RC_RDMA_WRITE_ONLY": 1}
    texts = [f.text for f in judge.judge(catalog.lesson(3), _pair(wrong, "", writes, 1))
             if not f.passed]
    assert texts == [
        "the server's buffer does not hold the client's 4096 bytes: write the whole buffer "
        "to the peer's address with its rkey",
        "the server's device counted a received SEND (rdma_recvs went up): a WRITE needs no "
        "receive (rdma_recvs changed by 1)"]


def test_a_build_error_is_the_only_finding() -> None:
    obs = judge.Observation([], build_error="lesson.c:12: error: expected ';'")
    assert [f.to_dict() for f in judge.judge(catalog.lesson(2), obs)] == [
        {"check": "build", "passed": False,
         "text": "your code does not compile:\nlesson.c:12: error: expected ';'"}]


def test_the_exit_mark_is_read_back_and_taken_out_of_the_output() -> None:
    assert _marked("prog server") == 'prog server; rc=$?; echo "--lesson-exit $rc" >&2; exit $rc'
    assert _split_exit("buffer 1\n--lesson-exit 3\nafter") == (3, "buffer 1\nafter")
    assert _split_exit("killed before the mark") == (None, "killed before the mark")
    assert _split_exit("--lesson-exit x") == (None, "--lesson-exit x")


def test_the_wire_is_counted_per_side_from_a_real_capture() -> None:
    # ibv_rc_pingpong with the server's receives posted late: RNR NAKs, then the pingpong
    result = RunResult("custom", "", "node1", "node2", "failed")
    result.capture = {"pcap": str(CAPTURES / "rxe-rc-pingpong-rnr.pcap")}  # type: ignore[typeddict-item]
    obs = judge.Observation([])
    pcap, frames = _wire(result, obs, "10.77.1.1", "10.77.1.2")
    assert pcap == CAPTURES / "rxe-rc-pingpong-rnr.pcap" and frames
    assert set(obs.sent) == {"client", "server"}
    assert obs.sent["client"]["RC_SEND_ONLY"] > 1
    assert set(obs.naks) == {"RNR NAK"} and obs.naks.count("RNR NAK") > 10
    # the ladder marks each SEND sent again (`lesson check` prints the marks)
    assert sum(f.recovery == "retransmitted" for f in frames) > 10
    assert obs.resent == {"client": sum(f.recovery == "retransmitted" and f.src == "10.77.1.2"
                                        for f in frames)}


def test_the_packets_a_side_sent_again_are_counted_from_the_recovery_view() -> None:
    # a SEND's first packet lost: the receiver NAKs, the sender sends the message again;
    # the lost packet itself is "missing until now", the three others "retransmitted"
    result = RunResult("custom", "", "node1", "node2", "passed")
    result.capture = {"pcap": str(CAPTURES / "rxe-rc-pingpong-lost-send.pcap")}  # type: ignore[typeddict-item]
    obs = judge.Observation([])
    _wire(result, obs, "10.77.1.1", "10.77.1.2")
    assert obs.resent == {"client": 3}
    assert obs.naks == ["NAK: PSN sequence error"]


def test_cli_list_show_and_refusals(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "lesson", "list", "--json")
    assert code == 0 and [x.number for x in parsed("lesson-list", out).lessons] == [
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    code, out, _ = run_main(monkeypatch, capsys, "lesson", "show", "3")
    assert code == 0 and out.startswith("# Lesson 3: one-sided RDMA WRITE")
    for args, message in [
            (("show", "99"), "error: there is no lesson 99"),
            (("hint", "2", "--number", "9"), "error: lesson 2 has hints 1 to 4 (got 9)"),
            (("check", "1", "--lang", "rust"), "error: --lang must be c or python (got 'rust')"),
            (("check", "1", "--ladder", "x.txt"),
             "error: --ladder x.txt: use a .png or .svg file name")]:
        code, _, err = run_main(monkeypatch, capsys, "lesson", *args)
        assert (code, err.splitlines()[0]) == (2, message)
        assert "Traceback" not in err


def test_hints_come_one_at_a_time_counted_in_the_lesson_folder(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    (tmp_path / ".lesson").write_text('{"lesson": 2, "hints": 0}\n')
    seen = []
    for _ in range(5):
        code, out, _ = run_main(monkeypatch, capsys, "lesson", "hint", "2", "--dir",
                                str(tmp_path))
        assert code == 0
        seen.append(out.split(":")[0])
    assert seen == ["hint 1 of 4", "hint 2 of 4", "hint 3 of 4", "hint 4 of 4", "hint 4 of 4"]
    assert json.loads((tmp_path / ".lesson").read_text()) == {"lesson": 2, "hints": 4}
    (tmp_path / ".lesson").write_text("not json")  # the learner's file: only a reset
    code, out, _ = run_main(monkeypatch, capsys, "lesson", "hint", "2", "--dir", str(tmp_path))
    assert code == 0 and out.startswith("hint 1 of 4: ")


def test_start_keeps_the_learners_files_and_refuses_another_lessons_folder(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    from labctl.cli.lesson import _copy_starter

    (tmp_path / "lesson.c").write_text("my work\n")
    copied, kept = _copy_starter(catalog.lesson(3), tmp_path)
    assert kept == ["lesson.c"] and "lesson.py" in copied and "rdma_common.c" in copied
    assert (tmp_path / "lesson.c").read_text() == "my work\n"
    assert json.loads((tmp_path / ".lesson").read_text()) == {"lesson": 3, "hints": 0}
    with pytest.raises(UsageError) as caught:
        _copy_starter(catalog.lesson(2), tmp_path)
    assert caught.value.message == f"{tmp_path} holds lesson 3's files"
    a_file = tmp_path / "file"
    a_file.write_text("")
    code, _, err = run_main(monkeypatch, capsys, "lesson", "start", "1", str(a_file))
    assert (code, err.splitlines()[0]) == (2, f"error: {a_file} is not a folder")


def test_the_learners_folder_is_data_a_link_or_fifo_there_is_never_followed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """labctl runs as root: a folder from elsewhere may hold a `.lesson` that is a link to
    a file outside it, or a FIFO. The marker is read without following either (a FIFO
    would block) and written as a new file in the folder, the link replaced."""
    import os

    from labctl.cli.lesson import _copy_starter

    outside = tmp_path / "outside.txt"
    outside.write_text('{"lesson": 2, "hints": 0}\n')
    folder = tmp_path / "lesson2"
    folder.mkdir()
    (folder / ".lesson").symlink_to(outside)
    (folder / "lesson.c").symlink_to(outside)  # a starter's name that is a link: kept
    copied, kept = _copy_starter(catalog.lesson(2), folder)
    assert kept == ["lesson.c"] and "rdma_common.c" in copied
    assert outside.read_text() == '{"lesson": 2, "hints": 0}\n'
    assert not (folder / ".lesson").is_symlink()
    assert json.loads((folder / ".lesson").read_text()) == {"lesson": 2, "hints": 0}

    fifo_folder = tmp_path / "fifo"
    fifo_folder.mkdir()
    os.mkfifo(fifo_folder / ".lesson")
    code, out, _ = run_main(monkeypatch, capsys, "lesson", "hint", "2", "--dir",
                            str(fifo_folder))
    assert code == 0 and out.startswith("hint 1 of 4: ")


GOOD = f"buffer 4096 bytes fnv1a64 {judge.expected_digest()}\n"


def _sides(server_out: str, client_out: str, client_sent: dict[str, int],
           server_sent: dict[str, int], naks: list[str] | None = None,
           codes: tuple[int | None, int | None] = (0, 0)) -> judge.Observation:
    obs = _pair(server_out, client_out, client_sent, 0, naks, codes)
    obs.sent["server"] = server_sent
    return obs


def _failed(lesson: int, obs: judge.Observation) -> list[str]:
    return [f.text for f in judge.judge(catalog.lesson(lesson), obs) if not f.passed]


READ_RESPONSES = {"RC_RDMA_READ_RESPONSE_FIRST": 1, "RC_RDMA_READ_RESPONSE_MIDDLE": 2,
                  "RC_RDMA_READ_RESPONSE_LAST": 1}


def test_lesson_4_judges_the_clients_buffer_and_the_servers_read_responses() -> None:
    findings = judge.judge(catalog.lesson(4), _sides(
        "served 4096 bytes\n", GOOD, {"RC_RDMA_READ_REQUEST": 1}, READ_RESPONSES))
    assert judge.passed(findings)
    assert "the client's buffer holds the server's 4096 bytes" in [f.text for f in findings]
    assert "your server sent RC_RDMA_READ_RESPONSE_FIRST 1, RC_RDMA_READ_RESPONSE_LAST 1, " \
        "RC_RDMA_READ_RESPONSE_MIDDLE 2" in [f.text for f in findings]

    # a WRITE into a buffer registered for READ only: refused, nothing read back
    writes = {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2, "RC_RDMA_WRITE_LAST": 1}
    obs = _sides("lesson: the peer closed the TCP connection\n",
                 "lesson: a work request completed with remote invalid request error\n",
                 writes, {"RC_ACKNOWLEDGE": 1}, ["NAK: invalid request"], (1, 1))
    assert _failed(4, obs)[2:] == [
        "your client sent RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_MIDDLE, RC_RDMA_WRITE_LAST "
        "packets; this lesson wants RDMA READ: post IBV_WR_RDMA_READ with the peer's rkey and "
        "address, your own buffer as the sge",
        "your client put no RDMA READ request on the wire (it sent RC_RDMA_WRITE_FIRST 1, "
        "RC_RDMA_WRITE_LAST 1, RC_RDMA_WRITE_MIDDLE 2): post an ibv_send_wr with opcode "
        "IBV_WR_RDMA_READ",
        "the server's device sent back no READ response (it sent RC_ACKNOWLEDGE 1): it "
        "answers a READ only from memory registered with IBV_ACCESS_REMOTE_READ, at the "
        "address and with the rkey it gave",
        "the client printed no digest of its buffer (`buffer N bytes fnv1a64 HEX`): the "
        "client's buffer does not hold the server's 4096 bytes: read the whole buffer from "
        "the peer's address with its rkey into your registered buffer",
        "the server answered NAK: invalid request (1 time): the server's queue pair does not "
        "allow that operation (it was set up without IBV_ACCESS_REMOTE_WRITE, _READ or "
        "_ATOMIC for it), or an atomic's address is not 8-byte aligned"]


IMMEDIATE = "immediate 0xc0de0005\n"
WRITE_IMM = {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2,
             "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE": 1}


def test_lesson_5_wants_the_immediate_on_the_wire_and_in_the_servers_completion() -> None:
    assert judge.passed(judge.judge(catalog.lesson(5), _sides(
        IMMEDIATE + GOOD, "wrote 4096 bytes\n", WRITE_IMM, {"RC_ACKNOWLEDGE": 1})))

    # the immediate without htonl: the bytes arrive, the value is swapped
    assert _failed(5, _sides("immediate 0x0500dec0\n" + GOOD, "", WRITE_IMM, {})) == [
        "your server printed `immediate 0x0500dec0`, not `immediate 0xc0de0005`: the client "
        "sets wr.imm_data = htonl(0xc0de0005) (it travels in network byte order) and the "
        "server prints ntohl(wc.imm_data) from its receive's completion"]

    # a plain WRITE: the server's receive never completes
    plain = {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2, "RC_RDMA_WRITE_LAST": 1}
    obs = _sides("", "wrote 4096 bytes\n", plain, {"RC_ACKNOWLEDGE": 1}, codes=(1, 0))
    obs.runs[0].stderr = "lesson: no completion within 30 s\n"
    assert _failed(5, obs) == [
        "your server exited 1: lesson: no completion within 30 s",
        "your client sent RC_RDMA_WRITE_LAST: a message without an immediate, which "
        "completes no receive on the server; this lesson wants RDMA WRITE with immediate: "
        "post IBV_WR_RDMA_WRITE_WITH_IMM with imm_data and the peer's rkey and address",
        "your client put no RDMA WRITE with immediate on the wire (it sent "
        "RC_RDMA_WRITE_FIRST 1, RC_RDMA_WRITE_LAST 1, RC_RDMA_WRITE_MIDDLE 2): post an "
        "ibv_send_wr with opcode IBV_WR_RDMA_WRITE_WITH_IMM",
        "your server printed no `immediate ...` line, not `immediate 0xc0de0005`: the client "
        "sets wr.imm_data = htonl(0xc0de0005) (it travels in network byte order) and the "
        "server prints ntohl(wc.imm_data) from its receive's completion",
        "the server printed no digest of its buffer (`buffer N bytes fnv1a64 HEX`): the "
        "server's buffer does not hold the client's 4096 bytes: write the whole buffer to "
        "the peer's address with its rkey"]


def test_lesson_6_wants_the_old_value_back_and_the_servers_counter_changed() -> None:
    ack = {"RC_ATOMIC_ACKNOWLEDGE": 1}
    findings = judge.judge(catalog.lesson(6), _sides(
        "counter 1024\n", "fetched 1000\n", {"RC_FETCH_ADD": 1}, ack))
    assert judge.passed(findings)
    assert [f.text for f in findings if f.check == "output"] == [
        "your client printed `fetched 1000`", "your server printed `counter 1024`"]

    # compare-and-swap: 1000 is not 24, nothing swapped, the old value still comes back
    assert _failed(6, _sides("counter 1000\n", "fetched 1000\n", {"RC_COMPARE_SWAP": 1},
                             ack)) == [
        "your client sent RC_COMPARE_SWAP; this lesson wants an atomic fetch-and-add: post "
        "IBV_WR_ATOMIC_FETCH_AND_ADD with the peer's rkey and address and compare_add = ADD",
        "your client put no fetch-and-add on the wire (it sent RC_COMPARE_SWAP 1): post an "
        "ibv_send_wr with opcode IBV_WR_ATOMIC_FETCH_AND_ADD",
        "your server printed `counter 1000`, not `counter 1024`: the fetch-and-add adds "
        "compare_add (ADD, 24) to the 8 bytes at the peer's address"]

    # the second TODO done, not the first: the server allows no atomics, the add refused
    obs = _sides("", "", {"RC_FETCH_ADD": 1}, {"RC_ACKNOWLEDGE": 1},
                 ["NAK: invalid request"], (1, 1))
    texts = _failed(6, obs)
    assert texts[2] == (
        "the server's device sent back no atomic acknowledge (it sent RC_ACKNOWLEDGE 1): it "
        "runs an atomic only on memory registered with IBV_ACCESS_REMOTE_ATOMIC, at the "
        "address and with the rkey it gave")
    assert texts[3].startswith("your client printed no `fetched ...` line, not `fetched 1000`")
    assert texts[-1].startswith("the server answered NAK: invalid request (1 time): the "
                                "server's queue pair does not allow that operation")


def test_a_printed_line_to_expect_is_one_a_stripped_line_can_equal() -> None:
    for line in ("", " fetched 1000", "fetched 1000 "):
        with pytest.raises(catalog.ValidationError):
            catalog.PrintsCheck(kind="prints", side="client", line=line, says="x")


def test_a_printed_line_is_matched_whole_and_a_near_one_is_quoted() -> None:
    check = catalog.PrintsCheck(kind="prints", side="client", line="fetched 1000",
                                says="got {found}")
    obs = _pair("", "fetched 10000\nfetched 1000 \n", {}, 0)
    assert judge._prints(check, obs)[0].passed  # surrounding blanks do not count
    obs = _pair("", "fetched 10000\nfetched 7\nother\n", {}, 0)
    assert judge._prints(check, obs)[0].text == "got `fetched 7`"
    assert judge._prints(check, _pair("fetched 1000\n", "", {}, 0))[0].text == \
        "got no `fetched ...` line"  # the server's line is not the client's


def _with_errors(obs: judge.Observation, server_err: str, client_err: str,
                 ) -> judge.Observation:
    obs.runs[0].stderr, obs.runs[1].stderr = server_err, client_err
    return obs


UD_MESSAGE = "message: hello through an address handle\n"
PEER_GONE = "lesson: the peer closed the TCP connection\n"


def test_lesson_7_wants_a_datagram_and_names_an_address_handle_without_the_grh() -> None:
    findings = judge.judge(catalog.lesson(7), _sides(
        UD_MESSAGE, "sent 32 bytes\n", {"UD_SEND_ONLY": 1}, {}))
    assert judge.passed(findings)

    # is_global = 0: rxe refuses the address handle; C's message and pyverbs' exception
    for client_err in ("lesson: ibv_create_ah: Invalid argument\n",
                       "Traceback (most recent call last):\n  ...\npyverbs.pyverbs_error."
                       "PyverbsRDMAError: Failed to create AH. Errno: 22, Invalid argument\n"):
        obs = _with_errors(_sides("", "", {}, {}, codes=(1, 1)), PEER_GONE, client_err)
        texts = _failed(7, obs)
        assert texts[0] == "your server exited 1: lesson: the peer closed the TCP connection"
        assert texts[1].startswith("your client exited 1: ")
        assert texts[1].endswith(": the address handle was refused: on RoCE it needs the "
                                 "GRH (is_global = 1, grh.dgid = the server's GID, "
                                 "grh.sgid_index = your GID index)")
        assert texts[2].startswith("your client put no datagram on the wire (it sent "
                                   "nothing)")

    # a receive with no room for the 40-byte GRH: rxe drops the datagram, nothing completes
    obs = _with_errors(_sides("", "sent 32 bytes\n", {"UD_SEND_ONLY": 1}, {}, codes=(1, 0)),
                       "lesson: no completion within 10 s\n", "")
    assert _failed(7, obs)[0] == (
        "your server exited 1: lesson: no completion within 10 s: no datagram reached the "
        "server's receive: the device drops one that does not fit the receive (the 40-byte "
        "GRH and the payload: GRH_BYTES longer than the message) or that names another QP "
        "number or Q_Key, and says nothing")

    # the starter's TODO names ibv_create_ah too, and is no refused address handle
    obs = _with_errors(_sides("", "", {}, {}, codes=(1, 1)), PEER_GONE,
                       "TODO: an address handle for the server (ibv_create_ah)\n")
    assert _failed(7, obs)[1] == ("your client exited 1: TODO: an address handle for the "
                                  "server (ibv_create_ah)")

    # an RC SEND where a datagram is wanted; the payload read at the buffer's start
    texts = _failed(7, _sides("message: \n", "", {"RC_SEND_ONLY": 1}, {}))
    assert texts == [
        "your client sent RC_SEND_ONLY, on a connected (RC) queue pair; this lesson wants a "
        "datagram: a UD queue pair (IBV_QPT_UD, lab_setup_ud) and a send through an address "
        "handle",
        "your client put no datagram on the wire (it sent RC_SEND_ONLY 1): post an "
        "IBV_WR_SEND on the UD queue pair with wr.wr.ud.ah, remote_qpn and remote_qkey",
        "your server printed `message:`, not `message: hello through an address handle`: "
        "the payload starts GRH_BYTES (40) into the receive buffer, after the GRH"]


def test_an_exit_explanation_is_a_regular_expression_checked_when_loaded() -> None:
    with pytest.raises(catalog.ValidationError, match="not a regular expression"):
        catalog.ExitExplain(matches="ibv_create_ah(", says="x")
    with pytest.raises(catalog.ValidationError):
        catalog.ExitExplain(matches="", says="x")


def _retry_run(client_err: str, hit: int | None, retries: int, exceeded: int,
               resent: int = 0, sent: dict[str, int] | None = None) -> judge.Observation:
    """A lesson 9 run as check.py gathers it: the fault's count, the client's counters."""
    ok = client_err == ""
    server_out = f"buffer 4096 bytes fnv1a64 {judge.expected_digest()}\n" if ok else ""
    obs = judge.Observation(
        [judge.ProgramRun("server", "node1", 0 if ok else 1, server_out,
                          "" if ok else "lesson: the peer closed the TCP connection\n"),
         judge.ProgramRun("client", "node2", 0 if ok else 1,
                          "wrote 4096 bytes\n" if ok else "", client_err)],
        sent={"client": sent or {}}, resent={"client": resent} if resent else {},
        counters={"server": {"rdma_recvs": 0},
                  "client": {"completer_retry_err": retries, "retry_exceeded_err": exceeded}},
        fault_hit=hit, fault_description="drop write count=12")
    return obs


WRITES = {"RC_RDMA_WRITE_FIRST": 1, "RC_RDMA_WRITE_MIDDLE": 2, "RC_RDMA_WRITE_LAST": 1}
RETRY_EXCEEDED = "lesson: a work request completed with transport retry counter exceeded\n"


def test_lesson_9_declares_its_fault_and_passes_a_run_that_got_through_it() -> None:
    lesson = catalog.lesson(9)
    assert lesson.fault is not None
    assert lesson_fault_module.fault_spec(lesson.fault).describe() == "drop write count=12"
    findings = judge.judge(lesson, _retry_run("", 12, 3, 0, sent=WRITES))
    assert judge.passed(findings), [f.text for f in findings if not f.passed]
    assert [f.to_dict() for f in findings if f.check == "fault"] == [
        {"check": "fault", "passed": True,
         "text": "the fault (drop write count=12) acted on 12 packets"}]


def test_lesson_9_names_too_few_retries_by_status_fault_count_and_counters() -> None:
    lesson = catalog.lesson(9)
    # retry_cnt 1: two tries dropped (8 packets), then IBV_WC_RETRY_EXC_ERR
    texts = [f.text for f in judge.judge(lesson, _retry_run(RETRY_EXCEEDED, 8, 1, 1))
             if not f.passed]
    assert texts == [
        "your server exited 1: lesson: the peer closed the TCP connection",
        "your client exited 1: lesson: a work request completed with transport retry counter "
        "exceeded: your client's QP sent its WRITE retry_cnt + 1 times, got no ACK for any of "
        "them and gave up (IBV_WC_RETRY_EXC_ERR): the fault drops the first 3 tries (12 "
        "packets), so retry_cnt must be at least 3, and the timeout long enough that no retry "
        "goes to a try that arrived",
        "no RDMA WRITE of your client's got past the fault (it sent nothing): every try it "
        "made was among the 12 packets dropped",
        "the server printed no digest of its buffer (`buffer N bytes fnv1a64 HEX`): the "
        "server's buffer does not hold the client's 4096 bytes: the WRITE never got through",
        "the fault dropped 8 of your client's WRITE packets, not the 12 it holds back (3 "
        "tries of 4 packets): your client stopped sending before its fourth try",
        "your client's device gave up on a work request after retry_cnt retries "
        "(retry_exceeded_err changed by 1)",
        "your client's device sent the message again fewer than the 3 times the fault needs "
        "(completer_retry_err counts each retry): raise retry_cnt to at least 3 "
        "(completer_retry_err changed by 1)"]
    # the same in Python's words (rdma_common.py prints ibv_wc_status_str's)
    python = _retry_run(RETRY_EXCEEDED, 12, 2, 1)
    python.runs[1].stderr = ("Traceback ...\nlesson: a work request completed with transport "
                             "retry counter exceeded\n")
    texts = [f.text for f in judge.judge(lesson, python) if not f.passed]
    assert "retry_cnt must be at least 3" in texts[1]
    assert not any(t.startswith("the fault dropped") for t in texts)  # 12: all three tries


def test_lesson_9_names_a_timeout_too_short_or_too_long() -> None:
    lesson = catalog.lesson(9)
    # the fourth try arrived, but the QP sent it again before its ACK came back
    texts = [f.text for f in judge.judge(lesson, _retry_run("", 12, 4, 0, 4, WRITES))
             if not f.passed]
    assert texts == [
        "your client sent 4 packets again that had already reached the server (the capture "
        "marks them retransmitted): its timeout is shorter than an ACK takes to come back, "
        "and each of those retries spends one of retry_cnt: raise the timeout (16 to 20 in "
        "a slow lab)"]
    # timeout 0 (never sent again) or four tries longer than the client's 30 s
    texts = [f.text for f in judge.judge(
        lesson, _retry_run("lesson: no completion within 30 s\n", 4, 0, 0)) if not f.passed]
    assert texts[1] == (
        "your client exited 1: lesson: no completion within 30 s: your client's QP did not "
        "get its WRITE through within the client's 30 s: a timeout of 0 never sends again, "
        "and 4 tries of 4.096 us * 2^timeout must fit in 30 s (20 is 4.3 s each)")
    # the gate's count unread (its node did not answer): a failed finding, not a pass
    texts = [f.text for f in judge.judge(lesson, _retry_run("", None, 3, 0, sent=WRITES))
             if not f.passed]
    assert texts == ["the fault's packet count could not be read (drop write count=12)"]


def test_a_lessons_fault_is_declared_with_its_checks_and_only_on_a_pair() -> None:
    raw = {"number": 9, "slug": "x", "title": "t", "summary": "s", "roles": "pair",
           "topology": "lab-rxe.yaml", "hints": ["h"]}
    fault = {"side": "client", "action": "drop", "opcodes": ["write"], "count": 12}
    fault_check = {"kind": "fault", "hit": 12, "says": "{found}"}
    catalog.Lesson.model_validate({**raw, "fault": fault, "checks": [fault_check]})
    with pytest.raises(catalog.ValidationError, match="a fault check needs the lesson's fault"):
        catalog.Lesson.model_validate({**raw, "checks": [fault_check]})
    with pytest.raises(catalog.ValidationError, match="between a server and a client"):
        catalog.Lesson.model_validate({**raw, "roles": "single", "fault": fault,
                                       "checks": [{"kind": "exit"}]})
    # counted, never random: no probability, no delay, no unknown field
    for extra in ({"probability": "30%"}, {"action": "delay"}, {"count": 0},
                  {"nth": 2}):
        with pytest.raises(catalog.ValidationError):
            catalog.Lesson.model_validate({**raw, "fault": {**fault, **extra},
                                           "checks": [{"kind": "exit"}]})
    # what labctl fault add refuses, the lesson's fault is refused for (the unit tests
    # build every shipped lesson's fault: a misspelt opcode is found here, not in a lab)
    bad = catalog.LessonFault(side="client", action="drop", opcodes=("wirte",))
    with pytest.raises(UsageError, match="unknown opcode 'wirte'"):
        lesson_fault_module.fault_spec(bad)
    for item in catalog.lessons():
        if item.fault is not None:
            assert lesson_fault_module.fault_spec(item.fault).action == item.fault.action


class _FaultCalls:
    """Stands in for rdmafault.apply's functions: records what the run asked of the lab."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, existing: list[str]) -> None:
        self.calls: list[tuple[str, object]] = []
        monkeypatch.setattr(lesson_fault_module, "load_faults", lambda handle: existing)
        monkeypatch.setattr(lesson_fault_module, "add_fault", self.add)
        monkeypatch.setattr(lesson_fault_module, "clear_faults", self.clear)
        monkeypatch.setattr(lesson_fault_module, "fault_counts",
                            lambda handle, faults: {faults[0].id: [16, 12]})

    def add(self, handle: object, node: str, ifname: str, spec: object) -> object:
        self.calls.append(("add", (node, ifname)))
        from labctl.rdmafault.apply import Fault
        return Fault(7, node, ifname, 2, spec)  # type: ignore[arg-type]

    def clear(self, handle: object, fault_id: int) -> list[object]:
        self.calls.append(("clear", fault_id))
        return []


class _Handle:
    def __init__(self) -> None:
        with catalog.resources.as_file(catalog.topology_file(catalog.lesson(9))) as path:
            self.lab = load_lab(path)


def test_the_lessons_fault_is_on_for_the_run_and_off_after_it_however_it_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fault = catalog.lesson(9).fault
    nodes = {"server": "node1", "client": "node2"}
    calls = _FaultCalls(monkeypatch, [])
    handle: object = _Handle()
    with lesson_fault_module.lesson_fault(handle, fault, nodes) as seen:  # type: ignore[arg-type]
        assert seen is not None and calls.calls == [("add", ("node2", "eth1"))]
    assert (seen.hit, seen.node, seen.description) == (12, "node2", "drop write count=12")
    assert calls.calls[-1] == ("clear", 7)
    for interrupt in (KeyboardInterrupt(), RuntimeError("the run failed")):
        calls.calls.clear()
        with pytest.raises(type(interrupt)), \
                lesson_fault_module.lesson_fault(handle, fault, nodes):  # type: ignore[arg-type]
            raise interrupt
        assert calls.calls == [("add", ("node2", "eth1")), ("clear", 7)]
    # no fault declared: nothing is asked of the lab
    calls.calls.clear()
    with lesson_fault_module.lesson_fault(handle, None, nodes) as seen:  # type: ignore[arg-type]
        assert seen is None
    assert calls.calls == []


def test_a_lab_with_faults_of_its_own_is_refused_and_they_are_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _FaultCalls(monkeypatch, ["a fault of the user's"])
    handle = _Handle()
    nodes = {"server": "node1", "client": "node2"}
    with pytest.raises(LabctlError) as caught, \
            lesson_fault_module.lesson_fault(handle, catalog.lesson(9).fault, nodes):  # type: ignore[arg-type]
        raise AssertionError("the run must not start")
    assert caught.value.message == f"lab {handle.lab.name} has faults on it already"
    assert caught.value.hint == (
        f"`labctl fault list --lab {handle.lab.name}` shows them; "
        f"`labctl fault clear --lab {handle.lab.name}` takes them off")
    assert calls.calls == []


def _recorded(pcap: str, server_out: str, client_out: str) -> judge.Observation:
    """A live run's capture (`lesson check 8` in a two-node rxe lab: server 10.77.1.1,
    client 10.77.1.2) read as check does, with the programs' outputs."""
    obs = judge.Observation([judge.ProgramRun("server", "node1", 0, server_out),
                             judge.ProgramRun("client", "node2", 0, client_out)])
    result = RunResult("custom", "", "node1", "node2", "ok")
    result.capture = {"pcap": str(DATA / pcap)}  # type: ignore[typeddict-item]
    _wire(result, obs, "10.77.1.1", "10.77.1.2")
    return obs


RDMA_CM_WANTED = ("this lesson wants RDMA CM: rdma_resolve_addr, rdma_resolve_route and "
                  "rdma_connect on the client, rdma_bind_addr, rdma_listen and rdma_accept "
                  "on the server")


def test_lesson_8_wants_the_cm_exchange_on_the_wire_and_the_data_on_its_queue_pair() -> None:
    # the reference answer's run: REQ, REP, RTU on QP1, the SEND to the QP the REP named
    obs = _recorded("rxe-lesson8-cm-send.pcap", GOOD, "sent 4096 bytes\n")
    assert [(side, op) for side, op, _ in obs.connection] == [
        ("client", "CM_REQ"), ("server", "CM_REP"), ("client", "CM_RTU"),
        ("client", "CM_DREQ"), ("server", "CM_DREP")]
    assert obs.side_channel == 0
    findings = judge.judge(catalog.lesson(8), obs)
    assert judge.passed(findings), [f.text for f in findings]
    (rep,) = [f for side, op, f in obs.connection if op == "CM_REP"]
    assert set(obs.dest_qps["client"]) == {rep["local_qpn"]}
    assert f"your client's data went to the server's QP {rep['local_qpn']:#x}, the one RDMA " \
        "CM connected" in [f.text for f in findings]

    # lesson 2's program: the bytes arrive, but the QP numbers went over TCP
    obs = _recorded("rxe-lesson8-tcp-exchange.pcap", GOOD, "sent 4096 bytes\n")
    assert obs.connection == [] and obs.side_channel > 0
    assert _failed(8, obs) == [
        "your programs exchanged QP numbers themselves over TCP and made no RDMA CM "
        "connection; " + RDMA_CM_WANTED]


def _connection(*steps: tuple[str, str, dict[str, object]]) -> judge.Observation:
    obs = _sides(GOOD, "sent 4096 bytes\n", {"RC_SEND_ONLY": 1}, {})
    obs.connection = list(steps)
    obs.dest_qps = {"client": {0x11: 1}}
    return obs


def test_lesson_8_names_the_step_of_the_connection_that_is_missing() -> None:
    req = ("client", "CM_REQ", {"local_qpn": 0x12})
    rep = ("server", "CM_REP", {"local_qpn": 0x11})
    assert judge.passed(judge.judge(catalog.lesson(8), _connection(
        req, rep, ("client", "CM_RTU", {}))))
    assert _failed(8, _connection()) == [
        "your client put no RDMA CM connection request on the wire; " + RDMA_CM_WANTED]
    assert _failed(8, _connection(req)) == [
        "the server never accepted the connection request (no CM_REP): on "
        "RDMA_CM_EVENT_CONNECT_REQUEST make the queue pair on the event's id "
        "(rdma_create_qp) and call rdma_accept"]
    assert _failed(8, _connection(req, ("server", "CM_REJ", {"reason": 28}))) == [
        "the server rejected the connection (CM_REJ, reason 28): the server accepts with "
        "rdma_accept on the id the CONNECT_REQUEST event brings, after making its queue "
        "pair on that id"]
    assert _failed(8, _connection(req, rep)) == [
        "the client never completed the connection (no CM_RTU after the server's CM_REP): "
        "after rdma_connect wait for RDMA_CM_EVENT_ESTABLISHED"]
    # connected, but the data sent on another queue pair than the one RDMA CM connected
    rep_other = ("server", "CM_REP", {"local_qpn": 0x13})
    assert _failed(8, _connection(req, rep_other, ("client", "CM_RTU", {}))) == [
        "your client sent its data to QP 0x11, not to the server's QP 0x13 that RDMA CM "
        "connected (in the CM_REP): post on the queue pair rdma_create_qp made on the "
        "connected id (id->qp)"]


def test_lesson_8_names_a_refused_connection_and_an_address_that_does_not_resolve() -> None:
    obs = _with_errors(_sides("", "", {}, {}, codes=(None, 1)), "",
                       "lesson: RDMA CM said RDMA_CM_EVENT_REJECTED (status 28), not "
                       "RDMA_CM_EVENT_ESTABLISHED\n")
    assert _failed(8, obs)[1].endswith(
        ": the server did not take the connection: it must listen on the port the client "
        "connects to (-p) and answer RDMA_CM_EVENT_CONNECT_REQUEST with rdma_accept")
    for error in ("lesson: RDMA CM said RDMA_CM_EVENT_ADDR_ERROR (status -110), not "
                  "RDMA_CM_EVENT_ADDR_RESOLVED\n",
                  "pyverbs.pyverbs_error.PyverbsRDMAError: Failed to get Address Info. "
                  "Errno: 19, No such device\n"):
        obs = _with_errors(_sides("", "", {}, {}, codes=(None, 1)), "", error)
        assert _failed(8, obs)[1].endswith(
            ": the server's address did not resolve to an RDMA device: give "
            "rdma_resolve_addr (or AddrInfo's dst) the server's IP address on the lab's "
            "link, the one the client's command line names")


def test_lesson_8_names_a_connect_without_the_route() -> None:
    obs = _with_errors(_sides("", "", {}, {}, codes=(None, 1)), "",
                       "lesson: rdma_connect: Invalid argument\n")
    assert _failed(8, obs)[1] == (
        "your client exited 1: lesson: rdma_connect: Invalid argument: rdma_connect needs "
        "the route: after RDMA_CM_EVENT_ADDR_RESOLVED call rdma_resolve_route and wait for "
        "RDMA_CM_EVENT_ROUTE_RESOLVED, then make the queue pair and connect")


ON_IWARP = ("on iWARP the queue pair can only be connected through RDMA CM: rdma_resolve_addr, "
            "rdma_resolve_route and rdma_connect on the client, rdma_listen and rdma_accept "
            "on the server")


def test_lesson_10_wants_a_write_then_a_send_over_mpa_on_siw() -> None:
    # the reference answer's run in a siw lab: MPA request and reply, the WRITE's FPDUs
    # (tagged), then the SEND
    obs = _recorded("siw-lesson10-write-send.pcap", GOOD, "wrote 4096 bytes\n")
    assert [(side, op) for side, op, _ in obs.connection] == [
        ("client", "MPA_REQUEST"), ("server", "MPA_REPLY")]
    assert obs.sent["client"] == {"MPA_REQUEST": 1, "RDMA_WRITE": 3, "SEND": 1}
    assert obs.side_channel == 0 and obs.naks == [] and obs.dest_qps == {}
    findings = judge.judge(catalog.lesson(10), obs)
    assert judge.passed(findings), [f.text for f in findings]
    assert "your programs connected through RDMA CM (the MPA request and reply on the TCP " \
        "connection)" in [f.text for f in findings]

    # the starter: a WRITE with immediate, which siw refuses when it is posted
    obs = _recorded("siw-lesson10-write-with-imm.pcap", "", "")
    obs.runs[0].exit, obs.runs[0].stdout = 1, "lesson: a work request completed with Work " \
        "Request Flushed Error\n"
    obs.runs[1].exit, obs.runs[1].stderr = 1, "lesson: ibv_post_send: Invalid argument\n"
    assert _failed(10, obs) == [
        "your server exited 1: lesson: a work request completed with Work Request Flushed "
        "Error",
        "your client exited 1: lesson: ibv_post_send: Invalid argument: siw refused the work "
        "request: iWARP has no immediate data (no IBV_WR_RDMA_WRITE_WITH_IMM or "
        "IBV_WR_SEND_WITH_IMM) and no atomics; post an IBV_WR_RDMA_WRITE, then an "
        "IBV_WR_SEND that tells the server",
        "your client put no RDMA WRITE on the wire (it sent MPA_REQUEST 1): post an "
        "IBV_WR_RDMA_WRITE of the buffer to the address and rkey the server's accept "
        "carried",
        "your client sent no SEND to tell the server (it sent MPA_REQUEST 1): after the "
        "WRITE post an IBV_WR_SEND of the note, which the server's receive takes",
        "the server printed no digest of its buffer (`buffer N bytes fnv1a64 HEX`): the "
        "server's buffer does not hold the client's 4096 bytes: WRITE the whole buffer to "
        "the address and with the rkey in the server's private data, before the SEND"]


def test_lesson_10_names_what_works_on_rxe_and_not_on_siw() -> None:
    # lesson 3's program: rdma_common asks for GID index 1, siw has only 0
    obs = _with_errors(_sides("", "", {}, {}, codes=(1, None)),
                       "lesson: ibv_query_gid: Invalid argument\n", "")
    texts = _failed(10, obs)
    assert texts[0] == (
        "your server exited 1: lesson: ibv_query_gid: Invalid argument: siw has a single GID "
        "(index 0) and iWARP does not address a peer by GID: connect through RDMA CM by IP "
        "address (rdma_resolve_addr, rdma_connect) instead of swapping QP numbers and GIDs")
    assert texts[2] == "your client put no RDMA CM connection request on the wire; " + ON_IWARP
    # with GID index 0 it gets as far as RTS, which siw refuses without RDMA CM's TCP stream
    obs = _with_errors(_sides("", "", {}, {}, codes=(1, 1)), "",
                       "lesson: modify the QP to RTS: Invalid argument\n")
    obs.side_channel = 4
    texts = _failed(10, obs)
    assert texts[1] == (
        "your client exited 1: lesson: modify the QP to RTS: Invalid argument: on iWARP a "
        "queue pair is connected only through RDMA CM (rdma_connect and rdma_accept make its "
        "TCP connection): swapping QP numbers and ibv_modify_qp to RTR and RTS, as on RoCE, "
        "cannot connect it")
    assert texts[2] == ("your programs exchanged QP numbers themselves over TCP and made no "
                        "RDMA CM connection; " + ON_IWARP)


def test_lesson_10_names_a_rejected_or_unanswered_mpa_request() -> None:
    request = ("client", "MPA_REQUEST", {"rev": 2})
    obs = _sides(GOOD, "", {"RDMA_WRITE": 1, "SEND": 1}, {})
    obs.connection = [request]
    assert _failed(10, obs) == [
        "the server never accepted the connection (no MPA reply to the client's MPA "
        "request): on RDMA_CM_EVENT_CONNECT_REQUEST make the queue pair on the event's id "
        "(rdma_create_qp) and call rdma_accept"]
    obs.connection = [request, ("server", "MPA_REPLY", {"reject": True})]
    assert _failed(10, obs) == [
        "the server rejected the connection (an MPA reply with the reject flag): accept "
        "with rdma_accept on the id the CONNECT_REQUEST event brings"]
    # a TERMINATE from the server is iWARP's NAK
    obs.connection, obs.naks = [request, ("server", "MPA_REPLY", {"reject": False})], [
        "TERMINATE"]
    assert _failed(10, obs) == [
        "the server answered TERMINATE (1 time): the server's device ended the connection: "
        "an operation it refused (a wrong STag or address, memory registered without the "
        "remote access the operation needs, or an operation iWARP does not have)"]
