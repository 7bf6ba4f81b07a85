"""ibsim's client protocol: the control and MAD messages between ibsim and a libumad program under ``ibsim-run``.

The facts are from ibsim's ``include/ibsim.h``, ``ibsim/ibsim.c`` and ``umad2sim/sim_client.c``
(github.com/linux-rdma/ibsim, db9c0e46).  The messages are C structs written whole with ``write``; the
client and the server are x86-64 programs on one host, so the layouts below are those of the structs on
x86-64 (little-endian, natural alignment, the padding written out), byte for byte:

``struct sim_ctl`` (80 bytes), the control message, answered in place on the control socket::

    0  u32 magic (0xdeadbeef)   4  u32 clientid   8  u32 type   12  u32 len   16  char data[64]

``struct sim_client_info`` (44 bytes, in ``sim_ctl.data`` of CONNECT)::

    0  u32 id (the client's pid, or its UDP port, in; the client id, out)   4  u32 qp   8  u32 issm
    12 char nodeid[32]

``struct sim_port`` (4 bytes: u16 lid, u8 state, 1 pad), ``struct sim_vendor`` (24 bytes: u32
vendor_id, u32 vendor_part_id, u32 hw_ver, 4 pad, u64 fw_ver).

``struct sim_request`` (288 bytes), one MAD each way on a client's data socket::

    0  u32 dlid   4  u32 slid   8  u32 dqp   12  u32 sqp   16  u32 status   20  4 pad
    24 u64 length   32  char mad[256]

Byte order: ``sim_ctl``, ``sim_client_info``, ``sim_port`` and ``sim_vendor`` are in host order
(little-endian).  In ``sim_request`` the fields are stored as the network-order values the umad
interface hands over (umad2sim.c: ``req.dlid = umad->addr.lid``, a ``__be16`` kept in a ``uint32_t``;
``req.sqp = htonl(qpn)``; ``req.length = htobe64(cnt)``; sim_mad.c reads ``ntohs(r->dlid)``,
``ntohl(r->dqp)``, ``ntohl(r->status)``): ``dlid``/``slid`` are a big-endian u16 in the field's first two
bytes (the other two are 0), ``dqp``, ``sqp`` and ``status`` big-endian u32, ``length`` a big-endian u64.
``slid`` 0 from a client means "the sender's own LID" and 0xffff "permissive" (umad2sim.c).

Sockets (ibsim.c ``sim_init_conn``, sim_client.c ``sim_init``): datagram sockets in the abstract unix
namespace (the name's first byte is NUL), named from a base name (``IBSIM_SOCKNAME``, default ``"sim"``):
the server binds ``BASE:ctl`` (each name is a NUL, the text and a trailing NUL: the address length ibsim
gives counts one NUL after the text) and ``BASE:out0`` .. ``BASE:out9``; a client binds ``BASE:ctl<pid>`` and
``BASE:in<pid>``, sends CONNECT (``sim_client_info.id`` = its pid) to ``BASE:ctl``, is given a client id
``i``, and connects its data socket to ``BASE:out<i>``, which the server connects to ``BASE:in<pid>``.
Remote mode (``IBSIM_SERVER_NAME`` set in the client, ``ibsim -r`` in the server): UDP, the control socket on
``IBSIM_SERVER_PORT`` (default 7070), ``out<i>`` on that port + i + 1, and the client's CONNECT carries
its data socket's UDP port as ``id``, to which the server connects ``out<i>`` at the sender's address.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError

SIM_MAGIC = 0xDEADBEEF
SIM_BASENAME = "sim"  # the default socket base name (IBSIM_SOCKNAME overrides it)
SIM_CTL_MAX_DATA = 64
IBSIM_MAX_CLIENTS = 10
IBSIM_DEFAULT_SERVER_PORT = 7070
SIM_MAD_SIZE = 256  # sim_request.mad
SIM_NODEID_SIZE = 32  # sim_client_info.nodeid
SIM_REPLY_TIMEOUT_STATUS = 110  # ETIMEDOUT: the status ibsim puts in a request it could not deliver


class CtlType(enum.IntEnum):
    """``enum SIM_CTL_TYPES`` (include/ibsim.h), in its order."""

    ERROR = 0  # the reply type of a failed request
    CONNECT = 1
    DISCONNECT = 2
    GET_PORT = 3
    GET_VENDOR = 4
    GET_GID = 5
    GET_GUID = 6
    GET_NODEINFO = 7
    GET_PORTINFO = 8
    SET_ISSM = 9
    GET_PKEYS = 10


_CTL = struct.Struct("<IIII64s")
_CLIENT_INFO = struct.Struct("<III32s")
_PORT = struct.Struct("<HBx")
_VENDOR = struct.Struct("<III4xQ")
_REQUEST = struct.Struct(">H2xH2xIII4xQ256s")

SIM_CTL_SIZE = _CTL.size  # 80
SIM_CLIENT_INFO_SIZE = _CLIENT_INFO.size  # 44
SIM_PORT_SIZE = _PORT.size  # 4
SIM_VENDOR_SIZE = _VENDOR.size  # 24
SIM_REQUEST_SIZE = _REQUEST.size  # 288
SIM_REQUEST_HEADER_SIZE = SIM_REQUEST_SIZE - SIM_MAD_SIZE  # 32


def _need(layer: str, data: bytes | bytearray | memoryview, size: int, exact: bool) -> None:
    n = len(data)
    if n < size:
        raise TruncatedError(layer, None, 0, n, f"{size} bytes (struct {layer.lower()} on x86-64)")
    if exact and n != size:
        raise MalformedError(layer, None, 0, n, f"exactly {size} bytes (struct {layer.lower()} on x86-64)")


def _uint(layer: str, name: str, value: int, bits: int) -> None:
    if not 0 <= value < 1 << bits:
        raise EncodeError(layer, name, value, f"an unsigned {bits}-bit integer")


def _cstring(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("latin-1")


@dataclass(frozen=True, slots=True)
class SimCtl:
    """``struct sim_ctl``: a control request and, answered in place, its reply (``type`` ERROR on failure).

    ``data`` is the 64-byte payload (shorter is padded with zeros on encode)."""

    type: int
    clientid: int = 0
    len: int = 0
    data: bytes = b""
    magic: int = SIM_MAGIC

    def encode(self) -> bytes:
        for name in ("magic", "clientid", "type", "len"):
            _uint("SIM_CTL", name, getattr(self, name), 32)
        if len(self.data) > SIM_CTL_MAX_DATA:
            raise EncodeError("SIM_CTL", "data", len(self.data), f"at most {SIM_CTL_MAX_DATA} bytes")
        return _CTL.pack(self.magic, self.clientid, self.type, self.len, self.data)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SimCtl:
        """Exactly :data:`SIM_CTL_SIZE` bytes (ibsim drops any other size).  The magic is not checked here:
        :attr:`magic_ok` says (ibsim ignores a message with a bad one)."""
        _need("SIM_CTL", data, SIM_CTL_SIZE, exact=True)
        magic, clientid, type_, length, payload = _CTL.unpack(bytes(data))
        return cls(type=type_, clientid=clientid, len=length, data=payload, magic=magic)

    @property
    def magic_ok(self) -> bool:
        return self.magic == SIM_MAGIC

    @property
    def type_name(self) -> str:
        try:
            return CtlType(self.type).name
        except ValueError:
            return f"type {self.type}"

    def reply(self, data: bytes | None = None, *, error: bool = False) -> SimCtl:
        """This message answered in place: the same header, ``data`` (if given) as the payload, and
        ``type`` ERROR when ``error``."""
        return SimCtl(type=CtlType.ERROR if error else self.type, clientid=self.clientid, len=self.len,
                      data=self.data if data is None else data.ljust(SIM_CTL_MAX_DATA, b"\0"), magic=self.magic)


@dataclass(frozen=True, slots=True)
class SimClientInfo:
    """``struct sim_client_info``, the payload of CONNECT: ``id`` is the client's pid (its UDP data port in
    remote mode) in the request and the client id in the reply; ``nodeid`` is ``SIM_HOST`` (empty: the default
    port's node) in, the node attached to out."""

    id: int
    qp: int = 0
    issm: int = 0
    nodeid: str = ""

    def encode(self) -> bytes:
        for name in ("id", "qp", "issm"):
            _uint("SIM_CLIENT_INFO", name, getattr(self, name), 32)
        raw = self.nodeid.encode("latin-1")
        if len(raw) >= SIM_NODEID_SIZE:
            raise EncodeError("SIM_CLIENT_INFO", "nodeid", self.nodeid, f"at most {SIM_NODEID_SIZE - 1} bytes")
        return _CLIENT_INFO.pack(self.id, self.qp, self.issm, raw)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SimClientInfo:
        _need("SIM_CLIENT_INFO", data, SIM_CLIENT_INFO_SIZE, exact=False)
        id_, qp, issm, nodeid = _CLIENT_INFO.unpack_from(bytes(data))
        return cls(id=id_, qp=qp, issm=issm, nodeid=_cstring(nodeid))


@dataclass(frozen=True, slots=True)
class SimPort:
    """``struct sim_port``, the reply of GET_PORT: the port's base LID and state (1 Down .. 4 Active)."""

    lid: int
    state: int

    def encode(self) -> bytes:
        _uint("SIM_PORT", "lid", self.lid, 16)
        _uint("SIM_PORT", "state", self.state, 8)
        return _PORT.pack(self.lid, self.state)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SimPort:
        _need("SIM_PORT", data, SIM_PORT_SIZE, exact=False)
        lid, state = _PORT.unpack_from(bytes(data))
        return cls(lid=lid, state=state)


@dataclass(frozen=True, slots=True)
class SimVendor:
    """``struct sim_vendor``, the reply of GET_VENDOR (ibsim: NodeInfo's VendorID, DeviceID, Revision; fw 1)."""

    vendor_id: int
    vendor_part_id: int
    hw_ver: int
    fw_ver: int

    def encode(self) -> bytes:
        for name in ("vendor_id", "vendor_part_id", "hw_ver"):
            _uint("SIM_VENDOR", name, getattr(self, name), 32)
        _uint("SIM_VENDOR", "fw_ver", self.fw_ver, 64)
        return _VENDOR.pack(self.vendor_id, self.vendor_part_id, self.hw_ver, self.fw_ver)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SimVendor:
        _need("SIM_VENDOR", data, SIM_VENDOR_SIZE, exact=False)
        return cls(*_VENDOR.unpack_from(bytes(data)))


@dataclass(frozen=True, slots=True)
class SimRequest:
    """``struct sim_request``: one MAD and its addressing, from a client or to one.

    ``dlid``/``slid`` are LIDs, ``dqp``/``sqp`` QP numbers, ``status`` the umad status (0, or 110 when ibsim
    could not deliver), ``length`` the MAD's length; the values here are plain integers, their byte order on
    the wire is the module's docstring's.  ``mad`` is padded to 256 bytes on encode."""

    dlid: int
    slid: int
    dqp: int
    sqp: int
    mad: bytes
    status: int = 0
    length: int = SIM_MAD_SIZE

    def encode(self) -> bytes:
        _uint("SIM_REQUEST", "dlid", self.dlid, 16)
        _uint("SIM_REQUEST", "slid", self.slid, 16)
        for name in ("dqp", "sqp", "status"):
            _uint("SIM_REQUEST", name, getattr(self, name), 32)
        _uint("SIM_REQUEST", "length", self.length, 64)
        if len(self.mad) > SIM_MAD_SIZE:
            raise EncodeError("SIM_REQUEST", "mad", len(self.mad), f"at most {SIM_MAD_SIZE} bytes")
        return _REQUEST.pack(self.dlid, self.slid, self.dqp, self.sqp, self.status, self.length, self.mad)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> SimRequest:
        """At least the 32-byte header; a shorter ``mad`` than 256 bytes is zero-padded (umad2sim always
        sends the whole struct)."""
        raw = bytes(data)
        if len(raw) < SIM_REQUEST_HEADER_SIZE:
            raise TruncatedError("SIM_REQUEST", None, 0, len(raw), f"{SIM_REQUEST_HEADER_SIZE} bytes of header")
        if len(raw) > SIM_REQUEST_SIZE:
            raise MalformedError("SIM_REQUEST", None, 0, len(raw), f"at most {SIM_REQUEST_SIZE} bytes")
        dlid, slid, dqp, sqp, status, length, mad = _REQUEST.unpack(raw.ljust(SIM_REQUEST_SIZE, b"\0"))
        return cls(dlid=dlid, slid=slid, dqp=dqp, sqp=sqp, mad=mad, status=status, length=length)


# ---------------------------------------------------------------------- socket names


def abstract_name(base: str, suffix: str) -> bytes:
    # ibsim's make_name gives the address length as offsetof(sun_path) + 1 + strlen(name) + 1: the name is
    # NUL, the text and one more NUL (``ss -x`` shows ``@sim:ctl@``); a name without that NUL is another name
    return b"\0" + f"{base}:{suffix}".encode() + b"\0"


def ctl_name(base: str = SIM_BASENAME) -> bytes:
    """The server's control socket: abstract ``BASE:ctl`` (the address bytes: a NUL, the name, a NUL)."""
    return abstract_name(base, "ctl")


def out_name(client: int, base: str = SIM_BASENAME) -> bytes:
    """The server's data socket for client id ``client``: ``BASE:out<client>``."""
    return abstract_name(base, f"out{client}")


def client_ctl_name(pid: int, base: str = SIM_BASENAME) -> bytes:
    """A client's control socket: ``BASE:ctl<pid>``."""
    return abstract_name(base, f"ctl{pid}")


def client_in_name(pid: int, base: str = SIM_BASENAME) -> bytes:
    """A client's data socket: ``BASE:in<pid>`` (the server's ``out<i>`` is connected to it)."""
    return abstract_name(base, f"in{pid}")
