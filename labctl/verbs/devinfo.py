"""`ibv_devinfo` of rdma-core 56.1, reimplemented: same stdout, same exit code.

Two halves: `capture()` reads the node's devices into a `Snapshot` (pyverbs for what it
binds, the ctypes shim for the rest), and `render()` turns a snapshot plus the options
into (stdout, stderr, exit code) without touching any device. `main()` glues them with
the C tool's option handling.
"""

from __future__ import annotations

import io
import os
import sys

from labctl.verbs import tables as T
from labctl.verbs._getopt import LongOpt, c_int, getopt_long, strtol
from labctl.verbs.records import DeviceAttr, DeviceRecord, Gid, PortAttr, PortRecord, Snapshot

TYPE_CHECKING = False  # no `typing` import at run time (startup cost under TCG)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

PROG = "ibv_devinfo"
LONGOPTS = (
    LongOpt("ib-dev", True, "d"),
    LongOpt("ib-port", True, "i"),
    LongOpt("list", False, "l"),
    LongOpt("verbose", False, "v"),
    LongOpt("json", False, "json"),  # ours
)

RC_OPEN = 1
RC_QUERY = 2
RC_CLOSE = 3
RC_BAD_PORT = 4


class Output:
    """What one devinfo run prints, and main()'s return value (may be negative)."""

    __slots__ = ("rc", "stderr", "stdout")

    def __init__(self, stdout: str, stderr: str, rc: int) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.rc = rc

    @property
    def exit_status(self) -> int:
        return self.rc & 0xFF


def usage(argv0: str = PROG) -> str:
    return (
        f"Usage: {argv0}             print the ca attributes\n"
        "\n"
        "Options:\n"
        "  -d, --ib-dev=<dev>     use IB device <dev> (default all devices)\n"
        "  -i, --ib-port=<port>   use port <port> of IB device (default all ports)\n"
        "  -l, --list             print only the IB devices names\n"
        "  -v, --verbose          print all the attributes of the IB device(s)\n"
    )


# --------------------------------------------------------------------------- render
def _s32(v: int) -> int:
    return c_int(v)


