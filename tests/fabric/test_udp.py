"""The UDP carrier (rdmalab.fabric.udp): its datagrams against the seam's Datagram, and a live run.

The byte-level tests need nothing.  The live test needs a raw socket (root or CAP_NET_RAW) and
``unshare`` (a private network namespace, so nothing else on the machine sees its port 4791);
it skips, saying which, where those are missing.  The kernel rxe as a peer is in
``tests/live/test_interop.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from rdmalab.fabric import udp
from rdmalab.fabric.udp import ROCEV2_PORT, UdpFabric, decode_datagram, encode_datagram, ib_mtu_for
from rdmalab.verbs.engine.datagram import Datagram
from rdmalab.verbs.engine.packet import Pkt, opcode
from rdmalab.wire.ib import AETH, IETH, RETH, AtomicETH, ImmDt
from rdmalab.wire.opcodes import Op, Pos, Transport

ROOT = Path(__file__).resolve().parents[2]
A, B = 0xFFFF_0A00_0001, 0xFFFF_0A00_0002  # ::ffff:10.0.0.1, ::ffff:10.0.0.2


def _write_first(payload: bytes) -> Pkt:
    p = Pkt(opcode(Transport.RC, Op.RDMA_WRITE, Pos.FIRST), 0x123456, 0x11, A, B, 0xDF94, 0, 0, payload, 0, 0)
    p.reth = RETH(va=0x7F0000001000, r_key=0x1A2B, dma_length=8192)
    return p


@pytest.mark.parametrize("n", [0, 1, 3, 4, 1021])
def test_datagram_is_the_engines_packet_with_our_ip_id(n: int) -> None:
    p = _write_first((bytes(range(256)) * 4)[:n])
    # With IP ID 0 it is byte for byte the engine's own frame (rdmalab.wire.encode_rocev2), less the
    # Ethernet header and the IP header checksum, which the kernel fills in (net/ipv4/raw.c).
    frame = bytearray(p.frame()[14:])
    frame[10:12] = b"\0\0"
    assert encode_datagram(p, 0) == bytes(frame)
    # With our ID: the seam's Datagram of the same fields finds the ICRC right.
    ours = encode_datagram(p, 0xBEEF)
    assert ours[4:6] == b"\xbe\xef" and ours[6] & 0x40  # the ID we chose, DF set
    assert int.from_bytes(ours[22:24], "big") == ROCEV2_PORT
    assert ours[:4] == bytes(frame[:4]) and ours[8:] != bytes(frame[8:])  # same lengths, another ICRC
    assert Datagram(ours[28:], A, B, 0xDF94, ip_id=0xBEEF).icrc_ok()
    assert not Datagram(ours[28:], A, B, 0xDF94, ip_id=0xBEEE).icrc_ok()


def test_decode_checks_the_icrc_over_the_ip_identification() -> None:
    p = Pkt(opcode(Transport.RC, Op.CMP_SWAP, None), 7, 0x12, A, B, 0xF806, 0, 0, b"", 1, 0)
    p.atomic = AtomicETH(va=0x1000, r_key=0x55, swap_add=3, compare=4)
    d = bytearray(encode_datagram(p, 0x1234))
    got = decode_datagram(bytes(d))
    assert got is not None
    assert (got.opcode, got.psn, got.destqp, got.ackreq, got.sport) == (p.opcode, 7, 0x12, 1, 0xF806)
    assert got.atomic == p.atomic and (got.src_gid, got.dst_gid) == (A, B)
    # TTL, TOS and the IP checksum are masked by the ICRC: a router may change them.
    d2 = bytearray(d)
    d2[1], d2[8], d2[10] = 0x02, 17, 0x99
    assert decode_datagram(bytes(d2)) is not None
    # The Identification is not masked: a different ID is a different ICRC, dropped as rxe does.
    d3 = bytearray(d)
    d3[5] ^= 1
    assert decode_datagram(bytes(d3)) is None
    d4 = bytearray(d)
    d4[-1] ^= 0x80
    assert decode_datagram(bytes(d4)) is None


class _Recorder:
    """Stands in for the carrier's raw socket: keeps what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def sendto(self, data: object, addr: tuple[str, int]) -> int:
        b = bytes(data)  # type: ignore[call-overload]
        self.sent.append((b, addr))
        return len(b)


