"""IB transport headers: declared layouts, round trips, known answers, bad input."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdmalab.wire import ib
from rdmalab.wire.errors import EncodeError, TruncatedError
from rdmalab.wire.header import Header

HEADERS: list[type[Header]] = [
    ib.LRH, ib.GRH, ib.BTH, ib.RDETH, ib.DETH, ib.RETH, ib.AtomicETH, ib.AETH,
    ib.AtomicAckETH, ib.ImmDt, ib.IETH, ib.XRCETH, ib.FETH, ib.CNPPad,
]
SIZES = {
    "LRH": 8, "GRH": 40, "BTH": 12, "RDETH": 4, "DETH": 8, "RETH": 16, "AtomicETH": 28, "AETH": 4,
    "AtomicAckETH": 8, "ImmDt": 4, "IETH": 4, "XRCETH": 4, "FETH": 4, "CNP": 16,
}


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: c.__name__)
def test_sizes_match_the_spec(cls: type[Header]) -> None:
    # Sizes from IBA Vol 1 9.3 / Linux include/rdma/ib_pack.h
    assert cls.LAYOUT.size == SIZES[cls.LAYOUT.name]
    assert "IBA" in cls.LAYOUT.spec


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_bytes(cls: type[Header], data: st.DataObject) -> None:
    raw = data.draw(st.binary(min_size=cls.LAYOUT.size, max_size=cls.LAYOUT.size))
    h = cls.decode(raw)
    assert h.encode() == raw
    assert cls.decode(h.encode()) == h


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_values(cls: type[Header], data: st.DataObject) -> None:
    values = {f.name: data.draw(st.integers(0, f.mask)) for f in cls.LAYOUT.fields}
    h = cls(**values)
    assert cls.decode(h.encode()).values() == values


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: c.__name__)
def test_spans_cover_the_header_exactly(cls: type[Header]) -> None:
    h = cls()
    spans = h.spans(offset=100)
    bits = sum(s.bits for s in spans)
    assert bits == cls.LAYOUT.size * 8
    assert spans[0].start == 100 and spans[-1].end == 100 + cls.LAYOUT.size


def test_bth_known_answer() -> None:
    # scapy roce.uts "RoCE CNP captured on ConnectX-4 Lx": BTH 81 00 ffff 40 000118 00 000000
    bth = ib.BTH.decode(bytes.fromhex("8100ffff4000011800000000"))
    assert (bth.opcode, bth.p_key, bth.becn, bth.fecn, bth.destqp, bth.psn) == (0x81, 0xFFFF, 1, 0, 0x118, 0)
    b = ib.BTH(opcode=0x0A, se=1, padcnt=3, p_key=0x8001, fecn=1, destqp=0xABCDEF, ackreq=1, psn=0xFFFFFF)
    assert b.encode().hex() == "0ab08001 80abcdef 80ffffff".replace(" ", "")


def test_aeth_syndromes() -> None:
    # IBA Vol 1 9.3.5 table 44; Wireshark example: 0x2E = RNR NAK, timer 14 = 1.28 ms
    rnr = ib.AETH.decode(bytes.fromhex("2e000005"))
    assert rnr.is_rnr_nak and rnr.value == 14 and rnr.rnr_timer_ms == 1.28 and rnr.msn == 5
    assert rnr.syndrome == 0x2E
    nak = ib.AETH.decode(bytes.fromhex("62000001"))
    assert nak.is_nak and nak.nak_name == "Remote Access Error"
    ack = ib.AETH.ack(msn=7, credits=8)
    assert ack.credits == 16 and ack.encode() == bytes.fromhex("08000007")
    assert ib.AETH.ack(1).credits is None  # code 31: no end-to-end credits
    assert ib.rnr_timer_ms(0) == 655.36
    assert ib.AETH.decode(bytes.fromhex("40000000")).check() != []  # reserved type 2


def test_ws_fields_use_wireshark_names() -> None:
    reth = ib.RETH(va=0x1000, r_key=0x42, dma_length=64)
    assert reth.ws_fields() == {"infiniband.reth.va": 0x1000, "infiniband.reth.r_key": 0x42, "infiniband.reth.dmalen": 64}
    aeth = ib.AETH.rnr_nak(msn=3, timer=14)
    assert aeth.ws_fields()["infiniband.aeth.syndrome"] == 0x2E
    assert aeth.ws_fields()["infiniband.aeth.syndrome.timer"] == 14


def test_truncated_header_names_layer_and_offset() -> None:
    with pytest.raises(TruncatedError) as e:
        ib.RETH.decode(b"\x00" * 20, offset=10)
    err = e.value
    assert err.layer == "RETH" and err.offset == 10 and err.value == 10
    assert "RETH" in str(err) and "byte 10" in str(err) and "16 bytes" in str(err)


def test_encode_rejects_out_of_range_values() -> None:
    with pytest.raises(EncodeError) as e:
        ib.BTH(psn=1 << 24).encode()
    assert "BTH.psn" in str(e.value) and "24 bits" in str(e.value)
    with pytest.raises(EncodeError):
        ib.BTH(destqp=-1).encode()


def test_headers_are_frozen() -> None:
    b = ib.BTH()
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.psn = 3  # type: ignore[misc]
    assert b.replace(psn=3).psn == 3
