"""`labctl matrix`: its input refused with exit 2 before anything is made, every kernel's
lab taken down whatever its steps did, each step run for real on this host (with the
lab's name in LABCTL_LAB), the table and the JSON. The labs are the lifecycle service's:
here its up and destroy are replaced by recorders (what they return is the service's own
UpResult), since booting belongs to the live tests."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labctl.cli import schemas
from labctl.errors import LabctlError, UsageError
from labctl.lab import lifecycle, matrix
from labctl.lab.matrix import FAILED, NOT_RUN, PASSED
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "topologies" / "two-node.yaml"


@pytest.mark.parametrize(("text", "message"), [
    ("", "--kernels '': an empty kernel in the list"),
    ("image,", "--kernels 'image,': an empty kernel in the list"),
    ("image,image", "--kernels names 'image' twice"),
    ("debian:6.12;reboot", "--kernels: 'debian:6.12;reboot' is not a Debian kernel version"),
    (",".join(f"debian:6.{n}" for n in range(17)), "--kernels names 17 kernels; at most 16"),
])
def test_bad_kernel_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        matrix.parse_kernels(text)
    assert info.value.message == message and info.value.hint


def test_kernel_lists_keep_their_order() -> None:
    assert matrix.parse_kernels("debian:6.12, image") == ["debian:6.12", "image"]


def test_steps_are_argvs_in_order_and_one_is_needed() -> None:
    assert matrix.parse_steps(["labctl run pingpong", "sh -c 'exit 3'"], ["true"]) == [
        ["labctl", "run", "pingpong"], ["sh", "-c", "exit 3"], ["true"]]
    for steps, command, message in (([], [], "no step to run in each lab"),
                                    (["  "], [], "--step '' is an empty command"),
                                    (["a 'b"], [], "--step \"a 'b\": No closing quotation")):
        with pytest.raises(UsageError) as info:
            matrix.parse_steps(steps, command)
        assert info.value.message == message


def test_labctl_in_a_step_is_this_labctl() -> None:
    assert matrix.step_argv(["labctl", "status"]) == [sys.executable, "-m", "labctl",
                                                      "status"]
    assert matrix.step_argv(["pytest", "labctl"]) == ["pytest", "labctl"]


def test_labctl_inside_a_steps_shell_is_this_labctl_too(tmp_path: Path) -> None:
    """A step's shell finds `labctl` beside the Python running the matrix (a virtualenv's
    bin folder) before any other on PATH, and LABCTL_LAB names the matrix's lab."""
    env = matrix.step_env("m-lab")
    assert env["LABCTL_LAB"] == "m-lab"
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    ok, reason = matrix._run_step(["sh", "-c", 'test "$LABCTL_LAB" = m-lab && '
                                   'command -v python3 >/dev/null'], env, 30)
    assert ok, reason