def _bursts() -> list[Pkt]:
    """Bursts and single packets as the engine's requester and responder build them."""
    rc = Transport.RC
    out = []
    w = Pkt(opcode(rc, Op.RDMA_WRITE, Pos.FIRST), 0xFFFFFE, 0x11, A, B, 0xDF94, 0, 0, os.urandom(4 * 1024 + 5), 0, 0)
    w.reth = RETH(va=0x7F0000001000, r_key=0x1A2B, dma_length=4 * 1024 + 5)  # PSNs wrap past 0xFFFFFF
    w.count, w.mtu, w.acks, w.ackreq = 5, 1024, (1, 3), 1
    w.last_opcode = opcode(rc, Op.RDMA_WRITE, Pos.LAST, imm=True)
    w.imm = ImmDt(imm=0xCAFE)
    out.append(w)
    s = Pkt(opcode(rc, Op.SEND, Pos.FIRST), 100, 0x12, A, B, 0xC001, 0, 0, os.urandom(2 * 256 + 1), 0, 1)
    s.count, s.mtu, s.ackreq = 3, 256, 1
    s.last_opcode = opcode(rc, Op.SEND, Pos.LAST, inv=True)
    s.ieth = IETH(r_key=0x4242)
    s.ecn = 2  # ECT(0) from a DCQCN sender
    out.append(s)
    r = Pkt(opcode(rc, Op.RDMA_READ_RESPONSE, Pos.FIRST), 7, 0x13, B, A, 0xC002, 0, 0, os.urandom(2 * 4096), 0, 0)
    r.count, r.mtu, r.aeth = 2, 4096, AETH.ack(5)
    r.last_opcode = opcode(rc, Op.RDMA_READ_RESPONSE, Pos.LAST)
    out.append(r)
    a = Pkt(opcode(rc, Op.ACKNOWLEDGE, None), 9, 0x14, B, A, 0xC003, 0, 0, b"", 0, 0)
    a.aeth = AETH.ack(3)
    out.append(a)
    out.append(Pkt(opcode(Transport.UC, Op.SEND, Pos.ONLY), 1, 0x15, A, B, 0xC004, 0, 0, b"odd", 0, 1))
    return out


def _long_burst() -> Pkt:
    """A WRITE of 150 packets at MTU 256, AckReq on a few, PSNs and IP IDs wrapping."""
    w = Pkt(opcode(Transport.RC, Op.RDMA_WRITE, Pos.FIRST), 0xFFFFC0, 0x16, A, B, 0xC005, 0, 0,
            os.urandom(149 * 256 + 7), 0, 0)
    w.reth = RETH(va=0x1000, r_key=0x77, dma_length=149 * 256 + 7)
    w.count, w.mtu, w.acks, w.ackreq = 150, 256, (0, 63, 64, 100), 1
    w.last_opcode = opcode(Transport.RC, Op.RDMA_WRITE, Pos.LAST)
    return w


@pytest.mark.parametrize("k", range(6))
def test_fast_send_path_puts_the_same_bytes_on_the_wire(k: int) -> None:
    # UdpFabric.send builds bursts and single packets in one reused buffer with the ICRC corrected
    # for the masked fields; every datagram must be encode_datagram's for that packet and that ID.
    pkt = (_bursts() + [_long_burst()])[k]
    fab = UdpFabric.__new__(UdpFabric)
    fab._init_state(seed=k)
    fab._raw = rec = _Recorder()  # type: ignore[assignment]
    fab._ip_id = 0xFFFE  # the ID wraps to 1, never 0 (raw.c would replace a 0)
    fab.send(None, pkt)  # type: ignore[arg-type]
    singles = pkt.expand()
    assert len(rec.sent) == len(singles) == pkt.count == fab.stats["sent"]
    ids = [0xFFFE, 0xFFFF] + [1 + i for i in range(pkt.count)]
    for i, (p, (data, addr)) in enumerate(zip(singles, rec.sent, strict=True)):
        assert data == encode_datagram(p, ids[i]), f"packet {i} of {pkt}"
        back = decode_datagram(data)
        assert back is not None and (back.opcode, back.psn, back.ackreq) == (p.opcode, p.psn, p.ackreq)
        assert addr == (socket.inet_ntoa(data[16:20]), 0)
    assert sum(fab.sent_sizes.values()) == pkt.count
    assert sorted(n for n, c in fab.sent_sizes.items() for _ in range(c)) == sorted(len(d) - 28 for d, _ in rec.sent)


