"""A small ctypes shim on libibverbs.so.1 for what pyverbs (rdma-core 44-56) does not give.

What it covers, and why:
- the device list with each device's name, node GUID, node/transport type and sysfs
  path, without importing pyverbs (importing pyverbs costs ~2 s under TCG; `ibv_devices`
  and `ibv_devinfo -l` need nothing else);
- `max_total_mcast_qp_attach` (not bound by pyverbs' DeviceAttr): read with the exported
  `ibv_query_device` on a context of our own;
- the async event FD and the event's element (port number): pyverbs' AsyncEvent exposes
  only the event type, its Context only the command FD, and its `get_async_event` blocks
  in C while holding the GIL (no Ctrl-C). Here we poll() the async FD from Python and only
  then call `ibv_get_async_event`, which ctypes calls with the GIL released.

Only exported, ABI-stable symbols are used; struct layouts follow <infiniband/verbs.h>
(x86-64/aarch64 LP64 and 32-bit alike, since ctypes lays them out with the C rules).
"""

from __future__ import annotations

import ctypes
import os
import sys

IBV_SYSFS_NAME_MAX = 64
IBV_SYSFS_PATH_MAX = 256


class _DeviceOps(ctypes.Structure):
    _fields_ = [("_dummy1", ctypes.c_void_p), ("_dummy2", ctypes.c_void_p)]


class IbvDevice(ctypes.Structure):
    """struct ibv_device."""

    _fields_ = [
        ("_ops", _DeviceOps),
        ("node_type", ctypes.c_int),
        ("transport_type", ctypes.c_int),
        ("name", ctypes.c_char * IBV_SYSFS_NAME_MAX),
        ("dev_name", ctypes.c_char * IBV_SYSFS_NAME_MAX),
        ("dev_path", ctypes.c_char * IBV_SYSFS_PATH_MAX),
        ("ibdev_path", ctypes.c_char * IBV_SYSFS_PATH_MAX),
    ]


class IbvContext(ctypes.Structure):
    """The leading members of struct ibv_context (ops is 32 function pointers)."""

    _fields_ = [
        ("device", ctypes.POINTER(IbvDevice)),
        ("ops", ctypes.c_void_p * 32),
        ("cmd_fd", ctypes.c_int),
        ("async_fd", ctypes.c_int),
        ("num_comp_vectors", ctypes.c_int),
    ]


class _Element(ctypes.Union):
    _fields_ = [("ptr", ctypes.c_void_p), ("port_num", ctypes.c_int)]


class IbvAsyncEvent(ctypes.Structure):
    """struct ibv_async_event."""

    _fields_ = [("element", _Element), ("event_type", ctypes.c_int)]


class IbvDeviceAttr(ctypes.Structure):
    """struct ibv_device_attr."""

    _fields_ = [
        ("fw_ver", ctypes.c_char * 64),
        ("node_guid", ctypes.c_uint64),
        ("sys_image_guid", ctypes.c_uint64),
        ("max_mr_size", ctypes.c_uint64),
        ("page_size_cap", ctypes.c_uint64),
        ("vendor_id", ctypes.c_uint32),
        ("vendor_part_id", ctypes.c_uint32),
        ("hw_ver", ctypes.c_uint32),
        ("max_qp", ctypes.c_int),
        ("max_qp_wr", ctypes.c_int),
        ("device_cap_flags", ctypes.c_uint),
        ("max_sge", ctypes.c_int),
        ("max_sge_rd", ctypes.c_int),
        ("max_cq", ctypes.c_int),
        ("max_cqe", ctypes.c_int),
        ("max_mr", ctypes.c_int),
        ("max_pd", ctypes.c_int),
        ("max_qp_rd_atom", ctypes.c_int),
        ("max_ee_rd_atom", ctypes.c_int),
        ("max_res_rd_atom", ctypes.c_int),
        ("max_qp_init_rd_atom", ctypes.c_int),
        ("max_ee_init_rd_atom", ctypes.c_int),
        ("atomic_cap", ctypes.c_int),
        ("max_ee", ctypes.c_int),
        ("max_rdd", ctypes.c_int),
        ("max_mw", ctypes.c_int),
        ("max_raw_ipv6_qp", ctypes.c_int),
        ("max_raw_ethy_qp", ctypes.c_int),
        ("max_mcast_grp", ctypes.c_int),
        ("max_mcast_qp_attach", ctypes.c_int),
        ("max_total_mcast_qp_attach", ctypes.c_int),
        ("max_ah", ctypes.c_int),
        ("max_fmr", ctypes.c_int),
        ("max_map_per_fmr", ctypes.c_int),
        ("max_srq", ctypes.c_int),
        ("max_srq_wr", ctypes.c_int),
        ("max_srq_sge", ctypes.c_int),
        ("max_pkeys", ctypes.c_uint16),
        ("local_ca_ack_delay", ctypes.c_uint8),
        ("phys_port_cnt", ctypes.c_uint8),
    ]


_DevicePtr = ctypes.POINTER(IbvDevice)
_ContextPtr = ctypes.POINTER(IbvContext)


class VerbsError(OSError):
    """A libibverbs call failed; errno is the C errno (or the returned code)."""


