"""Refresh the golden records from a live lab node: our capture plus the C tools' output.

    python tests/unit/verbs_records/refresh.py NODE [--lab LAB] [--name NAME]

writes `NAME.json` (our `capture`, taken in the same node run as the C tools) and
`NAME/{cases.json,<case>.out}` beside this file. NAME defaults to "<rdma>-<node>".
The node side is NODE_SCRIPT below, run with the node's python3 (stdlib only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (case name, tool, args): the C tool is ibv_<tool>, ours `python3 -m labctl.verbs <tool>`.
CASES = [
    ("devinfo", "devinfo", []),
    ("devinfo-v", "devinfo", ["-v"]),
    ("devinfo-d", "devinfo", ["-d", "{dev}"]),
    ("devinfo-d-unknown", "devinfo", ["-d", "nosuchdev0"]),
    ("devinfo-i1", "devinfo", ["-i", "1"]),
    ("devinfo-i2", "devinfo", ["-i", "2"]),
    ("devinfo-i0", "devinfo", ["-i", "0"]),
    ("devinfo-i257", "devinfo", ["--ib-port=257"]),
    ("devinfo-l", "devinfo", ["-l"]),
    ("devinfo-v-d-i", "devinfo", ["-v", "--ib-dev={dev}", "-i", "1"]),
    ("devinfo-badopt", "devinfo", ["-x"]),
    ("devices", "devices", []),
]

NODE_SCRIPT = r"""
import json, subprocess, sys
cases = json.loads(sys.argv[1])
out = {}
for name, tool, args in cases:
    p = subprocess.run(["ibv_" + tool, *args], capture_output=True, text=True)
    out[name] = {"tool": tool, "args": args, "rc": p.returncode, "stdout": p.stdout}
rec = subprocess.run([sys.executable, "-m", "labctl.verbs", "capture"], capture_output=True,
                     text=True, check=True)
print(json.dumps({"cases": out, "record": json.loads(rec.stdout)}))
"""


def write(name: str, result: dict[str, object]) -> None:
    record = result["record"]
    cases = result["cases"]
    assert isinstance(cases, dict)
    (HERE / f"{name}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    folder = HERE / name
    folder.mkdir(exist_ok=True)
    spec = {}
    for case, got in cases.items():
        (folder / f"{case}.out").write_text(got["stdout"])
        spec[case] = {"tool": got["tool"], "args": got["args"], "rc": got["rc"]}
    (folder / "cases.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("node")
    parser.add_argument("--lab")
    parser.add_argument("--name")
    opts = parser.parse_args()

    from labctl.lab.handle import open_lab

    handle = open_lab(opts.lab)
    node = handle.lab.node(opts.node)
    dev = handle.rdma_device(opts.node) if node.rdma != "none" else "rxe0"
    cases = [(n, t, [a.format(dev=dev) for a in args]) for n, t, args in CASES]
    argv = ["env", "PYTHONPATH=/opt/labctl", "python3", "-c", NODE_SCRIPT, json.dumps(cases)]
    proc = handle.run(opts.node, argv, timeout=300)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return proc.returncode
    write(opts.name or f"{node.rdma}-{opts.node}", json.loads(proc.stdout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
