"""Attribute records: a plain snapshot of everything ibv_devinfo/ibv_devices print.

The capture side (pyverbs + the ctypes shim, node only) fills these; the formatters in
`devinfo.py` and `devices.py` are pure functions of them. Records round-trip through JSON,
so `python3 -m labctl.verbs capture > record.json` on a node gives unit-test fixtures.

Integers are stored exactly as the C structures hold them, except that the big-endian
GUIDs are stored in host order (the value devinfo prints).
Errors are part of the record: a device that could not be opened, queried, a port whose
query failed, a GID query that failed, each with the return code devinfo would see.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~60 ms of import under TCG; only type checkers need it
if TYPE_CHECKING:
    from typing import Any, ClassVar

SCHEMA = 1


class Record:
    """A plain attribute record: fields and defaults from the class body, like a dataclass.

    Not a dataclass on purpose: @dataclass generates code at import and that, with the
    `inspect`/`typing` imports it pulls in, costs ~250 ms per run of the tools under TCG.
    Defaults must be immutable; list fields default to None and are given by the caller.
    """

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(cls.__annotations__)  # this class's own, in order (3.10+)

    def __init__(self, **kwargs: Any) -> None:
        for name in self._fields:
            if name in kwargs:
                setattr(self, name, kwargs.pop(name))
            elif not hasattr(type(self), name):
                raise TypeError(f"{type(self).__name__}: missing field {name!r}")
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(kwargs)}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        return {n: _plain(getattr(self, n)) for n in self._fields}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class DeviceAttr(Record):
    """struct ibv_device_attr_ex (orig_attr flattened) as devinfo reads it."""

    fw_ver: str = ""
    node_guid: int = 0  # host order
    sys_image_guid: int = 0  # host order
    max_mr_size: int = 0
    page_size_cap: int = 0
    vendor_id: int = 0
    vendor_part_id: int = 0
    hw_ver: int = 0
    max_qp: int = 0
    max_qp_wr: int = 0
    device_cap_flags: int = 0
    max_sge: int = 0
    max_sge_rd: int = 0
    max_cq: int = 0
    max_cqe: int = 0
    max_mr: int = 0
    max_pd: int = 0
    max_qp_rd_atom: int = 0
    max_ee_rd_atom: int = 0
    max_res_rd_atom: int = 0
    max_qp_init_rd_atom: int = 0
    max_ee_init_rd_atom: int = 0
    atomic_cap: int = 0
    max_ee: int = 0
    max_rdd: int = 0
    max_mw: int = 0
    max_raw_ipv6_qp: int = 0
    max_raw_ethy_qp: int = 0
    max_mcast_grp: int = 0
    max_mcast_qp_attach: int = 0
    max_total_mcast_qp_attach: int = 0
    max_ah: int = 0
    max_fmr: int = 0
    max_map_per_fmr: int = 0
    max_srq: int = 0
    max_srq_wr: int = 0
    max_srq_sge: int = 0
    max_pkeys: int = 0
    local_ca_ack_delay: int = 0
    phys_port_cnt: int = 0
    # extended part
    odp_general_caps: int = 0
    odp_rc_caps: int = 0
    odp_uc_caps: int = 0
    odp_ud_caps: int = 0
    odp_xrc_caps: int = 0
    completion_timestamp_mask: int = 0
    hca_core_clock: int = 0
    device_cap_flags_ex: int = 0
    tso_max_tso: int = 0
    tso_supported_qpts: int = 0
    rss_supported_qpts: int = 0
    rss_max_rwq_indirection_tables: int = 0
    rss_max_rwq_indirection_table_size: int = 0
    rss_rx_hash_fields_mask: int = 0
    rss_rx_hash_function: int = 0
    max_wq_type_rq: int = 0
    pp_qp_rate_limit_min: int = 0
    pp_qp_rate_limit_max: int = 0
    pp_supported_qpts: int = 0
    raw_packet_caps: int = 0
    tm_max_rndv_hdr_size: int = 0
    tm_max_num_tags: int = 0
    tm_flags: int = 0
    tm_max_ops: int = 0
    tm_max_sge: int = 0
    cq_mod_max_cq_count: int = 0
    cq_mod_max_cq_period: int = 0
    max_dm_size: int = 0


class Gid(Record):
    index: int
    raw: str  # 32 hex digits, the 16 bytes of union ibv_gid in order
    type: int  # enum ibv_gid_type_sysfs: 0 RoCE v1/IB, 1 RoCE v2, 2 = type query failed

    @property
    def raw_bytes(self) -> bytes:
        return bytes.fromhex(self.raw)


class PortAttr(Record):
    """struct ibv_port_attr."""

    state: int = 0
    max_mtu: int = 0
    active_mtu: int = 0
    gid_tbl_len: int = 0
    port_cap_flags: int = 0
    max_msg_sz: int = 0
    bad_pkey_cntr: int = 0
    qkey_viol_cntr: int = 0
    pkey_tbl_len: int = 0
    lid: int = 0
    sm_lid: int = 0
    lmc: int = 0
    max_vl_num: int = 0
    sm_sl: int = 0
    subnet_timeout: int = 0
    init_type_reply: int = 0
    active_width: int = 0
    active_speed: int = 0
    phys_state: int = 0
    link_layer: int = 0
    flags: int = 0
    port_cap_flags2: int = 0
    active_speed_ex: int = 0


class PortRecord(Record):
    port_num: int
    attr: PortAttr | None = None  # None: ibv_query_port failed
    query_rc: int = 0  # ibv_query_port's return code when it failed
    # Non-null GIDs in index order; None when the GID table was not read.
    gids: list[Gid] | None = None
    # When ibv_query_gid failed: the index and return code (reading stopped there).
    gid_error_index: int | None = None
    gid_error_rc: int = 0


class DeviceRecord(Record):
    name: str
    node_guid: int = 0  # ibv_get_device_guid(), host order (what ibv_devices prints)
    node_type: int = 0
    transport_type: int = 0
    # Filled when the device was opened and queried (devinfo); None otherwise.
    opened: bool = False  # False: ibv_open_device failed (or not attempted)
    attr: DeviceAttr | None = None  # None: ibv_query_device_ex failed (or not attempted)
    board_id: str | None = None
    num_comp_vectors: int = 0
    # Ports actually read (a subset when devinfo was asked for one port).
    ports: list[PortRecord] = None  # type: ignore[assignment]  # set in __init__
    probed: bool = False  # True once an open/query was attempted
    close_rc: int = 0  # ibv_close_device() failed: devinfo's rc 3

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("ports", [])
        super().__init__(**kwargs)


class Snapshot(Record):
    """What the node's libibverbs reported: the device list and the devices' attributes."""

    devices: list[DeviceRecord] = None  # type: ignore[assignment]  # set in __init__
    list_errno: int | None = None  # ibv_get_device_list() returned NULL with this errno
    schema: int = SCHEMA
    meta: dict[str, Any] = None  # type: ignore[assignment]  # host, kernel, python

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("devices", [])
        kwargs.setdefault("meta", {})
        super().__init__(**kwargs)

    def device(self, name: str) -> DeviceRecord | None:
        for dev in self.devices:
            if dev.name == name:
                return dev
        return None

    # --- JSON ---------------------------------------------------------------------
    def to_json(self) -> str:
        import json

        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Snapshot:
        return cls(
            devices=[_device_from(d) for d in raw.get("devices", [])],
            list_errno=raw.get("list_errno"),
            schema=raw.get("schema", SCHEMA),
            meta=dict(raw.get("meta", {})),
        )

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        """The snapshot `text` holds; ValueError (saying what is wrong) for anything else,
        never a KeyError or RecursionError: a record may come from a node, which is
        untrusted. (Stdlib only: this module runs in nodes, without labctl.bounded.)"""
        import json

        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise TypeError(f"a JSON {type(raw).__name__}, not an object")
            return cls.from_dict(raw)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise ValueError(f"not a device snapshot ({why[:200]})") from None


def _known(rc: type[Record], raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k in rc._fields}


def _port_from(raw: dict[str, Any]) -> PortRecord:
    attr = raw.get("attr")
    gids = raw.get("gids")
    return PortRecord(
        port_num=raw["port_num"],
        attr=PortAttr(**_known(PortAttr, attr)) if attr is not None else None,
        query_rc=raw.get("query_rc", 0),
        gids=[Gid(**_known(Gid, g)) for g in gids] if gids is not None else None,
        gid_error_index=raw.get("gid_error_index"),
        gid_error_rc=raw.get("gid_error_rc", 0),
    )


def _device_from(raw: dict[str, Any]) -> DeviceRecord:
    attr = raw.get("attr")
    return DeviceRecord(
        name=raw["name"],
        node_guid=raw.get("node_guid", 0),
        node_type=raw.get("node_type", 0),
        transport_type=raw.get("transport_type", 0),
        opened=raw.get("opened", False),
        attr=DeviceAttr(**_known(DeviceAttr, attr)) if attr is not None else None,
        board_id=raw.get("board_id"),
        num_comp_vectors=raw.get("num_comp_vectors", 0),
        ports=[_port_from(p) for p in raw.get("ports", [])],
        probed=raw.get("probed", False),
        close_rc=raw.get("close_rc", 0),
    )