def be64toh(value: int) -> int:
    """A __be64 read as a native integer -> its host-order value."""
    return int.from_bytes(value.to_bytes(8, sys.byteorder), "big")


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """Load libibverbs.so.1 once and declare the prototypes we call."""
    global _lib
    if _lib is not None:
        return _lib
    name = "libibverbs.so.1"
    try:
        handle = ctypes.CDLL(name, use_errno=True)
    except OSError:
        from ctypes.util import find_library  # slow (subprocess): only if the soname fails

        found = find_library("ibverbs")
        if not found:
            raise
        handle = ctypes.CDLL(found, use_errno=True)
    handle.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    handle.ibv_get_device_list.restype = ctypes.POINTER(_DevicePtr)
    handle.ibv_free_device_list.argtypes = [ctypes.POINTER(_DevicePtr)]
    handle.ibv_free_device_list.restype = None
    handle.ibv_get_device_name.argtypes = [_DevicePtr]
    handle.ibv_get_device_name.restype = ctypes.c_char_p
    handle.ibv_get_device_guid.argtypes = [_DevicePtr]
    handle.ibv_get_device_guid.restype = ctypes.c_uint64
    handle.ibv_open_device.argtypes = [_DevicePtr]
    handle.ibv_open_device.restype = _ContextPtr
    handle.ibv_close_device.argtypes = [_ContextPtr]
    handle.ibv_close_device.restype = ctypes.c_int
    handle.ibv_query_device.argtypes = [_ContextPtr, ctypes.POINTER(IbvDeviceAttr)]
    handle.ibv_query_device.restype = ctypes.c_int
    handle.ibv_get_async_event.argtypes = [_ContextPtr, ctypes.POINTER(IbvAsyncEvent)]
    handle.ibv_get_async_event.restype = ctypes.c_int
    handle.ibv_ack_async_event.argtypes = [ctypes.POINTER(IbvAsyncEvent)]
    handle.ibv_ack_async_event.restype = None
    _lib = handle
    return handle


class DeviceInfo:
    __slots__ = ("guid", "ibdev_path", "name", "node_type", "transport_type")

    def __init__(
        self, name: str, guid: int, node_type: int, transport_type: int, ibdev_path: str
    ) -> None:
        self.name = name
        self.guid = guid  # host order, as ibv_devices prints it
        self.node_type = node_type
        self.transport_type = transport_type
        self.ibdev_path = ibdev_path


class DeviceList:
    """ibv_get_device_list() as a context manager; `entries` keeps the C order."""

    def __init__(self) -> None:
        self._lib = lib()
        self._list: ctypes._Pointer | None = None
        self.pointers: list[ctypes._Pointer] = []

    def __enter__(self) -> DeviceList:
        num = ctypes.c_int(0)
        ptr = self._lib.ibv_get_device_list(ctypes.byref(num))
        if not ptr:
            err = ctypes.get_errno()
            raise VerbsError(err, os.strerror(err) if err else "ibv_get_device_list failed")
        self._list = ptr
        self.pointers = [ptr[i] for i in range(num.value)]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._list:
            self._lib.ibv_free_device_list(self._list)
            self._list = None
            self.pointers = []

    def info(self, dev: ctypes._Pointer) -> DeviceInfo:
        name = (self._lib.ibv_get_device_name(dev) or b"").decode(errors="surrogateescape")
        guid = be64toh(self._lib.ibv_get_device_guid(dev))
        st = dev.contents
        return DeviceInfo(
            name=name,
            guid=guid,
            node_type=st.node_type,
            transport_type=st.transport_type,
            ibdev_path=st.ibdev_path.decode(errors="surrogateescape"),
        )

    def infos(self) -> list[DeviceInfo]:
        return [self.info(p) for p in self.pointers]


def list_devices() -> list[DeviceInfo]:
    """Every device libibverbs sees, in its order; VerbsError when the list fails."""
    with DeviceList() as dl:
        return dl.infos()


class Context:
    """An ibv_context opened with ctypes (for what the pyverbs Context hides)."""

    def __init__(self, device: ctypes._Pointer) -> None:
        self._lib = lib()
        ctx = self._lib.ibv_open_device(device)
        if not ctx:
            err = ctypes.get_errno()
            raise VerbsError(err, os.strerror(err) if err else "ibv_open_device failed")
        self._ctx: ctypes._Pointer | None = ctx

    @property
    def ptr(self) -> ctypes._Pointer:
        if not self._ctx:
            raise ValueError("context is closed")
        return self._ctx

    @property
    def async_fd(self) -> int:
        return int(self.ptr.contents.async_fd)

    @property
    def cmd_fd(self) -> int:
        return int(self.ptr.contents.cmd_fd)

    @property
    def num_comp_vectors(self) -> int:
        return int(self.ptr.contents.num_comp_vectors)

    def query_device(self) -> IbvDeviceAttr:
        attr = IbvDeviceAttr()
        rc = self._lib.ibv_query_device(self.ptr, ctypes.byref(attr))
        if rc:
            raise VerbsError(rc, os.strerror(rc) if rc > 0 else "ibv_query_device failed")
        return attr

    def get_async_event(self) -> tuple[int, int]:
        """Read one async event (blocks unless the FD is readable); ack it.

        Returns (event_type, element.port_num) — the int member of the element union,
        which is what asyncwatch prints whatever the event's kind.
        """
        event = IbvAsyncEvent()
        if self._lib.ibv_get_async_event(self.ptr, ctypes.byref(event)):
            err = ctypes.get_errno()
            raise VerbsError(err, os.strerror(err) if err else "ibv_get_async_event failed")
        result = (int(event.event_type), int(event.element.port_num))
        self._lib.ibv_ack_async_event(ctypes.byref(event))
        return result

    def close(self) -> int:
        if not self._ctx:
            return 0
        rc = int(self._lib.ibv_close_device(self._ctx))
        self._ctx = None
        return rc

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