def test_crc_is_zlibs() -> None:
    # the carrier's CRC-32 (zlib-ng's) is zlib's function, also from a running value
    data = os.urandom(5000)
    for cut in (0, 1, 17, 4096):
        assert udp.crc32(data[cut:], udp.crc32(data[:cut])) == zlib.crc32(data)


def test_not_rocev2_is_refused() -> None:
    d = bytearray(encode_datagram(_write_first(b"x" * 8), 1))
    d[22:24] = (4792).to_bytes(2, "big")
    assert decode_datagram(bytes(d)) is None
    assert decode_datagram(b"\x45" + bytes(10)) is None


def test_port_mtu_is_rxes_rule() -> None:
    # rxe.c rxe_set_mtu: netdev MTU - 80, rounded down to an IB MTU
    assert [ib_mtu_for(m) for m in (1500, 9000, 4176, 4175, 300, 65536)] == [1024, 4096, 4096, 2048, 256, 4096]


LIVE = textwrap.dedent("""
    import hashlib, os, subprocess, sys
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    from rdmalab.fabric.udp import UdpFabric
    from rdmalab.verbs import enums as e
    from rdmalab.verbs.addr import AHAttr, GlobalRoute
    from rdmalab.verbs.device import Context
    from rdmalab.fabric.harness import ALL_ACCESS, Endpoint
    from rdmalab.verbs.qp import QPAttr, QPCap
    from rdmalab.verbs.wr import SendWR
    fa = UdpFabric("lo", "127.0.0.1", name="a", poll_wait=0)
    fb = UdpFabric("lo", "127.0.0.2", name="b", poll_wait=0)
    cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
    size = 1 << 18
    A = Endpoint(Context(name="a", fabric=fa), e.IBV_QPT_RC, size, ALL_ACCESS, ALL_ACCESS & ~1, cap, False, 0)
    B = Endpoint(Context(name="b", fabric=fb), e.IBV_QPT_RC, size, ALL_ACCESS, ALL_ACCESS & ~1, cap, False, 0)
    for x, y in ((A, B), (B, A)):
        at = QPAttr(port_num=1, path_mtu=e.IBV_MTU_4096)
        at.qp_access_flags = ALL_ACCESS & ~1
        at.max_dest_rd_atomic = at.max_rd_atomic = 16
        at.min_rnr_timer, at.timeout, at.retry_cnt, at.rnr_retry = 12, 14, 7, 7
        at.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=y.gid, sgid_index=1))
        at.dest_qp_num, at.rq_psn, at.sq_psn = y.qp.qp_num, y.psn, x.psn
        x.qp.to_rts(at)
    data = os.urandom(size // 2)
    A.mr.write(data, len(data))
    def post(opc, wr_id, length, remote, local=0, rkey=None, cmp=0, swap=0):
        wr = SendWR(wr_id=wr_id, opcode=opc, num_sge=1, sg=[A.sge(local, length)], send_flags=e.IBV_SEND_SIGNALED)
        if opc in (e.IBV_WR_ATOMIC_CMP_AND_SWP, e.IBV_WR_ATOMIC_FETCH_AND_ADD):
            wr.set_wr_atomic(B.mr.rkey if rkey is None else rkey, B.mr.buf + remote, cmp, swap)
        else:
            wr.set_wr_rdma(B.mr.rkey if rkey is None else rkey, B.mr.buf + remote)
        A.qp.post_send(wr)
    def wait(n):
        got = []
        for _ in range(200000):
            k, wcs = A.cq.poll(n - len(got))
            got += wcs
            if len(got) >= n:
                return got
            fa.step(0.001); fb.step(0)
        raise SystemExit("timeout")
    post(e.IBV_WR_RDMA_WRITE, 1, len(data), 0)
    assert wait(1)[0].status == 0
    assert B.mr.read(len(data), 0) == data, "WRITE data differs"
    post(e.IBV_WR_RDMA_READ, 2, len(data), 0, local=size // 2)
    assert wait(1)[0].status == 0
    assert A.mr.read(len(data), size // 2) == data, "READ data differs"
    # a SEND of four packets: its MIDDLEs go through the carrier's fast path (SoftDevice.receive_segment)
    n = 3 * 4096 + 100
    B.recv(wr_id=9, offset=size // 2, length=n)
    wr = SendWR(wr_id=6, opcode=e.IBV_WR_SEND, num_sge=1, sg=[A.sge(0, n)], send_flags=e.IBV_SEND_SIGNALED)
    A.qp.post_send(wr)
    assert wait(1)[0].status == 0
    for _ in range(2000):
        k, rwc = B.cq.poll(1)
        if k:
            break
        fb.step(0.001)
    assert k and rwc[0].status == 0 and rwc[0].byte_len == n, rwc
    assert B.mr.read(n, size // 2) == data[:n], "SEND data differs"
    B.mr.write((41).to_bytes(8, "little"), 8, 0)
    post(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 3, 8, 0, local=0, cmp=1)
    post(e.IBV_WR_ATOMIC_CMP_AND_SWP, 4, 8, 0, local=8, cmp=42, swap=7)
    assert [w.status for w in wait(2)] == [0, 0]
    assert int.from_bytes(B.mr.read(8, 0), "little") == 7
    assert int.from_bytes(A.mr.read(8, 0), "little") == 41 and int.from_bytes(A.mr.read(8, 8), "little") == 42
    post(e.IBV_WR_RDMA_WRITE, 5, 64, 0, rkey=B.mr.rkey ^ 0x80)
    w = wait(1)[0]
    assert w.status == e.IBV_WC_REM_ACCESS_ERR, w
    print("OK", fa.stats["sent"], fb.stats["sent"], fa.stats["bad_icrc"] + fb.stats["bad_icrc"])
""")


