"""The iWARP transport on the simulated fabric: WRITE, READ, SEND (with Invalidate, with Solicited Event),
the MSN/MO of every FPDU against the wire codecs, CRC32c on and off.

The FPDUs are taken from the fabric's frames (a tap) and decoded by ``rdmalab.capture.iwarp``'s
TCP reassembly and ``rdmalab.wire.iwarp``; agreement with tshark is in test_iwarp_tshark.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.fabric import reset_default_fabric
from rdmalab.fabric.iwpair import IwPair
from rdmalab.verbs import enums as e
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.mpa import MPAReqRep
from rdmalab.wire.packet import Packet
from rdmalab.wire.rdmap import (
    OP_READ_REQUEST,
    OP_READ_RESPONSE,
    OP_SEND,
    OP_SEND_INVALIDATE,
    OP_SEND_SE,
    OP_WRITE,
    DDPTagged,
    DDPUntagged,
    RDMAPControl,
    RDMAPUntagged,
    ReadRequest,
)


@pytest.fixture(autouse=True)
def _default_fabric() -> Iterator[None]:
    yield
    reset_default_fabric()


class Frames:
    """Every frame the fabric carries, and the iWARP PDUs in them (reassembled from TCP)."""

    def __init__(self, pair: IwPair) -> None:
        self.frames = pair.frames

    def pdus(self) -> list[Packet]:
        tracker = IwarpTracker()
        out: list[Packet] = []
        for i, f in enumerate(self.frames):
            out.extend(tracker.process(i, decode_ethernet(f)))
        return out

    def fpdus(self) -> list[Packet]:
        return [p for p in self.pdus() if p.get(DDPTagged) is not None or p.get(DDPUntagged) is not None]


def opcode(p: Packet) -> int:
    ctl = p.get(RDMAPControl) or p.get(RDMAPUntagged)
    assert ctl is not None
    return int(ctl.opcode)


def pattern(n: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
@pytest.mark.parametrize("length", [0, 1, 1440, 1441, 10_000])
def test_write_places_every_byte_and_segments_carry_contiguous_tagged_offsets(crc: bool, length: int) -> None:
    pair = IwPair(record=True, crc=crc)
    frames = Frames(pair)
    data = pattern(length, 3)
    pair.a.mr.write(data, length, 0) if length else None
    remote = pair.b.mr.buf + 100
    pair.a.post(e.IBV_WR_RDMA_WRITE, 0, length, wr_id=7, remote=remote, rkey=pair.b.mr.rkey)
    (wc,) = pair.wait(pair.a)
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len) == (7, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE, length)
    pair.run()
    assert pair.b.mr.read(length, 100) == data
    writes = [p for p in frames.fpdus() if opcode(p) == OP_WRITE]
    assert len(writes) == max(1, -(-length // 1440))  # MSS 1460: 1454-byte ULPDUs, 1440 bytes of payload
    to = remote
    for i, p in enumerate(writes):
        ddp = p[DDPTagged]
        assert (ddp.stag, ddp.to, ddp.last) == (pair.b.mr.rkey, to, int(i == len(writes) - 1))
        to += p.payload_length
        if crc:
            assert p.crc_status == "good" and p.crc == p.crc_expected
        else:
            assert p.crc == 0
    assert to == remote + length


@pytest.mark.parametrize("crc_a,crc_b", [(False, False), (True, False), (False, True), (True, True)])
def test_crc_is_used_when_either_side_asks_and_every_fpdu_carries_it(crc_a: bool, crc_b: bool) -> None:
    pair = IwPair(record=True, crc_a=crc_a, crc_b=crc_b)
    frames = Frames(pair)
    pair.a.post(e.IBV_WR_SEND, 0, 100)
    pair.wait(pair.b)
    pair.run()
    want = crc_a or crc_b
    assert pair.a.engine.crc is want and pair.b.engine.crc is want
    mpa = [p for p in frames.pdus() if p.get(DDPTagged) is None and p.get(DDPUntagged) is None]
    fpdus = frames.fpdus()
    assert fpdus
    for p in fpdus:
        if want:
            assert p.crc == p.crc_expected != 0
        else:
            assert p.crc == 0  # the field is there, as zeros (siw_get_trailer ignores it)
    (req, rep) = mpa
    assert req.get(MPAReqRep).crc_flag == crc_a and rep.get(MPAReqRep).crc_flag == want  # the Reply echoes C


@pytest.mark.parametrize("length", [16, 3000, 20_000])
def test_read_response_uses_the_sink_stag_and_to_of_the_request_and_the_total_length(length: int) -> None:
    pair = IwPair(record=True)
    frames = Frames(pair)
    src = pattern(length, 9)
    pair.b.mr.write(src, length, 64)
    pair.a.post(e.IBV_WR_RDMA_READ, 32, length, wr_id=5, remote=pair.b.mr.buf + 64, rkey=pair.b.mr.rkey)
    (wc,) = pair.wait(pair.a)
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len) == (5, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, length)
    assert pair.a.mr.read(length, 32) == src
    fp = frames.fpdus()
    (rr_pkt,) = [p for p in fp if opcode(p) == OP_READ_REQUEST]
    rr = rr_pkt[ReadRequest]
    assert (rr.sink_stag, rr.sink_to, rr.size) == (pair.a.mr.lkey, pair.a.mr.buf + 32, length)
    assert (rr.src_stag, rr.src_to) == (pair.b.mr.rkey, pair.b.mr.buf + 64)
    u = rr_pkt[DDPUntagged]
    assert (u.qn, u.msn, u.mo) == (1, 1, 0)
    resp = [p for p in fp if opcode(p) == OP_READ_RESPONSE]
    to = rr.sink_to
    for p in resp:
        assert p[DDPTagged].stag == rr.sink_stag and p[DDPTagged].to == to
        to += p.payload_length
    assert to - rr.sink_to == length and resp[-1][DDPTagged].last == 1


def test_send_msn_starts_at_1_and_mo_counts_the_bytes_placed() -> None:
    pair = IwPair(record=True, recv_len=8192)
    frames = Frames(pair)
    sizes = [100, 5000, 0, 3000]
    for i, n in enumerate(sizes):
        pair.a.mr.write(pattern(n, i), n, 0) if n else None
        pair.a.post(e.IBV_WR_SEND, 0, n, wr_id=i)
        wcs = pair.wait(pair.b)
        assert [(w.status, w.opcode, w.byte_len) for w in wcs] == [(e.IBV_WC_SUCCESS, e.IBV_WC_RECV, n)]
        assert pair.b.mr.read(n, 0) == pattern(n, i)
    sends = [p for p in frames.fpdus() if opcode(p) == OP_SEND]
    by_msn: dict[int, list[tuple[int, int, int]]] = {}
    for p in sends:
        u = p[DDPUntagged]
        assert u.qn == 0
        by_msn.setdefault(u.msn, []).append((u.mo, p.payload_length, u.last))
    assert sorted(by_msn) == [1, 2, 3, 4]
    for msn, segs in by_msn.items():
        mo = 0
        for i, (seg_mo, n, last) in enumerate(segs):
            assert seg_mo == mo and last == int(i == len(segs) - 1)
            mo += n
        assert mo == sizes[msn - 1]


def test_read_requests_have_their_own_msn_sequence_and_reads_stay_within_ord() -> None:
    pair = IwPair(record=True, ord=2, ird=2)
    frames = Frames(pair)
    pair.b.mr.write(pattern(4000), 4000, 0)
    for i in range(5):
        pair.a.post(e.IBV_WR_RDMA_READ, 8000 + i * 800, 800, wr_id=i, remote=pair.b.mr.buf + i * 800,
                    rkey=pair.b.mr.rkey)
    assert len(pair.a.engine.reads_out) == 2  # ORD 2: the other three wait
    wcs = pair.wait(pair.a, 5)
    assert [w.wr_id for w in wcs] == [0, 1, 2, 3, 4] and all(w.status == e.IBV_WC_SUCCESS for w in wcs)
    assert pair.a.mr.read(4000, 8000) == pattern(4000)
    msns = [p[DDPUntagged].msn for p in frames.fpdus() if opcode(p) == OP_READ_REQUEST]
    assert msns == [1, 2, 3, 4, 5]


def test_completions_stay_in_send_queue_order_a_write_after_a_read_waits() -> None:
    pair = IwPair(record=True)
    pair.a.post(e.IBV_WR_RDMA_READ, 0, 2000, wr_id=1, remote=pair.b.mr.buf, rkey=pair.b.mr.rkey)
    pair.a.post(e.IBV_WR_RDMA_WRITE, 4000, 10, wr_id=2, remote=pair.b.mr.buf + 8000, rkey=pair.b.mr.rkey)
    wcs = pair.wait(pair.a, 2)
    assert [w.wr_id for w in wcs] == [1, 2]


def test_send_with_invalidate_invalidates_the_remote_stag_and_reports_it() -> None:
    pair = IwPair(record=True)
    frames = Frames(pair)
    from rdmalab.verbs.mr import MR

    victim = MR(pair.b.cmid.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    pair.a.post(e.IBV_WR_SEND_WITH_INV, 0, 10, invalidate=victim.rkey)
    (wc,) = pair.wait(pair.b)
    assert wc.status == e.IBV_WC_SUCCESS and wc.wc_flags & e.IBV_WC_WITH_INV
    assert wc.invalidated_rkey == victim.rkey and not victim.valid
    (p,) = [p for p in frames.fpdus() if opcode(p) == OP_SEND_INVALIDATE]
    assert p[RDMAPUntagged].inval_stag == victim.rkey
    # a WRITE to the invalidated STag is refused with a Terminate
    pair.a.post(e.IBV_WR_RDMA_WRITE, 0, 8, remote=victim.buf, rkey=victim.rkey)
    pair.wait(pair.a)
    pair.run()
    assert pair.b.engine.terminate_sent is not None
    assert pair.b.engine.terminate_sent[:3] == (1, 1, 0x00)  # DDP, tagged buffer, invalid STag
    assert pair.a.engine.terminate_received == (1, 1, 0x00)
    assert pair.a.qp.qp_state == e.IBV_QPS_ERR and pair.b.qp.qp_state == e.IBV_QPS_ERR


def test_solicited_event_goes_on_the_wire_as_send_with_se() -> None:
    pair = IwPair(record=True)
    frames = Frames(pair)
    pair.a.post(e.IBV_WR_SEND, 0, 10, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED, wr_id=3)
    (wc,) = pair.wait(pair.b)
    assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 10
    (p,) = [p for p in frames.fpdus() if opcode(p) in (OP_SEND, OP_SEND_SE)]
    assert opcode(p) == OP_SEND_SE


def test_private_data_of_request_passes_unchanged() -> None:
    pair = IwPair(record=True, private_data=b"\x01rping-info\xff")
    assert pair.request_private_data == b"\x01rping-info\xff"
