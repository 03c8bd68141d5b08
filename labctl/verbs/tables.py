"""Enum-to-string tables for the inspector, in the words rdma-core 56.1's examples use.

These follow `libibverbs/examples/devinfo.c` and `asyncwatch.c` of rdma-core v56.1, not
pyverbs' own helpers (whose words differ, e.g. "Active" vs "PORT_ACTIVE"). Every lookup
returns the C tool's fallback word for values it does not know.
"""

from __future__ import annotations

# enum ibv_transport_type
TRANSPORT = {
    0: "InfiniBand",
    1: "iWARP",
    2: "usNIC",
    3: "usNIC UDP",
    4: "unspecified",
}
TRANSPORT_UNKNOWN = "invalid transport"
TRANSPORT_IB = 0

# enum ibv_port_state
PORT_STATE = {1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}
PORT_STATE_UNKNOWN = "invalid state"

# IB PortPhysicalState
PHYS_STATE = {
    1: "SLEEP",
    2: "POLLING",
    3: "DISABLED",
    4: "PORT_CONFIGURATION TRAINNING",  # sic, as printed by devinfo
    5: "LINK_UP",
    6: "LINK_ERROR_RECOVERY",
    7: "PHY TEST",
}
PHYS_STATE_UNKNOWN = "invalid physical state"

# enum ibv_atomic_cap
ATOMIC_CAP = {0: "ATOMIC_NONE", 1: "ATOMIC_HCA", 2: "ATOMIC_GLOB"}
ATOMIC_CAP_UNKNOWN = "invalid atomic capability"

# enum ibv_mtu
MTU = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
MTU_UNKNOWN = "invalid MTU"

# active_width bits
WIDTH = {1: "1", 2: "4", 4: "8", 8: "12", 16: "2"}
WIDTH_UNKNOWN = "invalid width"

# active_speed / active_speed_ex
SPEED = {
    1: "2.5 Gbps",
    2: "5.0 Gbps",
    4: "10.0 Gbps",
    8: "10.0 Gbps",
    16: "14.0 Gbps",
    32: "25.0 Gbps",
    64: "50.0 Gbps",
    128: "100.0 Gbps",
    256: "200.0 Gbps",
}
SPEED_UNKNOWN = "invalid speed"

# max_vl_num encoding
VL = {1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}
VL_UNKNOWN = "invalid value"

# enum ibv_gid_type_sysfs; devinfo uses 2 for "query failed"
GID_TYPE_ROCE_V1 = 0  # also plain IB GIDs
GID_TYPE_ROCE_V2 = 1
GID_TYPE_INVALID = 2
GID_TYPE = {GID_TYPE_ROCE_V1: "RoCE v1", GID_TYPE_ROCE_V2: "RoCE v2"}
GID_TYPE_UNKNOWN = "Invalid gid type"

# link_layer
LINK_LAYER_ETHERNET = 2
LINK_LAYER = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
LINK_LAYER_UNKNOWN = "Unknown"

# enum ibv_device_cap_flags, in devinfo's print order
DEVICE_CAP_FLAGS: tuple[tuple[int, str], ...] = (
    (1 << 0, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
)

# device_cap_flags_ex: the bits above 31 devinfo knows
DEVICE_CAP_FLAGS_EX: tuple[tuple[int, str], ...] = (
    (1 << 34, "RAW_SCATTER_FCS"),
    (1 << 36, "PCI_WRITE_END_PADDING"),
)

# enum ibv_odp_general_caps
ODP_GENERAL: tuple[tuple[int, str], ...] = (
    (1 << 0, "ODP_SUPPORT"),
    (1 << 1, "ODP_SUPPORT_IMPLICIT"),
)

# enum ibv_odp_transport_cap_bits
ODP_TRANSPORT: tuple[tuple[int, str], ...] = (
    (1 << 0, "SUPPORT_SEND"),
    (1 << 1, "SUPPORT_RECV"),
    (1 << 2, "SUPPORT_WRITE"),
    (1 << 3, "SUPPORT_READ"),
    (1 << 4, "SUPPORT_ATOMIC"),
    (1 << 5, "SUPPORT_SRQ"),
)

# enum ibv_raw_packet_caps (devinfo prints known bits only, no "Unknown flags")
RAW_PACKET_CAPS: tuple[tuple[int, str], ...] = (
    (1 << 0, "C-VLAN stripping offload"),
    (1 << 1, "Scatter FCS offload"),
    (1 << 2, "IP csum offload"),
    (1 << 3, "Delay drop"),
)

# enum ibv_qp_type values devinfo names in the supported_qpts masks
QPT_UD = 4
QPT_RAW_PACKET = 8
SUPPORTED_QPTS: tuple[tuple[int, str], ...] = (
    (1 << QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"),
    (1 << QPT_UD, "SUPPORT_UD"),
)

TM_CAP_RC = 1 << 0

# enum ibv_event_type: asyncwatch names only the unaffiliated (device/port) events
EVENT_NAMES = {
    8: "IBV_EVENT_DEVICE_FATAL",
    9: "IBV_EVENT_PORT_ACTIVE",
    10: "IBV_EVENT_PORT_ERR",
    11: "IBV_EVENT_LID_CHANGE",
    12: "IBV_EVENT_PKEY_CHANGE",
    13: "IBV_EVENT_SM_CHANGE",
    17: "IBV_EVENT_CLIENT_REREGISTER",
    18: "IBV_EVENT_GID_CHANGE",
}
EVENT_UNEXPECTED = "unexpected"


def lookup(table: dict[int, str], value: int, fallback: str) -> str:
    return table.get(value, fallback)