def _guid(v: int) -> str:
    return ":".join(f"{(v >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))


def _flags(out: io.StringIO, value: int, table: tuple[tuple[int, str], ...], mask: int) -> None:
    known = 0
    for bit, name in table:
        known |= bit
        if value & bit:
            out.write(f"\t\t\t\t\t{name}\n")
    unknown = value & ~known & mask
    if unknown:
        out.write(f"\t\t\t\t\tUnknown flags: 0x{unknown:X}\n")


def _odp_transport(out: io.StringIO, value: int) -> None:
    if not value:
        out.write("\t\t\t\t\tNO SUPPORT\n")
    else:
        _flags(out, value, T.ODP_TRANSPORT, 0xFFFFFFFF)


def _qpts(out: io.StringIO, qpts: int) -> None:
    out.write("\t\tsupported_qp:\n")
    _flags(out, qpts, T.SUPPORTED_QPTS, 0xFFFFFFFF)


def _render_verbose_device(out: io.StringIO, a: DeviceAttr, num_comp_vectors: int) -> None:
    w = out.write
    w(f"\tmax_mr_size:\t\t\t0x{a.max_mr_size:x}\n")
    w(f"\tpage_size_cap:\t\t\t0x{a.page_size_cap:x}\n")
    w(f"\tmax_qp:\t\t\t\t{a.max_qp}\n")
    w(f"\tmax_qp_wr:\t\t\t{a.max_qp_wr}\n")
    w(f"\tdevice_cap_flags:\t\t0x{a.device_cap_flags:08x}\n")
    _flags(out, a.device_cap_flags, T.DEVICE_CAP_FLAGS, 0xFFFFFFFF)
    w(f"\tmax_sge:\t\t\t{a.max_sge}\n")
    w(f"\tmax_sge_rd:\t\t\t{a.max_sge_rd}\n")
    w(f"\tmax_cq:\t\t\t\t{a.max_cq}\n")
    w(f"\tmax_cqe:\t\t\t{a.max_cqe}\n")
    w(f"\tmax_mr:\t\t\t\t{a.max_mr}\n")
    w(f"\tmax_pd:\t\t\t\t{a.max_pd}\n")
    w(f"\tmax_qp_rd_atom:\t\t\t{a.max_qp_rd_atom}\n")
    w(f"\tmax_ee_rd_atom:\t\t\t{a.max_ee_rd_atom}\n")
    w(f"\tmax_res_rd_atom:\t\t{a.max_res_rd_atom}\n")
    w(f"\tmax_qp_init_rd_atom:\t\t{a.max_qp_init_rd_atom}\n")
    w(f"\tmax_ee_init_rd_atom:\t\t{a.max_ee_init_rd_atom}\n")
    atomic = T.lookup(T.ATOMIC_CAP, a.atomic_cap, T.ATOMIC_CAP_UNKNOWN)
    w(f"\tatomic_cap:\t\t\t{atomic} ({a.atomic_cap})\n")
    w(f"\tmax_ee:\t\t\t\t{a.max_ee}\n")
    w(f"\tmax_rdd:\t\t\t{a.max_rdd}\n")
    w(f"\tmax_mw:\t\t\t\t{a.max_mw}\n")
    w(f"\tmax_raw_ipv6_qp:\t\t{a.max_raw_ipv6_qp}\n")
    w(f"\tmax_raw_ethy_qp:\t\t{a.max_raw_ethy_qp}\n")
    w(f"\tmax_mcast_grp:\t\t\t{a.max_mcast_grp}\n")
    w(f"\tmax_mcast_qp_attach:\t\t{a.max_mcast_qp_attach}\n")
    w(f"\tmax_total_mcast_qp_attach:\t{a.max_total_mcast_qp_attach}\n")
    w(f"\tmax_ah:\t\t\t\t{a.max_ah}\n")
    w(f"\tmax_fmr:\t\t\t{a.max_fmr}\n")
    if a.max_fmr:
        w(f"\tmax_map_per_fmr:\t\t{a.max_map_per_fmr}\n")
    w(f"\tmax_srq:\t\t\t{a.max_srq}\n")
    if a.max_srq:
        w(f"\tmax_srq_wr:\t\t\t{a.max_srq_wr}\n")
        w(f"\tmax_srq_sge:\t\t\t{a.max_srq_sge}\n")
    w(f"\tmax_pkeys:\t\t\t{a.max_pkeys}\n")
    w(f"\tlocal_ca_ack_delay:\t\t{a.local_ca_ack_delay}\n")

    w("\tgeneral_odp_caps:\n")
    _flags(out, a.odp_general_caps, T.ODP_GENERAL, (1 << 64) - 1)
    w("\trc_odp_caps:\n")
    _odp_transport(out, a.odp_rc_caps)
    w("\tuc_odp_caps:\n")
    _odp_transport(out, a.odp_uc_caps)
    w("\tud_odp_caps:\n")
    _odp_transport(out, a.odp_ud_caps)
    w("\txrc_odp_caps:\n")
    _odp_transport(out, a.odp_xrc_caps)

    if a.completion_timestamp_mask:
        w(f"\tcompletion timestamp_mask:\t\t\t0x{a.completion_timestamp_mask:016x}\n")
    else:
        w("\tcompletion_timestamp_mask not supported\n")
    if a.hca_core_clock:
        w(f"\thca_core_clock:\t\t\t{a.hca_core_clock}kHZ\n")
    else:
        w("\tcore clock not supported\n")

    if a.raw_packet_caps:
        w("\traw packet caps:\n")
        for bit, name in T.RAW_PACKET_CAPS:
            if a.raw_packet_caps & bit:
                w(f"\t\t\t\t\t{name}\n")

    w(f"\tdevice_cap_flags_ex:\t\t0x{a.device_cap_flags_ex:X}\n")
    _flags(out, a.device_cap_flags_ex & 0xFFFFFFFF00000000, T.DEVICE_CAP_FLAGS_EX, (1 << 64) - 1)

    w("\ttso_caps:\n")
    w(f"\t\tmax_tso:\t\t\t{_s32(a.tso_max_tso)}\n")
    if a.tso_max_tso:
        _qpts(out, a.tso_supported_qpts)

    w("\trss_caps:\n")
    w(f"\t\tmax_rwq_indirection_tables:\t\t\t{a.rss_max_rwq_indirection_tables}\n")
    w(f"\t\tmax_rwq_indirection_table_size:\t\t\t{a.rss_max_rwq_indirection_table_size}\n")
    w(f"\t\trx_hash_function:\t\t\t\t0x{a.rss_rx_hash_function:x}\n")
    w(f"\t\trx_hash_fields_mask:\t\t\t\t0x{a.rss_rx_hash_fields_mask:X}\n")
    if a.rss_supported_qpts:
        _qpts(out, a.rss_supported_qpts)

    w(f"\tmax_wq_type_rq:\t\t\t{a.max_wq_type_rq}\n")

    w("\tpacket_pacing_caps:\n")
    w(f"\t\tqp_rate_limit_min:\t{a.pp_qp_rate_limit_min}kbps\n")
    w(f"\t\tqp_rate_limit_max:\t{a.pp_qp_rate_limit_max}kbps\n")
    if a.pp_qp_rate_limit_max:
        _qpts(out, a.pp_supported_qpts)

    if a.tm_max_num_tags:
        w(f"\tmax_rndv_hdr_size:\t\t{a.tm_max_rndv_hdr_size}\n")
        w(f"\tmax_num_tags:\t\t\t{a.tm_max_num_tags}\n")
        w(f"\tmax_ops:\t\t\t{a.tm_max_ops}\n")
        w(f"\tmax_sge:\t\t\t{a.tm_max_sge}\n")
        w("\tflags:\n")
        if a.tm_flags & T.TM_CAP_RC:
            w("\t\t\t\t\tIBV_TM_CAP_RC\n")
    else:
        w("\ttag matching not supported\n")

    if a.cq_mod_max_cq_count and a.cq_mod_max_cq_period:
        w("\n\tcq moderation caps:\n")
        w(f"\t\tmax_cq_count:\t{a.cq_mod_max_cq_count}\n")
        w(f"\t\tmax_cq_period:\t{a.cq_mod_max_cq_period} us\n\n")

    if a.max_dm_size:
        w(f"\tmaximum available device memory:\t{a.max_dm_size}Bytes\n\n")

    w(f"\tnum_comp_vectors:\t\t{num_comp_vectors}\n")


def format_gid(gid: Gid, link_layer: int) -> str:
    """One GID line as devinfo prints it ("" for a GID whose type query failed)."""
    raw = gid.raw_bytes
    suffix = ""
    if link_layer == T.LINK_LAYER_ETHERNET:
        suffix = ", " + T.lookup(T.GID_TYPE, gid.type, T.GID_TYPE_UNKNOWN)
    if gid.type == T.GID_TYPE_ROCE_V1:
        text = ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))
        return f"\t\t\tGID[{gid.index:3d}]:\t\t{text}{suffix}\n"
    if gid.type == T.GID_TYPE_ROCE_V2:
        # libc's inet_ntop, as C's devinfo: ipaddress would write ::ffff:a.b.c.d differently.
        # _socket, not socket: the latter's enum classes cost ~0.2 s of import under TCG.
        import _socket

        text = _socket.inet_ntop(_socket.AF_INET6, raw)
        return f"\t\t\tGID[{gid.index:3d}]:\t\t{text}{suffix}\n"
    return ""


