"""One JSON Schema per `--json` output, made from the types the commands print: the
dataclasses that are the output (RunResult, BenchReport, the resolved Lab, the graph,
doctor's Check, the decoder's Frame) and the TypedDicts the dict-building commands are
annotated with (labctl/cli/shapes.py, labctl/lab/links.py).

The schemas are published as docs/json/NAME.schema.json; tests/unit/test_json_shapes.py
regenerates them (fails when a file differs) and validates each command's real output
against its file. Regenerate after changing a model:

    python -m labctl.cli.schemas          # writes docs/json/*.schema.json
    python -m labctl.cli.schemas --check  # exit 1 if a file is not what the models say

Every object closes (additionalProperties false): a key the model does not name is a shape
change. A dataclass's fields are all required, as dataclasses.asdict writes them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema
from typing_extensions import TypedDict

from labctl.cli.doctor import DoctorOutput
from labctl.cli.shapes import (
    CopyOutput,
    DockerHostDownOutput,
    DockerHostStatus,
    DockerHostUpOutput,
    DownOutput,
    ExecAllOutput,
    FaultClearOutput,
    ImageBuildOutput,
    ImageListOutput,
    ImageRemovalOutput,
    LinkSetOutput,
    NodeActionOutput,
    RunListOutput,
    RunRecords,
    StatusOutput,
    TopologiesOutput,
    UcxInfoOutput,
    UpOutput,
    VersionOutput,
)
from labctl.cli.validate import ValidateProblems
from labctl.course.shapes import GradeOutput, LessonListOutput, LessonVerdict
from labctl.lab.counters import CountersRecord
from labctl.lab.links import LinkShowOutput
from labctl.lab.matrix import MatrixReport
from labctl.providers.vagrant_plan import VagrantDocument
from labctl.rdmafault.apply import FaultAdded, FaultList
from labctl.runners.bench import BenchReport
from labctl.runners.mpi import MpiReport
from labctl.runners.rdma_core_tests import SuiteReport
from labctl.topology.graph import Graph
from labctl.topology.resolved import Lab, Node
from labctl.verbs import records
from labctl.wire.decode import Frame

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# The version of the shapes, in every schema file ("schema_version") and in its $id: raised
# when any output changes in a way a reader notices (a key gone or renamed, another top
# level), with a CHANGELOG.md entry. 2: every top level is an object, a run's records are
# under "records".
SCHEMA_VERSION = 2
DOCS = Path(__file__).resolve().parents[2] / "docs" / "json"


@dataclass(frozen=True)
class Output:
    """A `--json` output: its schema file's name (docs/json/NAME.schema.json), the
    commands that print it, and the type of what they print."""

    name: str
    commands: tuple[str, ...]  # without `labctl`, e.g. "image list"
    model: Any  # a dataclass, a TypedDict, or a list or union of them
    lines: bool = False  # JSON Lines: one `model` per line, not one document

    @property
    def file(self) -> str:
        return f"{self.name}.schema.json"


# --- the node-side inspector's records (labctl/verbs/records.py) -------------------------
# Nodes run that code with the standard library only (no typing_extensions, no dataclasses:
# labctl/verbs/records.py says why), so its Record classes are turned into TypedDicts here,
# from their own annotations: every field is written (Record.to_dict).
def _json_type(hint: Any) -> Any:
    if isinstance(hint, type) and issubclass(hint, records.Record):
        return record_type(hint)
    if get_origin(hint) in (Union, types.UnionType):
        return Union[tuple(_json_type(a) for a in get_args(hint))]  # noqa: UP007
    if get_origin(hint) is list:
        return list[_json_type(get_args(hint)[0])]  # type: ignore[misc]
    return hint


_RECORD_TYPES: dict[str, Any] = {}
_make_typed_dict: Any = TypedDict  # called with a name made at run time (mypy wants literals)


def record_type(cls: type[records.Record]) -> Any:
    """The TypedDict of what `cls.to_dict()` writes (one per class: pydantic names it once)."""
    if cls.__name__ not in _RECORD_TYPES:
        hints = get_type_hints(cls, localns={"Any": Any, "ClassVar": ClassVar})
        fields = {name: _json_type(hints[name]) for name in cls._fields}
        made = _make_typed_dict(cls.__name__, fields)
        made.__doc__ = cls.__doc__
        _RECORD_TYPES[cls.__name__] = made
    return _RECORD_TYPES[cls.__name__]


class NodeError(TypedDict):
    """A node whose inspector failed or answered with something unusable."""

    error: str


class DeviceRow(TypedDict):
    """A device in `labctl-devices --json` (labctl/verbs/devices.py as_json)."""

    device: str
    node_guid: str  # 16 hex digits


class NoDeviceList(TypedDict):
    """`labctl-devices --json` when ibv_get_device_list() failed."""

    error: str  # strerror(errno)
    errno: int


# `devinfo --json`, `devices --json`: an object keyed by node name, with one node as with
# several; each node's reply as its inspector printed it, or {"error": TEXT}.
DevinfoOutput: Any = types.GenericAlias(dict, (str, record_type(records.Snapshot) | NodeError))
DevicesOutput: Any = dict[str, list[DeviceRow] | NoDeviceList | NodeError]


# `labctl run EXAMPLE --json`: {"records": [...]}, one record per pair.
RUN_EXAMPLES = ("run pingpong", "run rping", "run perftest", "run mckey", "run rdma-server",
                "run udaddy", "run ucmatose", "run cmtime", "run rstream", "run riostream",
                "run rcopy", "run qperf", "run fabric", "run custom")

OUTPUTS: tuple[Output, ...] = (
    Output("status", ("status",), StatusOutput),
    Output("up", ("up",), UpOutput),
    Output("down", ("down",), DownOutput),
    Output("topologies", ("topologies",), TopologiesOutput),
    # the second with --vagrant, the third for a file with problems (exit 2)
    Output("validate", ("validate",), Lab | VagrantDocument | ValidateProblems),
    Output("graph", ("graph",), Graph),
    Output("image-list", ("image list",), ImageListOutput),
    Output("image-build", ("image build",), ImageBuildOutput),
    Output("image-rm", ("image rm",), ImageRemovalOutput),
    Output("image-prune", ("image prune",), ImageRemovalOutput),
    Output("version", ("version",), VersionOutput),
    Output("doctor", ("doctor",), DoctorOutput),
    Output("run", RUN_EXAMPLES, RunRecords),
    # `run nvmeof`, `run nfs`: a record per transport and pair
    Output("run-storage", ("run nvmeof", "run nfs"), RunRecords),
    Output("run-all", ("run all",), RunRecords),
    Output("run-list", ("run list",), RunListOutput),
    Output("run-ucx", ("run ucx",), RunRecords),
    Output("run-ucx-info", ("run ucx-info",), UcxInfoOutput),
    Output("run-mpi", ("run mpi",), MpiReport),
    Output("run-rdma-core-tests", ("run rdma-core-tests",), SuiteReport),
    Output("bench", ("bench",), BenchReport),
    Output("link-show", ("link show",), LinkShowOutput),
    Output("link-set", ("link set",), LinkSetOutput),
    Output("exec", ("exec",), ExecAllOutput),  # with --all
    Output("capture", ("capture",), Frame, lines=True),  # with --decode FILE.pcap
    Output("docker-host-status", ("docker-host status",), DockerHostStatus),
    Output("docker-host-up", ("docker-host up",), DockerHostUpOutput),
    Output("docker-host-down", ("docker-host down",), DockerHostDownOutput),
    Output("node-action", ("stop", "start", "restart"), NodeActionOutput),
    Output("cp", ("cp",), CopyOutput),
    Output("devinfo", ("devinfo",), DevinfoOutput),
    Output("devices", ("devices",), DevicesOutput),
    Output("fault-add", ("fault add",), FaultAdded),
    Output("fault-list", ("fault list",), FaultList),
    Output("fault-clear", ("fault clear",), FaultClearOutput),
    Output("counters", ("counters",), CountersRecord),
    Output("lesson-list", ("lesson list",), LessonListOutput),
    Output("lesson-check", ("lesson check",), LessonVerdict),
    Output("lesson-grade", ("lesson grade",), GradeOutput),
    Output("matrix", ("matrix",), MatrixReport),
)

# Commands with --json and no schema yet: asyncwatch streams its one node's events as the
# node's inspector writes them (labctl/verbs/asyncwatch.py); no test can produce them
# without an RDMA device.
UNPUBLISHED = ("asyncwatch",)

# Keys a dataclass's JSON leaves out when they are empty (Lab.to_json: lab.json files of
# labs without them stay as they were).
OMITTED_WHEN_EMPTY: dict[type, tuple[str, ...]] = {
    Node: (*Node.OMITTED_WHEN_EMPTY, *Node.OMITTED_AT_DEFAULT)}


class _Schema(GenerateJsonSchema):
    """pydantic's generator, with closed objects, every dataclass field required (but
    OMITTED_WHEN_EMPTY's) and no per-property titles (the names say it)."""

    def field_is_required(self, field: core_schema.ModelField | core_schema.DataclassField
                          | core_schema.TypedDictField, total: bool) -> bool:
        if field["type"] == "dataclass-field":
            return True
        return super().field_is_required(field, total)

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        value = _closed(super().dataclass_schema(schema))
        cls = schema["cls"]
        if (cls.__doc__ or "").startswith(f"{cls.__name__}("):  # dataclass's made-up doc
            value.pop("description", None)
        omitted = OMITTED_WHEN_EMPTY.get(cls, ())
        value["required"] = [k for k in value.get("required", []) if k not in omitted]
        for name in value["required"]:  # always written: a default says nothing
            value["properties"][name].pop("default", None)
        return value

    def typed_dict_schema(self, schema: core_schema.TypedDictSchema) -> JsonSchemaValue:
        return _closed(super().typed_dict_schema(schema))


