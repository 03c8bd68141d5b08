"""librdmacm's other examples and perftest's atomics: specs, parsers, `run list`.

The outputs under tests/unit/outputs/ named *.rxe.txt / *.siw.txt are the programs' own
output in a two-node rxe lab and a siw-pair lab (qemu TCG, rdma-core 56.1, perftest 25.01).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labctl.cli.app import app
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.runners.examples import (
    ATOMIC_PERFTESTS,
    EXAMPLES,
    TEACHES,
    rcopy_content,
)
from labctl.runners.parsers import (
    parse_cmatose,
    parse_cmtime,
    parse_perftest,
    parse_rcopy,
    parse_rdma_server,
    parse_rstream,
)
from tests.unit.jsonshape import parsed

OUTPUTS = Path(__file__).parent / "outputs"
ROCE = RunContext(Endpoint("node1", "rxe0", "rxe", 1, "10.77.1.1"),
                  Endpoint("node2", "rxe0", "rxe", 1, "10.77.1.2"), {})
IWARP = RunContext(Endpoint("node1", "siw0", "siw", None, "10.77.1.1"),
                   Endpoint("node2", "siw0", "siw", None, "10.77.1.2"), {})


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


# --- parsers on recorded runs --------------------------------------------------------------
@pytest.mark.parametrize("device", ["rxe", "siw"])
@pytest.mark.parametrize("side", ["client", "server"])
def test_rdma_server_end(device: str, side: str) -> None:
    assert parse_rdma_server(output(f"rdma-server.{side}.{device}.txt")) == {"end": 0}


def test_rdma_server_nothing_without_end() -> None:
    assert parse_rdma_server("rdma_client: start\n") == {}


@pytest.mark.parametrize("name", ["udaddy.client.rxe.txt", "udaddy.server.rxe.txt",
                                  "ucmatose.client.rxe.txt", "ucmatose.server.rxe.txt",
                                  "ucmatose.client.siw.txt", "ucmatose.server.siw.txt"])
def test_cmatose_complete(name: str) -> None:
    assert parse_cmatose(output(name)) == {"transfers_complete": True, "return_status": 0}


def test_udaddy_on_siw_says_why() -> None:
    figures = parse_cmatose(output("udaddy.client.siw.txt"))
    assert figures == {"return_status": -1,
                       "error": "unable to create QP: Operation not supported"}
    assert "Operation not supported" in EXAMPLES[("udaddy", "ud")].unsupported_reason


def test_cmtime_first_table() -> None:
    client = parse_cmtime(output("cmtime.client.rxe.txt"))
    assert client == {"connections": 10, "full_connect_us": 87360, "full_connect_max_us": 83416,
                      "cm_connect_us_per_conn": 41383, "create_qp_us_per_conn": 1116,
                      "resolve_addr_us_per_conn": 458, "resolve_route_us_per_conn": 871}
    # the passive side times accept, not connect: its per-connection column is 0
    assert parse_cmtime(output("cmtime.server.rxe.txt"))["cm_connect_us_per_conn"] == 3388
    assert parse_cmtime("Server warmup\n") == {}


@pytest.mark.parametrize("name", ["rstream.client.rxe.txt", "rstream.server.rxe.txt",
                                  "riostream.client.rxe.txt", "riostream.server.rxe.txt",
                                  "riostream.client.siw.txt", "riostream.server.siw.txt",
                                  "rstream.server.siw.txt"])
def test_rstream_row(name: str) -> None:
    figures = parse_rstream(output(name))
    assert (figures["size"], figures["xfers"], figures["total"]) == ("4k", 100, "800k")
    assert figures["usec_per_xfer"] > 0 and figures["seconds"] > 0


def test_rstream_exact_and_hung_client() -> None:
    assert parse_rstream(output("rstream.client.rxe.txt")) == {
        "name": "custom", "size": "4k", "xfers": 100, "iters": 1, "total": "800k",
        "seconds": 0.61, "gbit_per_sec": 0.01, "usec_per_xfer": 3058.07}
    # on siw the client printed the header only, then hung (why rstream is rxe only)
    assert parse_rstream(output("rstream.client.siw.txt")) == {}
    assert not EXAMPLES[("rstream", "rsocket")].supports("siw")


def test_rcopy_both_sides() -> None:
    assert parse_rcopy(output("rcopy.client.rxe.txt")) == {
        "bytes": 65536, "seconds": 0.06, "gbit_per_sec": 0.01, "done": True}
    server = parse_rcopy(output("rcopy.server.siw.txt"))
    assert server == {"done": True, "received_bytes": 65536, "identical": True}
    assert parse_rcopy("labctl: received 12 bytes, different\n")["identical"] is False


@pytest.mark.parametrize("test", ATOMIC_PERFTESTS)
def test_atomic_perftest_rows(test: str) -> None:
    figures = parse_perftest(output(f"perftest-{test}.client.txt"))
    assert figures["test"].startswith("Atomic FETCH_AND_ADD")
    assert figures["bytes"] == 8 and figures["iterations"] == 100
    key = EXAMPLES[("perftest", test)].key_figure
    assert figures[key] > 0


def test_atomic_latency_row_under_a_note() -> None:
    """ib_atomic_lat prints "Correlation coefficient ..." between the header and the row."""
    text = output("perftest-ib_atomic_lat.client.txt")
    assert "Correlation coefficient" in text
    assert parse_perftest(text)["t_typical_usec"] == 1175.70


def test_atomics_refused_on_siw() -> None:
    assert "Couldn't post send" in output("perftest-ib_atomic_lat.client.siw.txt")
    for test in ATOMIC_PERFTESTS:
        spec = EXAMPLES[("perftest", test)]
        assert spec.supports("rxe") and not spec.supports("siw")
        assert "ATOMIC_NONE" in spec.unsupported_reason
        assert "-s" not in spec.server_argv(RunContext(ROCE.server, ROCE.client, {"size": 64}))


# --- argv ----------------------------------------------------------------------------------
def test_librdmacm_argv() -> None:
    assert EXAMPLES[("rdma-server", "rc")].server_argv(IWARP) == ["rdma_server", "-s",
                                                                  "10.77.1.1"]
    assert EXAMPLES[("rdma-server", "rc")].client_argv(
        RunContext(IWARP.server, IWARP.client, {"port": 7000})) == [
        "rdma_client", "-s", "10.77.1.1", "-p", "7000"]
    ucma = RunContext(ROCE.server, ROCE.client, {"connections": 3, "count": 5, "port": 7000})
    assert EXAMPLES[("ucmatose", "rc")].client_argv(ucma) == [
        "ucmatose", "-s", "10.77.1.1", "-C", "5", "-c", "3", "-p", "7000"]
    # udaddy's -p is a port space: a --port never reaches it
    assert "-p" not in EXAMPLES[("udaddy", "ud")].server_argv(ucma)
    assert EXAMPLES[("cmtime", "rc")].server_argv(ROCE) == ["cmtime", "-b", "10.77.1.1",
                                                            "-c", "10"]
    assert EXAMPLES[("riostream", "rsocket")].client_argv(ROCE) == [
        "riostream", "-s", "10.77.1.1", "-S", "4096", "-C", "100"]


def test_rcopy_scripts_compare_the_same_content() -> None:
    ctx = RunContext(ROCE.server, ROCE.client, {"size": 1000})
    spec = EXAMPLES[("rcopy", "rsocket")]
    server, client = spec.server_argv(ctx)[-1], spec.client_argv(ctx)[-1]
    assert rcopy_content(1000) in server and rcopy_content(1000) in client
    assert "10.77.1.1:/tmp/labctl-rcopy.dst" in client


@pytest.mark.parametrize("key", [k for k in EXAMPLES if k[0] not in ("pingpong", "mckey")])
def test_rdma_cm_examples_wait_for_a_listener(key: tuple[str, str]) -> None:
    spec = EXAMPLES[key]
    assert spec.ready_probe is not None
    probe = spec.ready_probe(IWARP)
    assert "cm_id" in probe or "ss -Hltn" in probe


# --- run list ------------------------------------------------------------------------------
def test_every_example_teaches_something() -> None:
    assert {name for name, _ in EXAMPLES} == set(TEACHES)
    assert all(TEACHES.values())


def test_run_list_json() -> None:
    result = CliRunner().invoke(app, ["run", "list", "--json"])
    assert result.exit_code == 0, result.output
    records = parsed("run-list", result.output).examples
    rows = {row["example"]: row for row in records}
    assert rows["rdma-server"]["devices"] == {"rxe": ["rc"], "siw": ["rc"]}
    assert rows["udaddy"]["devices"] == {"rxe": ["ud"], "siw": []}
    assert "ib_atomic_bw" not in rows["perftest"]["devices"]["siw"]
    assert rows["rcopy"]["teaches"] == TEACHES["rcopy"]
    # every `labctl run` subcommand, derived from the registered ones so none can drift
    run_group = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    assert list(rows) == [n for n in run_group.commands if n != "list"]
    assert {"ucx", "ucx-info", "mpi", "rdma-core-tests", "all", "custom"} <= rows.keys()
    assert rows["ucx"]["devices"] is None and rows["ucx"]["teaches"]
    assert all(row["teaches"] for row in rows.values())


def test_run_list_table() -> None:
    result = CliRunner().invoke(app, ["run", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in [*TEACHES, "ucx-info", "rdma-core-tests"]:
        assert f" {name} " in result.output


@pytest.mark.parametrize(("key", "figures", "text"), [
    ("end", {"end": 0}, "end 0"),
    ("return_status", {"return_status": 0}, "return status 0"),
    ("cm_connect_us_per_conn", {"cm_connect_us_per_conn": 41383}, "41383 us/conn to connect"),
    ("usec_per_xfer", {"usec_per_xfer": 972.74}, "972.74 usec/xfer"),
    ("bytes", {"bytes": 65536}, "65536 bytes copied"),
])
def test_summary_key_figures(key: str, figures: dict[str, float], text: str) -> None:
    from labctl.cli.run import key_figure_text
    from labctl.runners.execute import RunResult

    result = RunResult("x", "y", "node1", "node2", "passed", figures=figures, key_figure=key)
    assert key_figure_text(result) == text


def test_run_dash_dash_list_is_run_list() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["run", "--list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert listed.output == runner.invoke(app, ["run", "list"], env={"COLUMNS": "200"}).output
    bare = runner.invoke(app, ["run"])
    assert bare.exit_code == 2 and "Usage" in bare.output