def _render_port(
    out: io.StringIO, err: io.StringIO, dev: DeviceRecord, port: PortRecord, verbose: bool
) -> int:
    if port.attr is None:
        err.write(f"Failed to query port {port.port_num} props\n")
        return port.query_rc or -1
    p: PortAttr = port.attr
    w = out.write
    w(f"\t\tport:\t{port.port_num}\n")
    w(f"\t\t\tstate:\t\t\t{T.lookup(T.PORT_STATE, p.state, T.PORT_STATE_UNKNOWN)} ({p.state})\n")
    w(f"\t\t\tmax_mtu:\t\t{T.lookup(T.MTU, p.max_mtu, T.MTU_UNKNOWN)} ({p.max_mtu})\n")
    w(f"\t\t\tactive_mtu:\t\t{T.lookup(T.MTU, p.active_mtu, T.MTU_UNKNOWN)} ({p.active_mtu})\n")
    w(f"\t\t\tsm_lid:\t\t\t{p.sm_lid}\n")
    w(f"\t\t\tport_lid:\t\t{p.lid}\n")
    w(f"\t\t\tport_lmc:\t\t0x{p.lmc:02x}\n")
    w(f"\t\t\tlink_layer:\t\t{T.lookup(T.LINK_LAYER, p.link_layer, T.LINK_LAYER_UNKNOWN)}\n")
    if verbose:
        w(f"\t\t\tmax_msg_sz:\t\t0x{p.max_msg_sz:x}\n")
        w(f"\t\t\tport_cap_flags:\t\t0x{p.port_cap_flags:08x}\n")
        w(f"\t\t\tport_cap_flags2:\t0x{p.port_cap_flags2:04x}\n")
        w(f"\t\t\tmax_vl_num:\t\t{T.lookup(T.VL, p.max_vl_num, T.VL_UNKNOWN)} ({p.max_vl_num})\n")
        w(f"\t\t\tbad_pkey_cntr:\t\t0x{p.bad_pkey_cntr:x}\n")
        w(f"\t\t\tqkey_viol_cntr:\t\t0x{p.qkey_viol_cntr:x}\n")
        w(f"\t\t\tsm_sl:\t\t\t{p.sm_sl}\n")
        w(f"\t\t\tpkey_tbl_len:\t\t{p.pkey_tbl_len}\n")
        w(f"\t\t\tgid_tbl_len:\t\t{p.gid_tbl_len}\n")
        w(f"\t\t\tsubnet_timeout:\t\t{p.subnet_timeout}\n")
        w(f"\t\t\tinit_type_reply:\t{p.init_type_reply}\n")
        width = T.lookup(T.WIDTH, p.active_width, T.WIDTH_UNKNOWN)
        w(f"\t\t\tactive_width:\t\t{width}X ({p.active_width})\n")
        speed = p.active_speed_ex if p.active_speed_ex else p.active_speed
        w(f"\t\t\tactive_speed:\t\t{T.lookup(T.SPEED, speed, T.SPEED_UNKNOWN)} ({_s32(speed)})\n")
        if dev.transport_type == T.TRANSPORT_IB:
            phys = T.lookup(T.PHYS_STATE, p.phys_state, T.PHYS_STATE_UNKNOWN)
            w(f"\t\t\tphys_state:\t\t{phys} ({p.phys_state})\n")
        if port.gids is None:
            raise ValueError(f"record of {dev.name} port {port.port_num} has no GID table")
        for gid in port.gids:
            w(format_gid(gid, p.link_layer))
        if port.gid_error_index is not None:
            err.write(
                f"Failed to query gid to port {port.port_num}, index {port.gid_error_index}\n"
            )
            return port.gid_error_rc or -1
    w("\n")
    return 0