def _closed(value: JsonSchemaValue) -> JsonSchemaValue:
    if "properties" in value:
        value["additionalProperties"] = False
    return value


def schema(output: Output) -> dict[str, Any]:
    """The JSON Schema of what `output`'s commands print (of one line, for JSON Lines)."""
    made = TypeAdapter(output.model).json_schema(mode="serialization",
                                                 schema_generator=_Schema)
    commands = ", ".join(f"`labctl {c} --json`" for c in output.commands)
    what = "each line of " if output.lines else ""
    made.pop("title", None)  # the model's class name: the commands say more
    made.pop("description", None)
    return {"$schema": DRAFT, "$id": f"v{SCHEMA_VERSION}/{output.file}",
            "schema_version": SCHEMA_VERSION, "title": f"labctl {output.commands[0]} --json",
            "description": f"The shape of {what}{commands} (docs/json.md).", **made}


def schema_text(output: Output) -> str:
    return json.dumps(schema(output), indent=2) + "\n"


def stale(directory: Path = DOCS) -> list[str]:
    """What is wrong with the schema files in `directory`, one line per file: missing, not
    what the models say, or left over from an output that is gone. [] when all is well."""
    found = []
    wanted = {o.file for o in OUTPUTS}
    for output in OUTPUTS:
        path = directory / output.file
        if not path.is_file():
            found.append(f"{path}: missing")
        elif path.read_text() != schema_text(output):
            found.append(f"{path}: differs from the models")
    found += [f"{p}: no output has it" for p in sorted(directory.glob("*.schema.json"))
              if p.name not in wanted]
    return found


def write(directory: Path = DOCS) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.schema.json"):
        path.unlink()
    for output in OUTPUTS:
        (directory / output.file).write_text(schema_text(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labctl.cli.schemas",
                                     description="Write (or --check) docs/json/*.schema.json.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a schema file is not what the models say")
    parser.add_argument("--dir", type=Path, default=DOCS, help="default: %(default)s")
    args = parser.parse_args(argv)
    if not args.check:
        write(args.dir)
        return 0
    problems = stale(args.dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("hint: python -m labctl.cli.schemas", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
