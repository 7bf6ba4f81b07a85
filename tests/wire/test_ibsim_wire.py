"""rdmalab.wire.ibsim: ibsim's client protocol structs, byte for byte as the C structs on x86-64.

The layouts are checked against ctypes' own layout of the C structs (include/ibsim.h), an oracle we did
not write, and against hand-written bytes for the network-order fields of sim_request."""

import ctypes

import pytest

from rdmalab.wire import ibsim as w
from rdmalab.wire.errors import EncodeError, MalformedError, TruncatedError


class CSimCtl(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("clientid", ctypes.c_uint32), ("type", ctypes.c_uint32),
                ("len", ctypes.c_uint32), ("data", ctypes.c_char * 64)]


class CSimClientInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("qp", ctypes.c_uint32), ("issm", ctypes.c_uint32),
                ("nodeid", ctypes.c_char * 32)]


class CSimPort(ctypes.Structure):
    _fields_ = [("lid", ctypes.c_uint16), ("state", ctypes.c_uint8)]


class CSimVendor(ctypes.Structure):
    _fields_ = [("vendor_id", ctypes.c_uint32), ("vendor_part_id", ctypes.c_uint32), ("hw_ver", ctypes.c_uint32),
                ("fw_ver", ctypes.c_uint64)]


class CSimRequest(ctypes.Structure):
    _fields_ = [("dlid", ctypes.c_uint32), ("slid", ctypes.c_uint32), ("dqp", ctypes.c_uint32),
                ("sqp", ctypes.c_uint32), ("status", ctypes.c_uint32), ("length", ctypes.c_uint64),
                ("mad", ctypes.c_char * 256)]


def test_sizes_are_the_c_structs():
    assert (w.SIM_CTL_SIZE, w.SIM_CLIENT_INFO_SIZE, w.SIM_PORT_SIZE, w.SIM_VENDOR_SIZE, w.SIM_REQUEST_SIZE) == (
        ctypes.sizeof(CSimCtl), ctypes.sizeof(CSimClientInfo), ctypes.sizeof(CSimPort),
        ctypes.sizeof(CSimVendor), ctypes.sizeof(CSimRequest))
    assert w.SIM_REQUEST_SIZE == 288 and w.SIM_CTL_SIZE == 80


def test_ctl_round_trip_and_c_layout():
    info = w.SimClientInfo(id=4242, qp=0, issm=1, nodeid="Hca1")
    ctl = w.SimCtl(type=w.CtlType.CONNECT, clientid=3, len=w.SIM_CLIENT_INFO_SIZE, data=info.encode())
    raw = ctl.encode()
    c = CSimCtl.from_buffer_copy(raw)
    assert (c.magic, c.clientid, c.type, c.len) == (0xDEADBEEF, 3, 1, 44)
    ci = CSimClientInfo.from_buffer_copy(raw[16:16 + 44])
    assert (ci.id, ci.qp, ci.issm, ci.nodeid) == (4242, 0, 1, b"Hca1")
    back = w.SimCtl.decode(raw)
    assert back.magic_ok and back.type_name == "CONNECT"
    assert w.SimClientInfo.decode(back.data) == info
    assert raw[:4] == bytes.fromhex("efbeadde")  # host (little-endian) order


def test_ctl_reply_and_bad_magic():
    ctl = w.SimCtl(type=w.CtlType.GET_PORT, clientid=1)
    rep = ctl.reply(w.SimPort(lid=7, state=4).encode())
    assert rep.type == w.CtlType.GET_PORT and w.SimPort.decode(rep.data) == w.SimPort(7, 4)
    assert ctl.reply(error=True).type == w.CtlType.ERROR
    bad = w.SimCtl.decode(w.SimCtl(type=1, magic=0x12345678).encode())
    assert not bad.magic_ok
    assert w.SimCtl(type=99).type_name == "type 99"


def test_vendor_and_port_c_layout():
    v = w.SimVendor(vendor_id=0x2C9, vendor_part_id=0x6282, hw_ver=0xA0, fw_ver=1)
    c = CSimVendor.from_buffer_copy(v.encode())
    assert (c.vendor_id, c.vendor_part_id, c.hw_ver, c.fw_ver) == (0x2C9, 0x6282, 0xA0, 1)
    assert w.SimVendor.decode(v.encode()) == v
    p = CSimPort.from_buffer_copy(w.SimPort(lid=0x1234, state=4).encode())
    assert (p.lid, p.state) == (0x1234, 4)


def test_request_network_order_fields():
    mad = bytes(range(256))
    r = w.SimRequest(dlid=0x0102, slid=0xFFFF, dqp=1, sqp=0, mad=mad, status=110, length=256)
    raw = r.encode()
    assert raw[:32] == bytes.fromhex(
        "01020000" "ffff0000" "00000001" "00000000" "0000006e" "00000000" "0000000000000100")
    assert raw[32:] == mad
    c = CSimRequest.from_buffer_copy(raw)  # the C struct's offsets: length at 24, mad at 32 (network order)
    assert CSimRequest.length.offset == 24 and CSimRequest.mad.offset == 32
    assert c.length == int.from_bytes((256).to_bytes(8, "big"), "little")
    assert c.dlid == int.from_bytes(bytes([1, 2, 0, 0]), "little")  # ntohs() of the low half is 0x0102
    assert w.SimRequest.decode(raw) == r
    short = w.SimRequest.decode(raw[:40])
    assert short.mad == mad[:8] + bytes(248)


def test_errors():
    with pytest.raises(MalformedError):
        w.SimCtl.decode(bytes(81))
    with pytest.raises(TruncatedError):
        w.SimCtl.decode(bytes(79))
    with pytest.raises(TruncatedError):
        w.SimRequest.decode(bytes(31))
    with pytest.raises(MalformedError):
        w.SimRequest.decode(bytes(289))
    with pytest.raises(EncodeError):
        w.SimRequest(dlid=0x10000, slid=0, dqp=0, sqp=0, mad=b"").encode()
    with pytest.raises(EncodeError):
        w.SimClientInfo(id=1, nodeid="x" * 32).encode()
    with pytest.raises(EncodeError):
        w.SimCtl(type=1, data=bytes(65)).encode()


def test_socket_names():
    assert w.ctl_name() == b"\0sim:ctl\0"
    assert w.out_name(3, "x") == b"\0x:out3\0"
    assert w.client_ctl_name(77) == b"\0sim:ctl77\0"
    assert w.client_in_name(77, "b") == b"\0b:in77\0"