def render_device(dev: DeviceRecord, ib_port: int, verbose: bool) -> Output:
    """print_hca_cap(): ib_port is devinfo's uint8_t port (0 = all ports)."""
    out = io.StringIO()
    err = io.StringIO()
    if not dev.probed:
        raise ValueError(f"record of {dev.name} has no attributes (device not probed)")
    if not dev.opened:
        err.write("Failed to open device\n")
        return Output("", err.getvalue(), RC_OPEN)
    rc = 0
    a = dev.attr
    if a is None:
        err.write("Failed to query device props\n")
        rc = RC_QUERY
    elif ib_port and ib_port > a.phys_port_cnt:
        err.write("Invalid port requested for device\n")
        rc = RC_BAD_PORT
    else:
        w = out.write
        w(f"hca_id:\t{dev.name}\n")
        transport = T.lookup(T.TRANSPORT, dev.transport_type, T.TRANSPORT_UNKNOWN)
        w(f"\ttransport:\t\t\t{transport} ({dev.transport_type})\n")
        if a.fw_ver:
            w(f"\tfw_ver:\t\t\t\t{a.fw_ver}\n")
        w(f"\tnode_guid:\t\t\t{_guid(a.node_guid)}\n")
        w(f"\tsys_image_guid:\t\t\t{_guid(a.sys_image_guid)}\n")
        w(f"\tvendor_id:\t\t\t0x{a.vendor_id:04x}\n")
        w(f"\tvendor_part_id:\t\t\t{_s32(a.vendor_part_id)}\n")
        w(f"\thw_ver:\t\t\t\t0x{a.hw_ver:X}\n")
        if dev.board_id:
            w(f"\tboard_id:\t\t\t{dev.board_id}\n")
        w(f"\tphys_port_cnt:\t\t\t{a.phys_port_cnt}\n")
        if verbose:
            _render_verbose_device(out, a, dev.num_comp_vectors)
        ports = {p.port_num: p for p in dev.ports}
        for num in range(1, a.phys_port_cnt + 1):
            if ib_port and num != ib_port:
                continue
            port = ports.get(num)
            if port is None:
                raise ValueError(f"record of {dev.name} lacks port {num}")
            rc = _render_port(out, err, dev, port, verbose)
            if rc:
                break
    if dev.close_rc:
        err.write("Failed to close device")
        rc = RC_CLOSE
    return Output(out.getvalue(), err.getvalue(), rc)


