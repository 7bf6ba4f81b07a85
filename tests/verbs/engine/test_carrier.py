"""The carrier seam: the engine runs on a carrier that is not the simulated fabric.

``ByteCarrier`` below is written against :mod:`rdmalab.verbs.engine.carrier` only: it moves
every packet as a :class:`Datagram` (bytes, ICRC included), keeps its own clock and timers,
and lets the test decide exactly which datagrams are lost or altered.  Nothing here imports
``rdmalab.fabric``.
"""

from __future__ import annotations

import heapq
import ipaddress
from collections.abc import Callable
from typing import Any

import pytest

from rdmalab.fabric.harness import EndpointPair
from rdmalab.verbs import enums as e
from rdmalab.verbs.engine.carrier import Carrier, Datagram, Scheduler, Station, TimerHandle, datagram_from_frame
from rdmalab.verbs.engine.node import SoftDevice
from rdmalab.verbs.engine.packet import Pkt
from rdmalab.verbs.trace import TraceEvent
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.opcodes import OPCODES


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ByteCarrier:
    """A carrier that moves datagrams only, 2 us apart, with a hook deciding each one's fate."""

    mtu = 4096
    burst_ok = False
    tracing = False

    def __init__(self, fate: Callable[[int, Datagram], Datagram | None] = lambda i, d: d) -> None:
        self.devices: dict[str, SoftDevice] = {}
        self.now_ns = 0
        self.fate = fate
        self.sent: list[Datagram] = []
        self.delivered = 0
        self._q: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = 0

    def add(self, name: str, ip: str, mac: int) -> SoftDevice:
        dev = SoftDevice(name, int(ipaddress.IPv4Address(ip)), mac, self, seed=len(self.devices))
        self.devices[name] = dev
        return dev

    @property
    def scheduler(self) -> Scheduler:
        return self

    def _push(self, delay: int, fn: Callable[[Any], None], arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (self.now_ns + delay, self._seq, fn, arg))

    def send(self, src: Station, pkt: Pkt) -> None:
        assert pkt.count == 1  # burst_ok is False, so the engine never hands over a burst
        dgram = pkt.datagram()
        self.sent.append(dgram)
        out = self.fate(len(self.sent) - 1, dgram)
        dst = next((d for d in self.devices.values() if out is not None and out.dst_gid in d.gids), None)
        if out is not None and dst is not None:
            self._push(2000, dst.deliver, out)

    def call_later(self, delay_ns: int, fn: Callable[[Any], None], arg: Any = None) -> TimerHandle:
        h = _Handle()
        self._push(delay_ns, lambda a: None if h.cancelled else fn(a), arg)
        return h

    def resolve_mac(self, gid: int) -> int | None:
        return next((d.mac for d in self.devices.values() if gid in d.gids), None)

    def record(self, event: TraceEvent) -> None:
        raise AssertionError("tracing is off")

    def step(self) -> bool:
        if not self._q:
            return False
        t = self._q[0][0]
        self.now_ns = t
        while self._q and self._q[0][0] == t:
            _, _, fn, arg = heapq.heappop(self._q)
            fn(arg)
        for d in self.devices.values():
            d.flush()
        return True

    def progress(self, done: Callable[[], bool], max_steps: int = 20_000) -> bool:
        for _ in range(max_steps):
            if done() or not self.step():
                break
        return done()

    def run(self, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        n = 0
        while self._q and n < max_events and (until_ns is None or self._q[0][0] <= until_ns):
            self.step()
            n += 1
        return n


def _pair(carrier: ByteCarrier, **kw: Any) -> EndpointPair:
    carrier.add("left", "192.168.7.1", 0x02AA00000001)
    carrier.add("right", "192.168.7.2", 0x02AA00000002)
    return EndpointPair(carrier, path_mtu=e.IBV_MTU_1024, **kw)


def _name(d: Datagram) -> str:
    return OPCODES[d.payload[0]].name


def test_the_fake_carrier_satisfies_the_protocols() -> None:
    c = ByteCarrier()
    dev = c.add("x", "10.1.1.1", 2)
    assert isinstance(c, Carrier) and isinstance(c, Scheduler) and isinstance(dev, Station)


def test_rc_write_and_send_cross_as_datagrams_only() -> None:
    c = ByteCarrier()
    p = _pair(c)
    p.a.mr.write(bytes(range(256)) * 12, 3072)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=3072, remote=100)
    assert [wc.status for wc in p.wait(p.a.cq)] == [e.IBV_WC_SUCCESS]
    assert p.b.mr.read(3072, 100) == bytes(range(256)) * 12
    p.b.recv(length=64)
    p.send(p.a, e.IBV_WR_SEND, length=64, wr_id=7)
    assert p.wait(p.b.cq)[0].byte_len == 64
    names = [_name(d) for d in c.sent]
    assert names[:4] == ["RC RDMA WRITE First", "RC RDMA WRITE Middle", "RC RDMA WRITE Last", "RC Acknowledge"]
    for d in c.sent:  # every datagram is a real RoCEv2 packet: its frame decodes with a good ICRC
        assert d.icrc_ok() and decode_ethernet(d.frame(1, 2)).crc_status == "good"
        assert datagram_from_frame(d.frame(1, 2)) == d