class Service:
    """lifecycle's resolve, up and destroy, recorded: `up` fails for the kernels in
    `broken` (as a node that never became ready fails it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, broken: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.broken = broken
        monkeypatch.setattr(lifecycle, "resolve", self.resolve)
        monkeypatch.setattr(lifecycle, "up", self.up)
        monkeypatch.setattr(lifecycle, "destroy", self.destroy)
        monkeypatch.setattr(matrix, "_releases", lambda name: "6.12.118+deb13-amd64")

    def resolve(self, topology: Path, options: lifecycle.UpOptions, progress: Any) -> Any:
        self.calls.append(("resolve", str(options.kernel)))
        lab = load_lab(topology)
        return dataclasses.replace(lab, name=options.name or lab.name)

    def up(self, topology: Path, options: lifecycle.UpOptions, progress: Any, *,
           resolved: Any) -> lifecycle.UpResult:
        self.calls.append(("up", str(options.kernel)))
        if options.kernel in self.broken:
            raise LabctlError("node node2 did not become ready in 300 s\n(console: panic)",
                              hint="see its console")
        return lifecycle.UpResult(resolved, LabDir(resolved.name), 12.34, status={},  # type: ignore[typeddict-item]
                                  restored=[])

    def destroy(self, name: str) -> list[str]:
        self.calls.append(("destroy", name))
        return []


def test_each_kernel_is_up_run_and_down_in_turn(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    service = Service(monkeypatch, broken=("debian:6.12",))
    steps = [["sh", "-c", 'test "$LABCTL_LAB" = m-lab'],
             ["sh", "-c", "echo working; echo 'no ACK from node2' >&2; exit 3"]]
    report = matrix.run_matrix(TOPOLOGY, ["image", "debian:6.12"], steps,
                               lifecycle.UpOptions(name="m-lab"), lambda _m: None)
    # every kernel checked before the first lab; each lab down whatever happened
    assert service.calls == [("resolve", "image"), ("resolve", "debian:6.12"),
                             ("up", "image"), ("destroy", "m-lab"),
                             ("up", "debian:6.12"), ("destroy", "m-lab")]
    image, other = report.kernels
    assert [(c.step, c.result, c.reason) for c in image.cells] == [
        ("up", PASSED, ""),
        ("sh -c 'test \"$LABCTL_LAB\" = m-lab'", PASSED, ""),
        ("sh -c 'echo working; echo '\"'\"'no ACK from node2'\"'\"' >&2; exit 3'", FAILED,
         "exit 3: no ACK from node2")]
    assert [(c.result, c.reason) for c in other.cells] == [
        (FAILED, "(console: panic)"), (NOT_RUN, "the lab did not come up"),
        (NOT_RUN, "the lab did not come up")]
    assert image.release == "6.12.118+deb13-amd64" and other.release == ""
    assert report.passed is False
    header, rows = matrix.format_rows(report)
    assert header[:2] == ["kernel", "up"] and len(header) == 4
    assert rows[0][:3] == ["image (6.12.118+deb13-amd64)", "passed (12 s)", rows[0][2]]
    assert rows[0][3] == "failed: exit 3: no ACK from node2"
    assert rows[1] == ["debian:6.12", "failed: (console: panic)", NOT_RUN, NOT_RUN]


def test_a_step_past_its_time_fails_with_that_reason(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    Service(monkeypatch)
    report = matrix.run_matrix(TOPOLOGY, ["image"], [["sleep", "5"], ["no-such-program-x"]],
                               lifecycle.UpOptions(name="m-lab"), lambda _m: None,
                               step_seconds=0.5)
    sleep, missing = report.kernels[0].cells[1:]
    assert sleep.result == FAILED and "0.5" in sleep.reason and sleep.seconds < 5
    assert missing.result == FAILED and "no-such-program-x" in missing.reason


def test_a_lab_of_the_matrixs_name_that_exists_is_not_touched(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    service = Service(monkeypatch)
    (tmp_path / "m-lab").mkdir()
    (tmp_path / "m-lab" / "lab.json").write_text("{}")  # half-made: lab.json only
    with pytest.raises(UsageError, match="lab m-lab exists"):
        matrix.run_matrix(TOPOLOGY, ["image"], [["true"]], lifecycle.UpOptions(name="m-lab"),
                          lambda _m: None)
    assert [c[0] for c in service.calls] == ["resolve"]


def test_a_kernel_the_provider_cannot_boot_is_refused_before_the_first_lab(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check `up` makes (lifecycle.check_own_kernels), made for every kernel first: a
    Docker lab on a kernel of its own is bad input, not a table of failed `up` cells."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    service = Service(monkeypatch)

    def on_docker(topology: Path, options: lifecycle.UpOptions, progress: Any) -> Any:
        lab = service.resolve(topology, options, progress)
        kernel = "image" if options.kernel == "image" else "/src/linux"
        return dataclasses.replace(lab, provider="docker", nodes=tuple(
            dataclasses.replace(n, kernel=kernel) for n in lab.nodes))

    monkeypatch.setattr(lifecycle, "resolve", on_docker)
    with pytest.raises(UsageError, match=r"docker nodes cannot boot a kernel of their own "
                       r"\(nodes node1, node2\)"):
        matrix.run_matrix(TOPOLOGY, ["image", "/src/linux"], [["true"]],
                          lifecycle.UpOptions(name="m-lab"), lambda _m: None)
    assert [c[0] for c in service.calls] == ["resolve", "resolve"]  # no lab made


def test_the_cli_prints_json_of_its_schema_and_exits_1_on_a_failed_cell(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    Service(monkeypatch)
    code, out, _err = run_main(monkeypatch, capsys, "matrix", "--kernels", "image", "--name",
                               "m-lab", "--json", "--step", "true", str(TOPOLOGY), "--",
                               "false")
    assert code == 1
    data = json.loads(out)
    schema = schemas.schema(next(o for o in schemas.OUTPUTS if o.name == "matrix"))
    jsonschema.validate(data, schema)
    assert [c["result"] for c in data["kernels"][0]["cells"]] == [PASSED, PASSED, FAILED]
    assert data["steps"] == ["true", "false"] and data["passed"] is False


def test_the_cli_refuses_a_matrix_without_steps(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_main(monkeypatch, capsys, "matrix", "--kernels", "image",
                               str(TOPOLOGY))
    assert code == 2 and "error: no step to run in each lab" in err