def render(snap: Snapshot, ib_devname: str | None, ib_port: int, verbose: bool) -> Output:
    """devinfo's main() after option parsing; ib_port as parsed (an int > 0, or 0)."""
    port8 = ib_port & 0xFF  # print_hca_cap() takes a uint8_t
    if snap.list_errno is not None:
        return Output("", f"Failed to get IB devices list: {os.strerror(snap.list_errno)}\n", -1)
    if ib_devname is not None:
        dev = snap.device(ib_devname)
        if dev is None:
            return Output("", f"IB device '{ib_devname}' wasn't found\n", -1)
        return render_device(dev, port8, verbose)
    if not snap.devices:
        return Output("", "No IB devices found\n", -1)
    parts = [render_device(dev, port8, verbose) for dev in snap.devices]
    rc = 0
    for part in parts:
        rc |= part.rc
    return Output("".join(p.stdout for p in parts), "".join(p.stderr for p in parts), rc)


def render_list(snap: Snapshot) -> Output:
    """devinfo -l."""
    if snap.list_errno is not None:
        return Output("", f"Failed to get IB devices list: {os.strerror(snap.list_errno)}\n", -1)
    n = len(snap.devices)
    lines = [f"{n} HCA{'s' if n != 1 else ''} found:\n"]
    lines += [f"\t{d.name}\n" for d in snap.devices]
    lines.append("\n")
    return Output("".join(lines), "", 0)


# -------------------------------------------------------------------------- capture
def capture(
    ib_devname: str | None = None, ib_port: int = 0, verbose: bool = True, probe: bool = True
) -> Snapshot:
    """Read the devices (all, or the one named) into a Snapshot, the way devinfo walks them.

    ib_port (uint8, 0 = all) and verbose limit what is read, like the C tool: a port that
    is not printed is not queried, GIDs are read only for -v.
    """
    from labctl.verbs import _libibverbs as lv

    snap = Snapshot(meta=_meta())
    try:
        dl = lv.DeviceList().__enter__()
    except lv.VerbsError as exc:
        snap.list_errno = exc.errno or 0
        return snap
    try:
        for ptr in dl.pointers:
            info = dl.info(ptr)
            dev = DeviceRecord(
                name=info.name,
                node_guid=info.guid,
                node_type=info.node_type,
                transport_type=info.transport_type,
            )
            snap.devices.append(dev)
            if probe and (ib_devname is None or ib_devname == info.name):
                _probe(dev, ptr, info.ibdev_path, ib_port & 0xFF, verbose)
                if ib_devname is not None:
                    break
    finally:
        dl.__exit__()
    return snap


