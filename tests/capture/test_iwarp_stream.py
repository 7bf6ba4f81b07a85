"""IwarpTracker: TCP reassembly of MPA frames and FPDUs, re-segmented vector streams, resync."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.iwarp import decode_mpa_frame, encode_fpdus, encode_mpa_frame, rdma_write, read_request, send
from rdmalab.wire.net import IPPROTO_TCP, TCP, Ethernet, IPv4
from rdmalab.wire.packet import Packet

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
CRC_PCAP = CAPTURES / "synthetic_iwarp_mpa_crc.pcap"
MARKERS_PCAP = CAPTURES / "synthetic_iwarp_mpa_markers.pcap"
needs_vectors = pytest.mark.skipif(not CRC_PCAP.exists(), reason=f"iWARP vector pcaps not found in {CAPTURES}")

A = ("10.0.0.1", 40000)
B = ("10.0.0.2", 33333)


def _ip(text: str) -> int:
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def tcp_frame(src: tuple[str, int], dst: tuple[str, int], seq: int, payload: bytes = b"", flags: int = TCP.ACK) -> bytes:
    tcp = TCP(sport=src[1], dport=dst[1], seq=seq % (1 << 32), ack=0, flags=flags).encode()
    ip = IPv4(total_length=20 + len(tcp) + len(payload), protocol=IPPROTO_TCP, src=_ip(src[0]),
              dst=_ip(dst[0])).with_checksum().encode()
    return Ethernet(dst=2, src=1).encode() + ip + tcp + payload


@dataclass
class Seg:
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    data: bytes
    flags: int = TCP.ACK


def run(segs: list[Seg], tracker: IwarpTracker | None = None) -> list[Packet]:
    tr = tracker or IwarpTracker()
    out: list[Packet] = []
    for n, s in enumerate(segs, start=1):
        out.extend(tr.process(n, decode_ethernet(tcp_frame(s.src, s.dst, s.seq, s.data, s.flags))))
    return out


def signature(pkts: list[Packet]) -> list[tuple[str, str | None, str | None, bytes]]:
    return [(p.summary(), p.crc_status, p.stream.direction, p.data) for p in pkts]


# ---------------------------------------------------------------- vector streams


@dataclass
class Flow:
    isn: dict[int, int]  # sport -> initial sequence number
    streams: dict[int, bytes]  # sport -> bytes sent after the SYN
    ports: tuple[int, int]  # (initiator port, responder port)


def read_flow(path: Path) -> Flow:
    isn: dict[int, int] = {}
    chunks: dict[int, list[tuple[int, bytes]]] = {}
    ports: list[int] = []
    with open(path, "rb") as fh:
        for _, buf in dpkt.pcap.Reader(fh):
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            if tcp.flags & dpkt.tcp.TH_SYN:
                isn[tcp.sport] = tcp.seq
                ports.append(tcp.sport)
            if tcp.data:
                chunks.setdefault(tcp.sport, []).append((tcp.seq, bytes(tcp.data)))
    streams = {}
    for port, cs in chunks.items():
        cs.sort()
        assert cs[0][0] == isn[port] + 1
        streams[port] = b"".join(d for _, d in cs)
    return Flow(isn, streams, (ports[0], ports[1]))


def original_frames(path: Path) -> list[Packet]:
    tr = IwarpTracker()
    out = []
    with open(path, "rb") as fh:
        for n, (_, buf) in enumerate(dpkt.pcap.Reader(fh), start=1):
            out.extend(tr.process(n, decode_ethernet(buf)))
    return out


def resegment(flow: Flow, cuts: list[int], *, syn: bool = True, skip: dict[int, int] | None = None,
              interleave_seed: int = 0, duplicate_every: int = 0) -> list[Seg]:
    """Cut each direction's stream into segments of the given sizes (cycled), interleaved so
    that each side's bytes stay in order and the MPA Reply precedes the initiator's FPDUs."""
    init_port, resp_port = flow.ports
    addr = {init_port: A, resp_port: B}
    peer = {init_port: B, resp_port: A}
    per_dir: dict[int, list[Seg]] = {}
    for port in (init_port, resp_port):
        data = flow.streams[port]
        start = (skip or {}).get(port, 0)
        pos = start
        segs = []
        k = 0
        while pos < len(data):
            n = max(1, cuts[k % len(cuts)])
            k += 1
            segs.append(Seg(addr[port], peer[port], flow.isn[port] + 1 + pos, data[pos : pos + n]))
            pos += n
        per_dir[port] = segs
    out: list[Seg] = []
    if syn:
        out.append(Seg(A, B, flow.isn[init_port], b"", TCP.SYN))
        out.append(Seg(B, A, flow.isn[resp_port], b"", TCP.SYN | TCP.ACK))
    rng = random.Random(interleave_seed)
    ia, ib_ = per_dir[init_port], per_dir[resp_port]
    while ia or ib_:
        pick_a = bool(ia) and (not ib_ or rng.random() < 0.5)
        seg = ia.pop(0) if pick_a else ib_.pop(0)
        out.append(seg)
        if duplicate_every and len(out) % duplicate_every == 0:
            out.append(Seg(seg.src, seg.dst, seg.seq, seg.data))  # a retransmission
    return out


@needs_vectors
@pytest.mark.parametrize("path", [CRC_PCAP, MARKERS_PCAP], ids=["crc", "markers"])
def test_vector_pcap_through_tracker(path: Path) -> None:
    pkts = original_frames(path)
    kinds = [p.summary().split(" QN")[0].split(" STag")[0] for p in pkts]
    if path == CRC_PCAP:
        assert [p.stream.frame for p in pkts] == list(range(4, 17))
        assert [p.crc_status for p in pkts[2:]] == ["good"] * 10 + ["bad"]
        assert kinds[:2] == ["MPA Request Rev 2 [C] IRD=16 ORD=16 RTR[P2P Write] private_data=5",
                             "MPA Reply Rev 2 [C] IRD=16 ORD=16 RTR[P2P Write]"]
        assert [p.stream.direction for p in pkts[:4]] == ["initiator", "responder", "initiator", "initiator"]
    else:
        assert [p.stream.frame for p in pkts] == list(range(4, 10))
        assert all(p.crc_status == "good" for p in pkts[2:])
        assert [len(p.markers) for p in pkts[2:]] == [1, 1, 0, 1]
    assert all(not p.problems for p in pkts)
    assert all(p.stream.tuple4[1] in (40000, 40001, 33333, 33334) for p in pkts)


def _by_direction(pkts: list[Packet]) -> dict[str | None, list[tuple[str, str | None, str | None, bytes]]]:
    out: dict[str | None, list[tuple[str, str | None, str | None, bytes]]] = {}
    for s in signature(pkts):
        out.setdefault(s[2], []).append(s)
    return out


@needs_vectors
@pytest.mark.parametrize("path", [CRC_PCAP, MARKERS_PCAP], ids=["crc", "markers"])
@pytest.mark.parametrize("cuts", [[1], [3, 7, 2], [5000], [13, 1460, 1]], ids=["bytewise", "small", "coalesced", "mixed"])
def test_resegmented_streams_decode_the_same(path: Path, cuts: list[int]) -> None:
    ref = _by_direction(original_frames(path))
    flow = read_flow(path)
    got = _by_direction(run(resegment(flow, cuts, interleave_seed=len(cuts), duplicate_every=3)))
    assert got == ref


@needs_vectors
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(1, 400), min_size=1, max_size=8), seed=st.integers(0, 1000),
       dup=st.integers(0, 5), swap=st.booleans(), markers=st.booleans())
def test_random_resegmentation_reorder_and_duplicates(cuts: list[int], seed: int, dup: int, swap: bool,
                                                      markers: bool) -> None:
    path = MARKERS_PCAP if markers else CRC_PCAP
    ref = _by_direction(original_frames(path))
    segs = resegment(read_flow(path), cuts, interleave_seed=seed, duplicate_every=dup)
    if swap:  # deliver some neighbouring segments of the same direction out of order
        rng = random.Random(seed)
        for _ in range(len(segs) // 3):
            i = rng.randrange(2, max(3, len(segs) - 1))
            if i + 1 < len(segs) and segs[i].src == segs[i + 1].src:
                segs[i], segs[i + 1] = segs[i + 1], segs[i]
        # a segment past a hole that proves an FPDU start is decoded at once (capture order, as
        # tshark does); the late segment then completes its own FPDUs: the same PDUs, in arrival order
        got = _by_direction(run(segs))
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in ref.items()}
        return
    assert _by_direction(run(segs)) == ref


@needs_vectors
def test_mid_stream_crc_vector_resyncs() -> None:
    """No handshake, no MPA frames, and the capture starts inside an FPDU in each direction."""
    flow = read_flow(CRC_PCAP)
    ref = _by_direction(original_frames(CRC_PCAP))
    init, resp = flow.ports
    mpa_req, mpa_rep = 20 + 9, 20 + 4
    segs = resegment(flow, [37, 5, 100], syn=False, skip={init: mpa_req + 7, resp: mpa_rep + 3})
    got = _by_direction(run(segs))
    # the first (cut) FPDU of each direction is lost; all later ones are found, bad CRC included
    want_init = [s[:2] + s[3:] for s in ref["initiator"][2:]]
    want_resp = [s[:2] + s[3:] for s in ref["responder"][2:]]
    assert sorted(s[:2] + s[3:] for s in got[None]) == sorted(want_init + want_resp)
    assert got[None][-1][1] == "bad"  # the bad-CRC FPDU is still found (and reported bad)


@needs_vectors
def test_mid_stream_markers_vector_resyncs() -> None:
    flow = read_flow(MARKERS_PCAP)
    ref = original_frames(MARKERS_PCAP)
    init, resp = flow.ports
    segs = resegment(flow, [64], syn=False, skip={init: 20 + 100, resp: 20})
    got = run(segs)
    assert [(p.summary(), p.crc_status, p.data) for p in got] == [(p.summary(), p.crc_status, p.data)
                                                                    for p in ref[3:]]
    assert all(p.stream.resync and p.markers is not None for p in got)


@needs_vectors
def test_mid_stream_with_mpa_frames_but_no_handshake() -> None:
    flow = read_flow(CRC_PCAP)
    ref = _by_direction(original_frames(CRC_PCAP))
    assert _by_direction(run(resegment(flow, [50], syn=False))) == ref


# ---------------------------------------------------------------- generated streams


def _generated_stream(markers: bool, n: int, seed: int) -> tuple[bytes, bytes, list[bytes]]:
    rng = random.Random(seed)
    req = encode_mpa_frame(markers=markers, crc=True)
    rep = encode_mpa_frame(reply=True, markers=markers, crc=True)
    ulpdus = []
    for i in range(n):
        size = rng.choice([0, 1, 17, 300, 511, 512, 1400, 3000])
        payload = bytes(rng.randrange(256) for _ in range(size))
        ulpdus.append(rng.choice([send(payload, msn=i + 1), rdma_write(i, i * 8, payload),
                                  read_request(1, 2, 3, 4, 5, msn=i + 1)]))
    return req, rep, ulpdus


@pytest.mark.parametrize("markers", [False, True])
def test_long_generated_stream_with_markers(markers: bool) -> None:
    req, rep, ulpdus = _generated_stream(markers, 60, 7)
    # the responder wants markers only if it set M in its Reply; the initiator sends them then
    fpdus = encode_fpdus(ulpdus, markers=markers)
    flow = Flow({40000: 1000, 33333: 5000}, {40000: req + fpdus, 33333: rep}, (40000, 33333))
    segs = resegment(flow, [1460, 999, 17])
    # put the Reply before any initiator FPDU (a real initiator waits for it)
    segs.sort(key=lambda s: 0 if s.data[:3] == b"MPA" or not s.data else 1)
    got = run(segs)
    fp = [p for p in got if p.stream.direction == "initiator"][1:]
    assert len(fp) == len(ulpdus)
    assert all(p.crc_status == "good" and not p.problems for p in fp)
    assert [p.data[2 : 2 + len(u)] for p, u in zip(fp, ulpdus, strict=True)] == ulpdus
    if markers:
        assert sum(len(p.markers) for p in fp) >= len(fpdus) // 512


def test_markers_negotiated_one_way_follow_rfc() -> None:
    """M in the Reply means the responder wants markers: only the initiator sends them."""
    req = encode_mpa_frame(markers=False)
    rep = encode_mpa_frame(reply=True, markers=True)
    init_fpdus = encode_fpdus([send(b"x" * 700, msn=i) for i in range(1, 4)], markers=True)
    resp_fpdus = encode_fpdus([send(b"y" * 700, msn=i) for i in range(1, 4)], markers=False)
    flow = Flow({40000: 1, 33333: 9}, {40000: req + init_fpdus, 33333: rep + resp_fpdus}, (40000, 33333))
    segs = resegment(flow, [1460])
    segs.sort(key=lambda s: 0 if s.data[:3] == b"MPA" or not s.data else 1)
    got = [p for p in run(segs) if "Send" in p.summary()]
    assert len(got) == 6 and all(p.crc_status == "good" and not p.problems for p in got)


def test_lost_segment_resyncs_after_the_gap() -> None:
    req = encode_mpa_frame()
    rep = encode_mpa_frame(reply=True)
    ulpdus = [send(bytes([i]) * 200, msn=i + 1) for i in range(30)]
    fpdus = encode_fpdus(ulpdus)
    flow = Flow({40000: 100, 33333: 200}, {40000: req + fpdus, 33333: rep}, (40000, 33333))
    segs = resegment(flow, [500])
    segs.sort(key=lambda s: 0 if s.data[:3] == b"MPA" or not s.data else 1)
    lost = next(i for i, s in enumerate(segs) if s.src == A and s.data[:3] != b"MPA" and s.seq > 100 + 2000)
    del segs[lost]
    got = run(segs, IwarpTracker(max_pending_bytes=3000))
    sends = [p for p in got if "Send" in p.summary()]
    assert all(p.crc_status == "good" for p in sends)
    assert 20 <= len(sends) < 30
    assert sends[-1].payload == bytes([29]) * 200
    assert any(p.stream.resync for p in sends)


# ---------------------------------------------------------------- not iWARP


def test_non_iwarp_flow_with_handshake_is_dropped_at_once() -> None:
    tr = IwarpTracker()
    segs = [Seg(A, B, 10, b"", TCP.SYN), Seg(B, A, 99, b"", TCP.SYN | TCP.ACK),
            Seg(A, B, 11, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Seg(B, A, 100, b"HTTP/1.1 200 OK\r\n" * 50)]
    assert run(segs, tr) == []
    conn = next(iter(tr._conns.values()))
    assert conn.dead and not conn.dirs


def test_random_mid_stream_flow_is_given_up_and_cheap() -> None:
    rng = random.Random(1)
    tr = IwarpTracker(give_up_bytes=64 * 1024)
    segs = [Seg(A, B, 1000 + i * 1460, bytes(rng.randrange(256) for _ in range(1460))) for i in range(200)]
    frames = [decode_ethernet(tcp_frame(s.src, s.dst, s.seq, s.data)) for s in segs]
    t0 = time.perf_counter()
    out = []
    for n, f in enumerate(frames, start=1):
        out.extend(tr.process(n, f))
    elapsed = time.perf_counter() - t0
    assert out == []
    conn = next(iter(tr._conns.values()))
    assert conn.dead and not conn.dirs  # given up: later frames cost one dict lookup
    assert elapsed < 5.0, elapsed


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=600), min_size=1, max_size=20), st.booleans())
def test_fuzz_tracker_never_raises(chunks: list[bytes], syn: bool) -> None:
    segs = [Seg(A, B, 5, b"", TCP.SYN)] if syn else []
    seq = 6
    for c in chunks:
        segs.append(Seg(A, B, seq, c))
        seq += len(c)
    run(segs)


def test_memory_bounded_connections() -> None:
    tr = IwarpTracker(max_connections=10)
    for i in range(50):
        tr.process(i, decode_ethernet(tcp_frame(("10.1.0.1", 1000 + i), B, 1, b"MPA ID Re")))
    assert tr.connections() == 10


def test_ipv6_and_non_tcp_frames() -> None:
    tr = IwarpTracker()
    udp_like = decode_ethernet(Ethernet(dst=2, src=1, ethertype=0x0806).encode() + bytes(28))
    assert tr.process(1, udp_like) == []


def test_the_same_mpa_frames_again_are_packets_of_their_own() -> None:
    """Connections that send the same MPA Request and Reply (the tracker decodes those bytes once):
    each connection's MPA frames are packets of their own, with their own stream positions, equal
    to what the decoder makes of the bytes; a change to one changes no other."""
    req = encode_mpa_frame(rev=2, private_data=b"pd" * 10, ird=4, ord=4)
    rep = encode_mpa_frame(reply=True, rev=2, private_data=b"ok", ird=4, ord=4)
    segs = []
    for k in range(3):
        a, b = (A[0], A[1] + k), B
        segs += [Seg(a, b, 1000, b"", TCP.SYN), Seg(b, a, 5000, b"", TCP.SYN | TCP.ACK),
                 Seg(a, b, 1001, req), Seg(b, a, 5001, rep)]
    pkts = run(segs)
    assert len(pkts) == 6 and len({id(p) for p in pkts}) == 6
    assert len({id(p.layers) for p in pkts}) == 6 and len({id(p.problems) for p in pkts}) == 6
    want = {True: decode_mpa_frame(req)[0], False: decode_mpa_frame(rep)[0]}
    for k, p in enumerate(pkts):
        ref = want[k % 2 == 0]
        assert (p.summary(), p.data, p.layers, p.private_data) == (ref.summary(), ref.data, ref.layers, ref.private_data)
        assert p.stream is not None and p.stream.tuple4[1] in (A[1] + k // 2, B[1])
        assert p.stream.frames == (4 * (k // 2) + 3 + k % 2,)
    pkts[0].layers.clear()
    pkts[0].problems.append(ValueError("changed"))
    assert pkts[2].layers and not pkts[2].problems
    assert run(segs)[2].layers == pkts[2].layers