def test_live_on_loopback_in_a_private_namespace(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private network namespace")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace here (unshare --net: {probe.stderr.decode().strip()})")
    script = tmp_path / "live.py"
    script.write_text(LIVE)
    r = subprocess.run(["unshare", "--net", sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    # 128 KiB each way at 4096 bytes a packet: at least 32 packets sent by each side
    ok, a_sent, b_sent, bad = r.stdout.split()[-4:]
    assert ok == "OK" and int(a_sent) >= 32 and int(b_sent) >= 32 and int(bad) == 0


def test_without_cap_net_raw_the_error_says_what_to_do() -> None:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to drop CAP_NET_RAW")
    r = subprocess.run(["setpriv", "--bounding-set", "-net_raw", sys.executable, "-m", "rdmalab", "pingpong", "rc",
                        "-n", "1", "127.0.0.1"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "CAP_NET_RAW" in r.stderr and "raw socket" in r.stderr


class _RetryStorm:
    """Stands in for the raw socket with rxe as the peer, resending a window of SENDs for ever.

    The peer keeps 128 PSNs in flight (RXE_MAX_UNACKED_PSNS): four-packet SENDs from its oldest
    unacknowledged PSN on, sent again from there as soon as the last window has gone out, and
    advanced by the engine's ACKs (a NAK changes nothing: it is resent anyway).  So the socket
    is never empty, as under rxe's RNR and PSN-sequence retries in the interop VM (an engine
    that NAKs every window gets the next window at once).  ``limit`` reads at most: a carrier
    that never gives control back to its program fails the test instead of hanging it."""

    MTU, WINDOW = 1024, 128

    def __init__(self, qpn: int, psn: int, limit: int) -> None:
        self.qpn, self.base, self.limit = qpn, psn, limit
        self.reads = 0
        self.at = 0  # the next packet of the current window
        self.acks: list[int] = []
        self.rnr_naks = 0
        self.data = [os.urandom(4 * self.MTU) for _ in range(4)]

    def _packet(self, k: int) -> bytes:
        psn = (self.base + k) & 0xFFFFFF
        msg, part = divmod((psn - 0x10) & 0xFFFFFF, 4)  # messages start on PSN 0x10 + 4 m
        pos = (Pos.FIRST, Pos.MIDDLE, Pos.MIDDLE, Pos.LAST)[part]
        payload = self.data[msg % 4][part * self.MTU:(part + 1) * self.MTU]
        p = Pkt(opcode(Transport.RC, Op.SEND, pos), psn, self.qpn, A, B, 0xC123, 0, 0, payload, int(part == 3), 0)
        return encode_datagram(p, 1 + (self.reads & 0x7FFF))

    def recv_into(self, buf: bytearray) -> int:
        self.reads += 1
        if self.reads > self.limit:
            raise AssertionError(f"the carrier read {self.limit} packets in a row without returning to the program")
        d = self._packet(self.at)
        self.at = (self.at + 1) % self.WINDOW
        buf[:len(d)] = d
        return len(d)

    def sendto(self, data: object, addr: tuple[str, int]) -> int:
        b = bytes(data)  # type: ignore[call-overload]
        p = decode_datagram(b)
        assert p is not None and p.aeth is not None
        syndrome = p.aeth.syndrome
        if syndrome >> 5 == 0:  # an ACK: everything up to its PSN arrived; resend from after it
            self.acks.append(p.psn)
            self.base, self.at = (p.psn + 1) & 0xFFFFFF, 0
        elif syndrome >> 5 == 1:
            self.rnr_naks += 1
        return len(b)


def test_a_step_gives_control_back_while_the_peer_keeps_the_socket_full() -> None:
    # ib_send_bw -D against `rdmalab perftest send` (the interop VM): the engine's 512 receives
    # were used up before the program polled, rxe's RNR and sequence retries then kept the raw
    # socket full, and a step that read until the socket was empty never returned, so the program
    # never posted receives again.  A step reads at most RECV_BUDGET packets; the program posts
    # receives between steps, and the SENDs complete.
    from rdmalab.verbs import enums as e
    from rdmalab.verbs.addr import GID, AHAttr, GlobalRoute
    from rdmalab.verbs.cq import CQ
    from rdmalab.verbs.device import Context
    from rdmalab.verbs.engine.node import SoftDevice
    from rdmalab.verbs.mr import MR
    from rdmalab.verbs.pd import PD
    from rdmalab.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from rdmalab.verbs.wr import SGE, RecvWR

    fab = UdpFabric.__new__(UdpFabric)
    fab._init_state(poll_wait=0.0, seed=1)  # CQ.poll runs one step(0) when the CQ is empty
    fab.mtu = 1024
    fab.device = SoftDevice("t", B & 0xFFFFFFFF, 0x020000000002, fab)
    fab.devices = {"t": fab.device}
    ctx = Context(name="t", fabric=fab)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    mr = MR(pd, 4 * 4096, e.IBV_ACCESS_LOCAL_WRITE)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=1, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)))
    a = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
    a.qp_access_flags = 0
    a.dest_qp_num, a.rq_psn, a.sq_psn = 0x42, 0x10, 0x777
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID.from_int(A), sgid_index=1))
    qp.to_rts(a)
    peer = fab._raw = _RetryStorm(qp.qp_num, 0x10, limit=2560)  # type: ignore[assignment]

    # No receive posted yet: each window gets an RNR NAK, and the socket never drains.
    fab.step()
    assert 0 < peer.reads <= udp.RECV_BUDGET and peer.rnr_naks > 0 and cq.poll(1)[0] == 0
    got = []
    for _step in range(19):
        while len(qp.engine.rq) < 4:  # the program keeps four receives posted, one buffer each
            k = len(got) + len(qp.engine.rq)
            qp.post_recv(RecvWR(wr_id=k, num_sge=1, sg=[SGE(mr.buf + (k % 4) * 4096, 4096, mr.lkey)]))
        fab.step()
        n, wcs = cq.poll(16)
        got += wcs
        if len(got) >= 8:
            break
    assert len(got) >= 8, f"{len(got)} receives completed in {peer.reads} packets read"
    assert [w.wr_id for w in got] == list(range(len(got)))
    for w in got:
        assert w.status == e.IBV_WC_SUCCESS and w.byte_len == 4096
        assert mr.read(4096, (w.wr_id % 4) * 4096) == peer.data[w.wr_id % 4]
    assert peer.acks and peer.acks[-1] >= 0x10 + 4 * 8 - 1