def _meta() -> dict[str, Any]:
    uname = os.uname()
    return {"host": uname.nodename, "kernel": uname.release, "python": sys.version.split()[0]}


def read_sysfs(path: str, name: str) -> str | None:
    """ibv_read_sysfs_file(): contents without the trailing newline, None if absent/empty."""
    try:
        with open(os.path.join(path, name), "rb") as f:
            data = f.read(255)
    except OSError:
        return None
    if data.endswith(b"\n"):
        data = data[:-1]
    return data.decode(errors="surrogateescape") or None


def _probe(dev: DeviceRecord, ptr: Any, ibdev_path: str, ib_port: int, verbose: bool) -> None:
    from pyverbs.device import Context
    from pyverbs.pyverbs_error import PyverbsError

    from labctl.verbs import _libibverbs as lv

    dev.probed = True
    try:
        ctx = Context(name=dev.name)
    except PyverbsError:
        return
    dev.opened = True
    try:
        try:
            ex = ctx.query_device_ex()
        except PyverbsError:
            return
        attr = _device_attr(ex)
        # pyverbs' DeviceAttr lacks max_total_mcast_qp_attach: ask libibverbs directly.
        try:
            with lv.Context(ptr) as shim_ctx:
                attr.max_total_mcast_qp_attach = shim_ctx.query_device().max_total_mcast_qp_attach
        except lv.VerbsError:
            pass
        dev.attr = attr
        dev.num_comp_vectors = ctx.num_comp_vectors
        dev.board_id = read_sysfs(ibdev_path, "board_id")
        if ib_port and ib_port > attr.phys_port_cnt:
            return
        table = _GidTable(ctx, attr.phys_port_cnt, dev.transport_type)
        for num in range(1, attr.phys_port_cnt + 1):
            if ib_port and num != ib_port:
                continue
            port = _port(ctx, num, verbose, table)
            dev.ports.append(port)
            if port.attr is None or port.gid_error_index is not None:
                break
    finally:
        try:
            ctx.close()
        except PyverbsError:
            dev.close_rc = RC_CLOSE


class _GidTable:
    """Every valid GID of a device in one call (pyverbs' query_gid_table).

    devinfo asks for each of a port's gid_tbl_len entries (1024 on rxe) with
    ibv_query_gid() and ibv_query_gid_type(); in pyverbs that is ~0.15 s of Python under
    TCG, as long as the whole C tool. Both C calls read the kernel's GID table entry by
    entry (an empty entry reads as zeros, which devinfo skips), so the table's valid
    entries are the GIDs devinfo prints. The kernel's table leaves out iWARP ports
    (siw's GID comes from sysfs), so those, and any device whose table query fails, go
    entry by entry as devinfo does.
    """

    def __init__(self, ctx: Any, port_count: int, transport_type: int) -> None:
        self.ctx = ctx
        self.port_count = port_count
        self.usable = transport_type == T.TRANSPORT_IB
        self.entries: dict[int, list[Gid]] | None = None

    def port(self, num: int, tbl_len: int) -> list[Gid] | None:
        """The port's GIDs as devinfo prints them, or None: query entry by entry."""
        if not self.usable:
            return None
        if self.entries is None:
            self.entries = self._read(tbl_len)
            if self.entries is None:
                self.usable = False
                return None
        return sorted(self.entries.get(num, []), key=lambda g: g.index)

    def _read(self, tbl_len: int) -> dict[int, list[Gid]] | None:
        from pyverbs.pyverbs_error import PyverbsError

        try:
            entries = self.ctx.query_gid_table(max(1, tbl_len) * self.port_count)
        except PyverbsError:
            return None
        table: dict[int, list[Gid]] = {}
        for e in entries:
            if e.gid_index >= tbl_len:
                return None  # ports of different sizes: not what devinfo walks
            raw = bytes.fromhex(e.gid_str().replace(":", ""))
            if not any(raw[8:]):
                continue
            # ibv_query_gid_type(): RoCE v2 is its own type, IB and RoCE v1 share one
            gtype = T.GID_TYPE_ROCE_V2 if e.gid_type == IBV_GID_TYPE_ROCE_V2 else \
                T.GID_TYPE_ROCE_V1
            table.setdefault(e.port_num, []).append(Gid(index=e.gid_index, raw=raw.hex(),
                                                        type=gtype))
        return table