def test_a_lost_datagram_is_retransmitted_after_the_carriers_timer() -> None:
    # the carrier drops the first transmission of the WRITE's middle packet (datagram 1)
    c = ByteCarrier(lambda i, d: None if i == 1 else d)
    p = _pair(c, timeout=10)
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=3072)
    assert [wc.status for wc in p.wait(p.a.cq)] == [e.IBV_WC_SUCCESS]
    psns = [int.from_bytes(d.payload[9:12], "big") - p.a.psn for d in c.sent if _name(d).startswith("RC RDMA")]
    # the responder NAKs the out-of-sequence Last (PSN sequence error), the requester goes back
    assert psns[:3] == [0, 1, 2] and psns[3:] == [1, 2]
    assert p.b.ctx.device.counters["out_of_seq_request"] >= 1


def test_the_ack_timeout_runs_on_the_carriers_clock() -> None:
    # every response is lost until the clock passes 1 ms: only the retransmit timer can recover
    c = ByteCarrier()
    c.fate = lambda i, d: None if _name(d) == "RC Acknowledge" and c.now_ns < 1_000_000 else d
    p = _pair(c, timeout=8)  # 4.096 us * 2^8 = 1.05 ms
    p.send(p.a, e.IBV_WR_RDMA_WRITE, length=100)
    assert [wc.status for wc in p.wait(p.a.cq)] == [e.IBV_WC_SUCCESS]
    assert c.now_ns >= 4096 << 8
    assert sum(_name(d) == "RC RDMA WRITE Only" for d in c.sent) == 2


@pytest.mark.parametrize("change, delivered", [
    (lambda d: d.with_ecn(3), True),  # ECN is masked by the ICRC: a marking switch may set CE
    (lambda d: Datagram(d.payload, d.src_gid, d.dst_gid, d.sport, d.dport, d.ip_id, d.tos, 3, d.df), True),  # TTL
    (lambda d: Datagram(d.payload, d.src_gid, d.dst_gid, d.sport, d.dport, d.ip_id + 1), False),  # IP id: covered
    (lambda d: Datagram(d.payload, d.src_gid, d.dst_gid, d.sport + 1), False),  # UDP source port: covered
])
def test_the_receiver_checks_the_icrc_over_the_covered_fields(change: Callable[[Datagram], Datagram],
                                                               delivered: bool) -> None:
    c = ByteCarrier(lambda i, d: change(d) if i == 0 else d)
    p = _pair(c, timeout=0, retry_cnt=0)
    p.b.recv(length=64)
    p.send(p.a, e.IBV_WR_SEND, length=64)
    c.run()
    assert len(p.b.cq) == int(delivered)
    assert p.b.ctx.device.counters["dropped"] == int(not delivered)


def test_a_sealed_datagram_carries_the_icrc_rxe_would_check() -> None:
    """``Datagram.seal`` (what a carrier uses to build a packet of its own, e.g. with its own IP
    id) must give the ICRC the receiver computes: the IP and UDP lengths it covers count the
    ICRC itself.  Checked three ways: ``icrc_ok``, the wire decoder, and the engine's own frame."""
    c = ByteCarrier(lambda i, d: d)
    p = _pair(c)
    p.b.recv(length=64)
    p.send(p.a, e.IBV_WR_SEND, length=64)
    c.run()
    sent = c.sent[0]
    for ip_id in (sent.ip_id, 0x1234):
        sealed = Datagram.seal(sent.payload[:-4], sent.src_gid, sent.dst_gid, sent.sport, dport=sent.dport,
                               ip_id=ip_id, tos=sent.tos, ttl=sent.ttl, df=sent.df)
        assert sealed.icrc_ok()
        assert decode_ethernet(sealed.frame()).crc_status == "good"
        if ip_id == sent.ip_id:
            assert sealed == sent
    assert Datagram.seal(sent.payload[:-4], sent.src_gid, sent.dst_gid, sent.sport).with_ecn(3).icrc_ok()  # ECN is masked
