"""The inspector's formatters against recorded devices and the C tools' recorded output.

Golden cases: `verbs_records/<name>.json` is a `python3 -m labctl.verbs capture` of a lab
node; `verbs_records/<name>/cases.json` lists the C tools run on the same node at the same
time ({"case": {"tool": "devinfo", "args": [...], "rc": N}}), with their stdout in
`verbs_records/<name>/<case>.out`. Our formatter must reproduce each byte for byte.
The other tests build records by hand to pin down the corner cases of devinfo.c.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from labctl.verbs import asyncwatch, devices, devinfo
from labctl.verbs._getopt import LongOpt, c_int, getopt_long, strtol
from labctl.verbs.records import DeviceAttr, DeviceRecord, Gid, PortAttr, PortRecord, Snapshot

RECORDS = Path(__file__).parent / "verbs_records"


def _golden_cases() -> list[tuple[str, str]]:
    cases = []
    for record in sorted(RECORDS.glob("*.json")):
        spec = RECORDS / record.stem / "cases.json"
        if spec.exists():
            cases += [(record.stem, case) for case in json.loads(spec.read_text())]
    return cases


def _run_devinfo(snap: Snapshot, args: list[str]) -> tuple[str, str, int]:
    out, err = io.StringIO(), io.StringIO()

    def source(*_a: object, **_k: object) -> Snapshot:
        return snap

    rc = devinfo.main(["ibv_devinfo", *args], source=source, out=out, err=err)
    return out.getvalue(), err.getvalue(), rc


@pytest.mark.parametrize(("record", "case"), _golden_cases())
def test_golden(record: str, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    snap = Snapshot.from_json((RECORDS / f"{record}.json").read_text())
    spec = json.loads((RECORDS / record / "cases.json").read_text())[case]
    expected = (RECORDS / record / f"{case}.out").read_text()
    if spec["tool"] == "devices":
        rc = devices.main(["ibv_devices", *spec["args"]], snap=snap)
        got = capsys.readouterr().out
    else:
        got, _, rc = _run_devinfo(snap, spec["args"])
    assert got == expected
    assert rc == spec["rc"]


def test_golden_records_present() -> None:
    """At least one live capture is checked in (see docs/inspector.md to refresh it)."""
    assert _golden_cases(), "no recorded node under tests/unit/verbs_records"


def test_records_round_trip() -> None:
    snap = _rxe_snapshot()
    again = Snapshot.from_json(snap.to_json())
    assert again == snap


# --------------------------------------------------------------------- synthetic
def _rxe_snapshot(**port_kw: object) -> Snapshot:
    attr = DeviceAttr(
        fw_ver="0.0.0",
        node_guid=0x505400FFFE123456,
        sys_image_guid=0x505400FFFE123456,
        max_mr_size=0xFFFFFFFFFFFFFFFF,
        page_size_cap=0xFFFFF000,
        vendor_id=0xFFFFFF,
        max_qp=1048560,
        max_qp_wr=1048576,
        device_cap_flags=0x21257426,
        max_sge=32,
        max_srq=917504,
        max_srq_wr=1048576,
        max_srq_sge=27,
        max_pkeys=64,
        local_ca_ack_delay=15,
        phys_port_cnt=1,
        atomic_cap=1,
        device_cap_flags_ex=0x21257426,
        hca_core_clock=0,
    )
    gids = [
        Gid(index=0, raw="fe80000000000000505400fffe123456", type=0),
        Gid(index=1, raw="00000000000000000000ffff0a4d0101", type=1),
    ]
    port = PortRecord(
        port_num=1,
        attr=PortAttr(
            **{
                "state": 4,
                "max_mtu": 5,
                "active_mtu": 3,
                "gid_tbl_len": 1024,
                "port_cap_flags": 0x00890000,
                "max_msg_sz": 0x800000,
                "pkey_tbl_len": 1,
                "max_vl_num": 1,
                "active_width": 2,
                "active_speed": 1,
                "phys_state": 5,
                "link_layer": 2,
                **port_kw,
            }
        ),
        gids=gids,
    )
    dev = DeviceRecord(
        name="rxe0",
        node_guid=0x505400FFFE123456,
        node_type=1,
        transport_type=0,
        opened=True,
        probed=True,
        attr=attr,
        num_comp_vectors=1,
        ports=[port],
    )
    return Snapshot(devices=[dev])


BRIEF = (
    "hca_id:\trxe0\n"
    "\ttransport:\t\t\tInfiniBand (0)\n"
    "\tfw_ver:\t\t\t\t0.0.0\n"
    "\tnode_guid:\t\t\t5054:00ff:fe12:3456\n"
    "\tsys_image_guid:\t\t\t5054:00ff:fe12:3456\n"
    "\tvendor_id:\t\t\t0xffffff\n"
    "\tvendor_part_id:\t\t\t0\n"
    "\thw_ver:\t\t\t\t0x0\n"
    "\tphys_port_cnt:\t\t\t1\n"
    "\t\tport:\t1\n"
    "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
    "\t\t\tmax_mtu:\t\t4096 (5)\n"
    "\t\t\tactive_mtu:\t\t1024 (3)\n"
    "\t\t\tsm_lid:\t\t\t0\n"
    "\t\t\tport_lid:\t\t0\n"
    "\t\t\tport_lmc:\t\t0x00\n"
    "\t\t\tlink_layer:\t\tEthernet\n"
    "\n"
)


def test_default_output() -> None:
    assert _run_devinfo(_rxe_snapshot(), []) == (BRIEF, "", 0)


def test_verbose_port_and_gids() -> None:
    out, _, rc = _run_devinfo(_rxe_snapshot(), ["-v"])
    assert rc == 0
    assert "\tdevice_cap_flags:\t\t0x21257426\n\t\t\t\t\tBAD_PKEY_CNTR\n" in out
    assert "\tmax_srq_wr:\t\t\t1048576\n\tmax_srq_sge:\t\t\t27\n" in out
    assert "\tmax_map_per_fmr" not in out  # max_fmr == 0
    assert "\tcompletion_timestamp_mask not supported\n\tcore clock not supported\n" in out
    assert "\tdevice_cap_flags_ex:\t\t0x21257426\n\ttso_caps:\n\t\tmax_tso:\t\t\t0\n" in out
    assert "\t\t\tactive_width:\t\t4X (2)\n\t\t\tactive_speed:\t\t2.5 Gbps (1)\n" in out
    assert "\t\t\tphys_state:\t\tLINK_UP (5)\n" in out
    assert out.endswith(
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fe12:3456, RoCE v1\n"
        "\t\t\tGID[  1]:\t\t::ffff:10.77.1.1, RoCE v2\n"
        "\n"
    )
    assert "\tnum_comp_vectors:\t\t1\n\t\tport:\t1\n" in out


def test_unknown_flags_and_bad_enums() -> None:
    snap = _rxe_snapshot(state=9, active_speed_ex=512, max_vl_num=0, active_width=3)
    assert snap.devices[0].attr is not None
    snap.devices[0].attr.device_cap_flags = (1 << 15) | 1
    snap.devices[0].attr.device_cap_flags_ex = (1 << 34) | (1 << 40) | 1
    snap.devices[0].attr.odp_general_caps = 1 | (1 << 60)
    out, _, _ = _run_devinfo(snap, ["-v"])
    assert "\t\t\t\t\tRESIZE_MAX_WR\n\t\t\t\t\tUnknown flags: 0x8000\n" in out
    assert "\t\t\t\t\tRAW_SCATTER_FCS\n\t\t\t\t\tUnknown flags: 0x10000000000\n" in out
    assert "\t\t\t\t\tODP_SUPPORT\n\t\t\t\t\tUnknown flags: 0x1000000000000000\n" in out
    assert "\t\t\tstate:\t\t\tinvalid state (9)\n" in out
    assert "\t\t\tactive_speed:\t\tinvalid speed (512)\n" in out
    assert "\t\t\tmax_vl_num:\t\tinvalid value (0)\n" in out
    assert "\t\t\tactive_width:\t\tinvalid widthX (3)\n" in out


def test_gid_type_query_failure_hides_gid() -> None:
    snap = _rxe_snapshot()
    gids = snap.devices[0].ports[0].gids
    assert gids is not None
    gids[1].type = 2
    out, _, _ = _run_devinfo(snap, ["-v"])
    assert "GID[  1]" not in out


def test_iwarp_has_no_phys_state_and_ib_link_has_no_gid_suffix() -> None:
    snap = _rxe_snapshot(link_layer=1)
    snap.devices[0].transport_type = 1
    out, _, _ = _run_devinfo(snap, ["-v"])
    assert "phys_state" not in out
    assert "\ttransport:\t\t\tiWARP (1)\n" in out
    assert "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fe12:3456\n" in out


def test_devices_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert devices.main(["ibv_devices", "ignored"], snap=_rxe_snapshot()) == 0
    assert capsys.readouterr().out == (
        "    device          \t   node GUID\n"
        "    ------          \t----------------\n"
        "    rxe0            \t505400fffe123456\n"
    )
    assert devices.main(["ibv_devices"], snap=Snapshot(list_errno=38)) == 1
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("args", "rc", "starts"),
    [
        (["-l"], 0, "1 HCA found:\n\trxe0\n\n"),
        (["-l", "-x"], 0, "1 HCA found:\n"),  # -l acts before -x is seen
        (["-x", "-l"], 255, "Usage: ibv_devinfo "),
        (["-i", "0"], 1, "Usage: ibv_devinfo "),
        (["-i", "abc"], 1, "Usage: "),
        (["-i", "-3"], 1, "Usage: "),
        (["-i", "99999999999999999999"], 1, "Usage: "),  # LONG_MAX -> int -1
        (["-i", "2"], 4, ""),
        (["-i", "0x1"], 0, "hca_id:\trxe0\n"),
        (["-i", "257"], 0, "hca_id:\trxe0\n"),  # uint8_t port 1
        (["-i", "256"], 0, "hca_id:\trxe0\n"),  # uint8_t port 0 = all ports
        (["-i", "4294967297"], 0, "hca_id:\trxe0\n"),  # int 1
        (["-d", "nope"], 255, ""),
        (["-drxe0"], 0, "hca_id:\trxe0\n"),
        (["--ib-dev=rxe0", "--ib-port", "1"], 0, "hca_id:\trxe0\n"),
        (["--ib-d=rxe0"], 0, "hca_id:\trxe0\n"),
        (["--ib=rxe0"], 255, "Usage: "),  # ambiguous
        (["--list=x"], 255, "Usage: "),
        (["--li"], 0, "1 HCA found:\n"),
        (["--help"], 255, "Usage: "),
        (["-h"], 255, "Usage: "),
        (["-d"], 255, "Usage: "),
        (["--", "-x"], 0, "hca_id:\trxe0\n"),
        (["stray", "-v"], 0, "hca_id:\trxe0\n"),
        (["-vl"], 0, "1 HCA found:\n"),
    ],
)
def test_option_parsing(args: list[str], rc: int, starts: str) -> None:
    out, _, got_rc = _run_devinfo(_rxe_snapshot(), args)
    assert got_rc == rc
    assert out.startswith(starts)
    if not starts:
        assert out == ""


def test_no_devices_and_list_failure() -> None:
    assert _run_devinfo(Snapshot(), []) == ("", "No IB devices found\n", 255)
    assert _run_devinfo(Snapshot(), ["-l"])[0] == "0 HCAs found:\n\n"
    out, err, rc = _run_devinfo(Snapshot(list_errno=38), [])
    assert (out, rc) == ("", 255)
    assert err.startswith("Failed to get IB devices list: ")


def test_device_errors_or_into_exit_code() -> None:
    snap = _rxe_snapshot()
    broken = DeviceRecord(name="rxe1", probed=True, opened=True, attr=None)
    snap.devices.append(broken)
    out, err, rc = _run_devinfo(snap, [])
    assert rc == 2
    assert out == BRIEF
    assert err == "Failed to query device props\n"
    snap.devices[1] = DeviceRecord(name="rxe1", probed=True, opened=False)
    assert _run_devinfo(snap, [])[2] == 1
    snap.devices[0].ports[0] = PortRecord(port_num=1, attr=None, query_rc=22)
    out, err, rc = _run_devinfo(snap, ["-d", "rxe0"])
    assert rc == 22
    assert "\t\tport:" not in out
    assert err == "Failed to query port 1 props\n"


def test_gid_query_failure_stops_port() -> None:
    snap = _rxe_snapshot()
    port = snap.devices[0].ports[0]
    port.gids = port.gids[:1] if port.gids else []
    port.gid_error_index = 1
    port.gid_error_rc = -1
    out, err, rc = _run_devinfo(snap, ["-v"])
    assert rc == 255
    assert out.endswith("RoCE v1\n")
    assert err == "Failed to query gid to port 1, index 1\n"


def test_getopt_and_strtol() -> None:
    assert strtol("  +0x1fz") == 31
    assert strtol("010") == 8
    assert strtol("0x") == 0
    assert strtol("-5") == -5
    assert c_int(strtol("4294967295")) == -1
    err = io.StringIO()
    opts = (LongOpt("ib-dev", True, "d"), LongOpt("help", False, "h"))
    got = list(getopt_long(["p", "-h", "x", "--ib", "v", "-dq"], "d:h", opts, err, "p"))
    assert got == [("h", None), ("d", "v"), ("d", "q")]
    got = list(getopt_long(["p", "-z", "--nope"], "d:h", opts, err, "p"))
    assert got == [("?", None), ("?", None)]
    assert err.getvalue() == "p: invalid option -- 'z'\np: unrecognized option '--nope'\n"


def test_asyncwatch_lines() -> None:
    assert asyncwatch.event_line(10, 1) == "  event_type IBV_EVENT_PORT_ERR (10), port 1\n"
    assert asyncwatch.event_line(9, 1) == "  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n"
    assert asyncwatch.event_line(18, 1) == "  event_type IBV_EVENT_GID_CHANGE (18), port 1\n"
    assert asyncwatch.event_line(3, 0) == "  event_type unexpected (3), port 0\n"


def test_asyncwatch_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert asyncwatch.main(["ibv_asyncwatch", "-h"]) == 0
    assert capsys.readouterr().out.startswith("Usage:\n  ibv_asyncwatch            start")
    assert asyncwatch.main(["ibv_asyncwatch", "-q"]) == 1
    assert capsys.readouterr().out.startswith("Usage:\n")


def test_node_package_imports_only_stdlib() -> None:
    """The node side must not pull in typer/rich/pydantic/yaml (absent from nodes)."""
    import subprocess
    import sys

    code = (
        "import sys, labctl.verbs.__main__, labctl.verbs.devinfo, labctl.verbs.devices, "
        "labctl.verbs.asyncwatch, labctl.verbs._libibverbs;"
        "bad = [m for m in ('typer','rich','pydantic','yaml','pyverbs') if m in sys.modules];"
        "print(','.join(bad))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert proc.stdout.strip() == ""