IBV_GID_TYPE_ROCE_V2 = 2  # enum ibv_gid_type (of struct ibv_gid_entry), not the sysfs one


def _port(ctx: Any, num: int, verbose: bool, table: _GidTable) -> PortRecord:
    from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError

    try:
        pa = ctx.query_port(num)
    except PyverbsRDMAError as exc:
        return PortRecord(port_num=num, attr=None, query_rc=exc.error_code)
    port = PortRecord(port_num=num, attr=PortAttr(**{k: getattr(pa, k) for k in _PORT_FIELDS}))
    if not verbose:
        return port
    fast = table.port(num, pa.gid_tbl_len)
    if fast is not None:
        port.gids = fast
        return port
    gids: list[Gid] = []
    for index in range(pa.gid_tbl_len):
        try:
            gid = ctx.query_gid(num, index)
        except PyverbsError:
            port.gid_error_index = index
            port.gid_error_rc = -1  # ibv_query_gid() returns -1 on failure
            break
        raw = bytes.fromhex(str(gid).replace(":", ""))
        if not any(raw[8:]):
            continue  # devinfo skips GIDs whose interface ID is zero
        try:
            gtype = ctx.query_gid_type(num, index)
        except PyverbsError:
            gtype = T.GID_TYPE_INVALID
        gids.append(Gid(index=index, raw=raw.hex(), type=int(gtype)))
    port.gids = gids
    return port


_PORT_FIELDS = PortAttr._fields  # pyverbs' PortAttr binds them all


