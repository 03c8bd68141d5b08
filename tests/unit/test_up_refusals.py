"""`up` refuses what cannot work before it makes anything of the lab."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import labctl.providers.docker as docker_module
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]


def test_a_local_engine_that_does_not_answer_is_refused_before_the_lab_is_made(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "labs"
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setattr(docker_module.shutil, "which", lambda _name: "/usr/bin/docker")
    monkeypatch.setattr(docker_module.os, "geteuid", lambda: 0)
    topology = str(REPO / "topologies/docker-two-node.yaml")
    code, _out, err = run_main(monkeypatch, capsys, "up", topology, "--engine", "local")
    assert code == 1, err
    assert "the Docker engine of this host" in err and "does not answer" in err, err
    assert "hint: start the Docker engine, or use `labctl up --engine vm`" in err, err
    assert "Traceback" not in err
    assert not state.exists() or list(state.iterdir()) == []  # not even its lock
    code, out, err = run_main(monkeypatch, capsys, "status", "--json")
    assert (code, json.loads(out)) == (0, {"labs": []}), (out, err)