def _device_attr(ex: Any) -> DeviceAttr:
    from labctl.verbs._libibverbs import be64toh

    o = ex.orig_attr
    odp = ex.odp_caps
    tso = ex.tso_caps
    rss = ex.rss_caps
    pp = ex.packet_pacing_caps
    tm = ex.tm_caps
    cqm = ex.cq_mod_caps
    return DeviceAttr(
        fw_ver=o.fw_version,
        node_guid=be64toh(o.node_guid),
        sys_image_guid=be64toh(o.sys_image_guid),
        max_mr_size=o.max_mr_size,
        page_size_cap=o.page_size_cap,
        vendor_id=o.vendor_id,
        vendor_part_id=o.vendor_part_id,
        hw_ver=o.hw_ver,
        max_qp=o.max_qp,
        max_qp_wr=o.max_qp_wr,
        device_cap_flags=o.device_cap_flags,
        max_sge=o.max_sge,
        max_sge_rd=o.max_sge_rd,
        max_cq=o.max_cq,
        max_cqe=o.max_cqe,
        max_mr=o.max_mr,
        max_pd=o.max_pd,
        max_qp_rd_atom=o.max_qp_rd_atom,
        max_ee_rd_atom=o.max_ee_rd_atom,
        max_res_rd_atom=o.max_res_rd_atom,
        max_qp_init_rd_atom=o.max_qp_init_rd_atom,
        max_ee_init_rd_atom=o.max_ee_init_rd_atom,
        atomic_cap=o.atomic_caps,
        max_ee=o.max_ee,
        max_rdd=o.max_rdd,
        max_mw=o.max_mw,
        max_raw_ipv6_qp=o.max_raw_ipv6_qps,
        max_raw_ethy_qp=o.max_raw_ethy_qp,
        max_mcast_grp=o.max_mcast_grp,
        max_mcast_qp_attach=o.max_mcast_qp_attach,
        max_ah=o.max_ah,
        max_fmr=o.max_fmr,
        max_map_per_fmr=o.max_map_per_fmr,
        max_srq=o.max_srq,
        max_srq_wr=o.max_srq_wr,
        max_srq_sge=o.max_srq_sge,
        max_pkeys=o.max_pkeys,
        local_ca_ack_delay=o.local_ca_ack_delay,
        phys_port_cnt=o.phys_port_cnt,
        odp_general_caps=odp.general_caps,
        odp_rc_caps=odp.rc_odp_caps,
        odp_uc_caps=odp.uc_odp_caps,
        odp_ud_caps=odp.ud_odp_caps,
        odp_xrc_caps=odp.xrc_odp_caps,
        completion_timestamp_mask=ex.completion_timestamp_mask,
        hca_core_clock=ex.hca_core_clock,
        device_cap_flags_ex=ex.device_cap_flags_ex,
        tso_max_tso=tso.max_tso,
        tso_supported_qpts=tso.supported_qpts,
        rss_supported_qpts=rss.supported_qpts,
        rss_max_rwq_indirection_tables=rss.max_rwq_indirection_tables,
        rss_max_rwq_indirection_table_size=rss.max_rwq_indirection_table_size,
        rss_rx_hash_fields_mask=rss.rx_hash_fields_mask,
        rss_rx_hash_function=rss.rx_hash_function,
        max_wq_type_rq=ex.max_wq_type_rq,
        pp_qp_rate_limit_min=pp.qp_rate_limit_min,
        pp_qp_rate_limit_max=pp.qp_rate_limit_max,
        pp_supported_qpts=pp.supported_qpts,
        raw_packet_caps=ex.raw_packet_caps,
        tm_max_rndv_hdr_size=tm.max_rndv_hdr_size,
        tm_max_num_tags=tm.max_num_tags,
        tm_flags=tm.flags,
        tm_max_ops=tm.max_ops,
        tm_max_sge=tm.max_sge,
        cq_mod_max_cq_count=cqm.max_cq_count,
        cq_mod_max_cq_period=cqm.max_cq_period,
        max_dm_size=ex.max_dm_size,
    )


# ----------------------------------------------------------------------------- main
def main(
    argv: list[str],
    source: Callable[..., Snapshot] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """devinfo's main(): parse argv like getopt_long, capture, print; return the exit status.

    argv[0] is the program name. `source(ib_devname, ib_port, verbose, probe=...)` gives
    the snapshot (default: `capture`, the live devices); tests pass a recorded one.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    source = source or capture
    prog = PROG
    ib_devname: str | None = None
    ib_port = 0
    verbose = False
    as_json = False
    for opt, arg in getopt_long(argv, "d:i:lv", LONGOPTS, err, prog):
        if opt == "d":
            ib_devname = arg
        elif opt == "i":
            ib_port = c_int(strtol(arg or ""))
            if ib_port <= 0:
                out.write(usage(prog))
                return 1
        elif opt == "v":
            verbose = True
        elif opt == "json":
            as_json = True
        elif opt == "l":
            snap = source(None, 0, False, probe=False)
            result = render_list(snap)
            return _emit(snap if as_json else None, result, out, err)
        else:  # getopt error
            out.write(usage(prog))
            return 255
    verbose = verbose or as_json
    try:
        snap = source(ib_devname, ib_port, verbose)
    except ImportError as exc:  # a host without pyverbs
        err.write(f"{prog}: {exc} (install python3-pyverbs)\n")
        return 255
    result = render(snap, ib_devname, ib_port, verbose)
    return _emit(snap if as_json else None, result, out, err)


def _emit(snap: Snapshot | None, result: Output, out: TextIO, err: TextIO) -> int:
    out.write(result.stdout if snap is None else snap.to_json() + "\n")
    out.flush()
    if result.stderr:
        err.write(result.stderr)
        err.flush()
    return result.exit_status
