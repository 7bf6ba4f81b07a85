"""The TCP segments of the columnar summary lines are fed to the window scaling and the iWARP tracker
a block at a time (TcpWindowScaling.update_many, IwarpTracker.process_many): the same lines as the
per-packet path (``--no-columnar``) and the same tracker state as one segment at a time, on
captures made for what the state carries across segments: window scaling across blocks, SYNs that
reuse a 4-tuple, connections dropped at ``max_connections``, keep-alives and holes (FPDU
resynchronisation)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import dpkt
import numpy as np
import pytest

from rdmalab.capture import columnar_summary as cs
from rdmalab.capture import read
from rdmalab.capture.columnar_decode import decode_block
from rdmalab.capture.columnar_summary import summary_bytes
from rdmalab.capture.columnar_tcp import TCP_FIELDS, clean_tcp
from rdmalab.capture.iwarp import IwarpTracker
from rdmalab.capture.pcapio import record_blocks
from rdmalab.cli import main
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.iwarp import decode_fpdu
from rdmalab.wire.net import TCP

ROOT = Path(__file__).resolve().parents[2]
CAPS = ROOT / "captures"


def _records(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    data = path.read_bytes()
    out, pos = [], 24
    while pos < len(data):
        cap = struct.unpack_from("<I", data, pos + 8)[0]
        out.append((data[pos:pos + 16], data[pos + 16:pos + 16 + cap]))
        pos += 16 + cap
    return data[:24], out


def _write(path: Path, head: bytes, recs: list[tuple[bytes, bytes]]) -> Path:
    body = b"".join(h[:8] + struct.pack("<II", len(d), len(d)) + d for h, d in recs)
    path.write_bytes(head + body)
    return path


def _tcp(d: bytes) -> dpkt.tcp.TCP | None:
    eth = dpkt.ethernet.Ethernet(d)
    ip = eth.data
    return ip.data if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) else None


def _rebuild(d: bytes, **changes: Any) -> bytes:
    """The frame with TCP fields changed (checksums and lengths made right again)."""
    eth = dpkt.ethernet.Ethernet(d)
    ip, tcp = eth.data, eth.data.data
    for k, v in changes.items():
        setattr(tcp, k, v)
    tcp.sum = 0
    ip.len = 20 + len(bytes(tcp))
    ip.sum = 0
    ip.data = tcp
    return bytes(eth)


def _ports(recs: list[tuple[bytes, bytes]], shift: int) -> list[tuple[bytes, bytes]]:
    """The capture with its TCP ports moved by ``shift`` (other connections, the same streams)."""
    out = []
    for h, d in recs:
        t = _tcp(d)
        out.append((h, d if t is None else _rebuild(d, sport=t.sport + shift, dport=t.dport + shift)))
    return out


def _compare(path: Path, capsys: Any, block_bytes: int) -> str:
    """The columnar lines (blocks of ``block_bytes``) against the per-packet path's."""
    fast = b"".join(summary_bytes(path, block_bytes=block_bytes)).decode()
    assert main(["decode", "--no-columnar", "-r", str(path)]) == 0
    ref = capsys.readouterr().out
    assert fast == ref
    return fast


def test_window_scaling_across_blocks(tmp_path: Path, capsys: Any) -> None:
    """Handshakes in one block, the segments they scale in later ones (blocks of a few records)."""
    for name in ("rxe_rc_pingpong.pcap", "siw_write_bw.pcap"):
        head, recs = _records(CAPS / name)
        p = _write(tmp_path / name, head, recs)
        text = _compare(p, capsys, 600)
        shown = {int(line.split()[0]): int(line.split(" Win=")[1].split()[0]) for line in text.splitlines()
                 if " Win=" in line}
        raw = {i: t.win for i, (_h, d) in enumerate(recs, 1) if (t := _tcp(d)) is not None}
        assert sum(shown[i] != raw[i] for i in shown) > 3, name  # windows were scaled: the case is one


def test_syns_reuse_a_4tuple(tmp_path: Path, capsys: Any) -> None:
    """The same connections opened again (a capture appended to itself: the same 4-tuples, new
    SYNs that reset each direction's window scaling and iWARP stream), in one block and across blocks."""
    head, recs = _records(CAPS / "siw_write_bw.pcap")
    _h, rc = _records(CAPS / "rxe_rc_pingpong.pcap")
    p = _write(tmp_path / "again.pcap", head, recs + rc + recs + rc)
    for block in (600, 4 << 20):
        text = _compare(p, capsys, block)
        assert text.count(" iWARP ") > 10


def _interleave(copies: list[list[tuple[bytes, bytes]]], rng: np.random.Generator) -> list[tuple[bytes, bytes]]:
    """The records of several captures, a few of one then a few of another, each in its order."""
    mixed: list[tuple[bytes, bytes]] = []
    at = [0] * len(copies)
    while any(a < len(c) for a, c in zip(at, copies, strict=True)):
        k = int(rng.integers(len(copies)))
        step = int(rng.integers(1, 6))
        mixed += copies[k][at[k]:at[k] + step]
        at[k] += step
    return mixed


def test_connections_dropped_at_max_connections(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """Six copies of an iWARP capture on other ports, their records interleaved, and a tracker
    that keeps two connections: which one it drops depends on the order of use."""
    monkeypatch.setitem(IwarpTracker.__init__.__kwdefaults__, "max_connections", 2)
    head, recs = _records(CAPS / "siw_crc_rping.pcap")
    mixed = _interleave([_ports(recs, 100 * k) for k in range(6)], np.random.default_rng(5))
    p = _write(tmp_path / "many.pcap", head, mixed)
    for block in (900, 4 << 20):
        _compare(p, capsys, block)
    monkeypatch.setitem(IwarpTracker.__init__.__kwdefaults__, "max_connections", 1024)
    kept = _compare(p, capsys, 4 << 20)
    monkeypatch.setitem(IwarpTracker.__init__.__kwdefaults__, "max_connections", 2)
    dropped = _compare(p, capsys, 4 << 20)
    assert kept.count(" iWARP ") > dropped.count(" iWARP ")  # connections were dropped (the case is one)


def _keepalive_and_hole(recs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A keep-alive (one octet below the next sequence number: RFC 1122 4.2.3.6) after a data
    segment of each direction, and a data segment of each direction lost (a hole in the stream)."""
    out: list[tuple[bytes, bytes]] = []
    data_seen: dict[tuple[int, int], int] = {}
    for h, d in recs:
        t = _tcp(d)
        key = (t.sport, t.dport) if t is not None else (0, 0)
        if t is not None and len(t.data) > 0:
            data_seen[key] = data_seen.get(key, 0) + 1
            if data_seen[key] == 8:
                continue  # lost
        out.append((h, d))
        if t is not None and len(t.data) > 0 and data_seen[key] == 5:
            out.append((h, _rebuild(d, seq=(t.seq + len(t.data) - 1) % (1 << 32), data=t.data[-1:])))
    return out


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_rping.pcap", "siw_read_bw.pcap"])
def test_keepalive_and_hole(name: str, tmp_path: Path, capsys: Any) -> None:
    head, recs = _records(CAPS / name)
    p = _write(tmp_path / name, head, _keepalive_and_hole(recs))
    for block in (700, 4 << 20):
        text = _compare(p, capsys, block)
        assert " iWARP " in text
    assert main(["decode", "-r", str(_write(tmp_path / "whole.pcap", head, recs))]) == 0
    whole = capsys.readouterr().out
    assert whole.count(" iWARP ") > text.count(" iWARP ")  # the hole lost PDUs: the case is one


def _split(recs: list[tuple[bytes, bytes]], rng: np.random.Generator) -> list[tuple[bytes, bytes]]:
    """Data segments cut in two at a random octet (as TCP may cut an FPDU anywhere): the first part
    one or more FPDUs and the start of another, or the start of one (its header, or only one octet
    of it), the second the rest; now and then the second a few octets off in sequence, or with SYN
    or RST set."""
    out: list[tuple[bytes, bytes]] = []
    for h, d in recs:
        t = _tcp(d)
        if t is None or len(t.data) < 2 or rng.random() < 0.4:
            out.append((h, d))
            continue
        cut = 1 if rng.random() < 0.1 else int(rng.integers(1, len(t.data)))
        out.append((h, _rebuild(d, data=t.data[:cut])))
        seq, flags, how = t.seq + cut, t.flags, rng.random()
        if how < 0.15:
            seq += int(rng.integers(1, 5))
        elif how < 0.25:
            flags |= dpkt.tcp.TH_SYN if how < 0.2 else dpkt.tcp.TH_RST
        out.append((h, _rebuild(d, seq=seq % (1 << 32), flags=flags, data=t.data[cut:])))
    return out


def _coalesce(recs: list[tuple[bytes, bytes]], rng: np.random.Generator) -> list[tuple[bytes, bytes]]:
    """Data segments joined with the next of their direction that follows in sequence (its record
    dropped), as a sender that coalesces writes sends them: segments of several FPDUs."""
    out = list(recs)
    i = 0
    while i < len(out):
        t = _tcp(out[i][1])
        if t is not None and t.data and rng.random() < 0.5:
            key = (t.sport, t.dport)
            j = next((j for j in range(i + 1, len(out)) if (u := _tcp(out[j][1])) is not None
                      and (u.sport, u.dport) == key and u.data), None)
            u = _tcp(out[j][1]) if j is not None else None
            if j is not None and u is not None and u.seq == (t.seq + len(t.data)) % (1 << 32) and not u.flags & 7:
                out[i] = (out[i][0], _rebuild(out[i][1], data=t.data + u.data))
                del out[j]
        i += 1
    return out


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_send_bw.pcap", "siw_crc_rping.pcap", "siw_read_bw.pcap"])
def test_fpdus_cut_anywhere(name: str, tmp_path: Path, capsys: Any) -> None:
    """Segments of several FPDUs, and FPDUs cut in two by TCP anywhere (the FPDU lane takes such
    pairs at once): the lines of the columnar path against the per-packet path's, in small and large
    blocks, and the tracker's process_many against process_segment one by one."""
    head, recs = _records(CAPS / name)
    rng = np.random.default_rng(3)
    cut = _split(_coalesce(recs, rng), rng)
    p = _write(tmp_path / name, head, cut)
    for block in (900, 4 << 20):
        text = _compare(p, capsys, block)
        assert " iWARP " in text
    segs = _segments(cut, tmp_path, head)
    partner, _both = _pairs(segs, [_whole(s[7]) for s in segs])
    assert sum(j >= 0 for j in partner) > 5  # the case is one
    _many_against_one(segs, 1024, rng)


def test_fpdu_cut_in_two_before_the_other_direction_is_seen(tmp_path: Path) -> None:
    """A capture that starts in the middle of a stream, its other direction seen once (an ACK)
    between the two parts of an FPDU cut in two: the tracker makes that direction at the ACK, as
    fed one by one (process_many does not take the pair at once then)."""
    segs = []
    for cp in read(CAPS / "siw_write_bw_midstream.pcap", iwarp=False):
        t = cp.packet.get(TCP)
        if t is not None:
            src, dst = IwarpTracker._addresses(cp.packet)
            pay = bytes(cp.packet.payload)
            cut = len(pay) // 3  # each segment with payload in two, inside its FPDU
            for seq, part in ((t.seq, pay[:cut]), ((t.seq + cut) % (1 << 32), pay[cut:])) if cut else ((t.seq, pay),):
                segs.append((cp.frame_number, src, t.sport, dst, t.dport, seq, t.flags, part))
    partner, _both = _pairs(segs, [_whole(s[7]) for s in segs])
    i = [i for i, j in enumerate(partner) if j >= 0][3]
    j = partner[i]
    back = (segs[i][3], segs[i][4], segs[i][1], segs[i][2])
    ack = next(s for s in segs if s[1:5] == back and not s[7])
    # the other direction's segments dropped, but one ACK put before the pair's second part
    kept = [s for s in segs if s[1:5] != back]
    at = kept.index(segs[j])
    kept.insert(at, (segs[j][0], *ack[1:]))
    one = IwarpTracker()
    for s in kept[:at]:
        one.process_segment(*s)
    assert len(one._conns) == 1 and len(next(iter(one._conns.values())).dirs) == 1  # the case is one
    _many_against_one(kept, 1024, np.random.default_rng(1))


# ---------------------------------------------------------------------------- the tracker alone


def _segments(recs: list[tuple[bytes, bytes]], tmp_path: Path, head: bytes) -> list[tuple[Any, ...]]:
    p = _write(tmp_path / "segs.pcap", head, recs)
    out = []
    for cp in read(p, iwarp=False):
        t = cp.packet.get(TCP)
        if t is not None:
            src, dst = IwarpTracker._addresses(cp.packet)
            out.append((cp.frame_number, src, t.sport, dst, t.dport, t.seq, t.flags, bytes(cp.packet.payload)))
    return out


def _state(tr: IwarpTracker) -> list[Any]:
    out = []
    for key, c in tr._conns.items():
        dirs = [(k, d.state, d.next_seq, bytes(d.buf), sorted(d.pending), d.crc, d.markers) for k, d in c.dirs.items()]
        out.append((key, c.dead, c.request is not None, c.reply is not None, dirs))
    return out


def _many_against_one(segs: list[tuple[Any, ...]], most: int, rng: np.random.Generator,
                      ) -> tuple[list[list[Any]], list[int], list[int]]:
    """``segs`` fed to process_many in blocks (random cuts) and to process_segment one by one: the
    same PDUs in the same frames and the same state.  The PDUs one by one, the segments
    process_many took in its FPDU lane and those it fed one by one."""
    one, many = IwarpTracker(max_connections=most), IwarpTracker(max_connections=most)
    want = [[(p.summary(), p.stream) for p in one.process_segment(*seg)] for seg in segs]
    fed: list[int] = []
    real = many.process_segment

    def counted(*a: Any) -> Any:
        fed.append(a[0])
        return real(*a)

    many.process_segment = counted  # type: ignore[method-assign]
    got: list[list[Any]] = [[] for _ in segs]
    lanes: list[int] = []
    cuts = sorted({0, len(segs), *rng.integers(0, len(segs), size=8).tolist()})
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        block = segs[a:b]
        keys = sorted({s[1:5] for s in block})
        dirs = np.array([keys.index(s[1:5]) for s in block], dtype=np.int64)
        whole = [_whole(s[7]) for s in block]
        partner, pair_whole = _pairs(block, whole)
        pdus, errors, lane, paired = many.process_many(
            [s[0] for s in block], keys, dirs, [s[5] for s in block], np.array([s[6] for s in block]),
            np.array([len(s[7]) for s in block]), lambda i, block=block: block[i][7],
            (np.array([w[0] for w in whole], dtype=bool), np.array([w[1] for w in whole], dtype=bool)),
            (np.array(partner, dtype=np.int64), np.array([w[0] for w in pair_whole], dtype=bool),
             np.array([w[1] for w in pair_whole], dtype=bool)))
        assert not errors
        for i, ps in pdus.items():
            got[a + i] = [(p.summary(), p.stream) for p in ps]
        for i in lane:  # the PDUs it took without decoding: the segment's own FPDUs, from its first octet
            assert not got[a + i]
            own = [[p.summary() for p in _decoded(block[i][7], crc)] for crc in (True, False)]
            assert [x[0] for x in want[a + i]] in own
            got[a + i] = want[a + i]
            lanes.append(a + i)
        for i in paired:  # the FPDUs of its partner's payload and its own
            j = partner.index(i)
            assert not got[a + i] and not got[a + j] and not want[a + j]
            own = [[p.summary() for p in _decoded(block[j][7] + block[i][7], crc)] for crc in (True, False)]
            assert [x[0] for x in want[a + i]] in own
            assert [x[1].frames for x in want[a + i]][0][:2] == (block[j][0], block[i][0])
            got[a + i] = want[a + i]
            lanes.append(a + i)
    assert got == want
    assert _state(many) == _state(one)
    return want, lanes, fed


def _pairs(block: list[tuple[Any, ...]], whole: list[tuple[bool, bool]],
           ) -> tuple[list[int], list[tuple[bool, bool]]]:
    """The pairs process_many is told of, found here from the segments themselves: a segment with
    payload, not whole FPDUs, its first FPDU longer than it, and the next segment with payload of
    its 4-tuple (neither SYN nor RST) whose payloads together are whole FPDUs.  Whether the second
    starts where the first ends is not asked here: process_many must see to it."""
    partner = [-1] * len(block)
    out = [(False, False)] * len(block)
    for i, s in enumerate(block):
        if not s[7] or len(s[7]) < 2 or s[6] & (TCP.SYN | TCP.RST) or any(whole[i]):
            continue
        j = next((j for j in range(i + 1, len(block)) if block[j][1:5] == s[1:5] and block[j][7]), None)
        if j is None or block[j][6] & (TCP.SYN | TCP.RST):
            continue
        ul = int.from_bytes(s[7][:2], "big")
        if (2 + ul + 3) // 4 * 4 + 4 <= len(s[7]):
            continue
        both = _whole(s[7] + block[j][7])
        if any(both):
            partner[i], out[i] = j, both
    return partner, out


@pytest.mark.parametrize("most", [2, 5, 1024])
def test_process_many_is_process_segment(most: int, tmp_path: Path) -> None:
    """IwarpTracker.process_many over blocks of segments (random cuts) against process_segment one
    segment at a time: the same PDUs in the same frames and the same state, the order of the
    connections included; connections reset (RST), reopened (the same 4-tuples again), given up
    (not iWARP), dropped (``most`` connections)."""
    head, recs = _records(CAPS / "siw_write_bw.pcap")
    _h, crc = _records(CAPS / "siw_crc_rping.pcap")
    _h, plain = _records(CAPS / "rxe_rc_pingpong.pcap")
    rng = np.random.default_rng(most)
    mixed = (recs + _ports(crc, 7) + plain + _keepalive_and_hole(recs) + _ports(plain, 3) + recs
             + _interleave([_ports(crc, 100 * k) for k in range(4)] + [_ports(recs, 3)], rng))
    segs = _segments(mixed, tmp_path, head)
    for i in rng.integers(0, len(segs), size=6).tolist():  # resets, on connections known or not
        f, s, sp, d, dp, seq, _fl, _p = segs[i]
        segs.insert(i, (f, s, sp, d, dp, seq, TCP.RST | TCP.ACK, b""))
    want, lanes, fed = _many_against_one(segs, most, rng)
    assert sum(map(len, want)) > 50
    if most >= 5:
        assert len(lanes) > 20
    if most == 1024:
        assert len(fed) < len(segs) * 0.6  # the segments it ignores were not fed one by one


def _mutated(segs: list[tuple[Any, ...]], rng: np.random.Generator, k: int) -> list[tuple[Any, ...]]:
    """``k`` segments with payload changed: an octet of an FPDU header or CRC flipped, the segment
    lost, sent twice, swapped with the next, moved a few octets in sequence, a SYN before it, or
    it and the next of its direction sent again later around one of the other direction."""
    out = list(segs)
    data = [i for i, s in enumerate(out) if s[7]]
    for i in sorted(rng.choice(data, size=min(k, len(data)), replace=False).tolist(), reverse=True):
        f, src, sp, dst, dp, seq, fl, pay = out[i]
        how = int(rng.integers(0, 8))
        if how == 0:
            b = bytearray(pay)
            b[int(rng.integers(0, min(16, len(b)))) if rng.random() < 0.7 else len(b) - 1] ^= 1 << int(rng.integers(0, 8))
            out[i] = (f, src, sp, dst, dp, seq, fl, bytes(b))
        elif how == 1:
            del out[i]
        elif how == 2:
            out.insert(i + 1, out[i])
        elif how == 3 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif how == 4:
            out[i] = (f, src, sp, dst, dp, (seq + int(rng.integers(1, 9))) & 0xFFFFFFFF, fl, pay)
        elif how == 5:
            out.insert(i, (f, src, sp, dst, dp, (seq - 1) & 0xFFFFFFFF, TCP.SYN | TCP.ACK, b""))
        else:
            _resent_around(out, i)
    return out


def _resent_around(out: list[tuple[Any, ...]], i: int) -> None:
    """Segment ``i`` and the next with payload of its direction sent again later, around the next
    segment with payload of the other direction after them (in place)."""
    _f, src, sp, dst, dp = out[i][:5]
    j = next((j for j in range(i + 1, len(out)) if out[j][1:5] == out[i][1:5] and out[j][7]), None)
    back = (dst, dp, src, sp)
    k = None if j is None else next((k for k in range(j + 1, len(out)) if out[k][1:5] == back and out[k][7]), None)
    if k is not None:
        out[k:k + 1] = [out[i], out[k], out[j]]


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_read_bw.pcap", "siw_crc_send_bw.pcap", "siw_crc_rping.pcap"])
def test_lane_on_changed_streams_is_process_segment(name: str, tmp_path: Path) -> None:
    """The FPDU lane of process_many (segments taken without feeding them) against process_segment
    one by one, on a real stream, two copies interleaved (both directions carry data) and copies
    with segments damaged, lost, repeated, reordered, moved in sequence, after a SYN or sent
    again around one of the other direction: the same PDUs and state; the lane took segments."""
    head, recs = _records(CAPS / name)
    rng = np.random.default_rng(5)
    segs = _segments(recs + _interleave([_ports(recs, 11), _ports(recs, 23)], rng), tmp_path, head)
    _want, lanes, _fed = _many_against_one(segs, 1024, rng)
    assert len(lanes) > 20
    for trial in range(3):
        _want, lanes, _fed = _many_against_one(_mutated(segs, rng, 6), 1024, rng)
        assert len(lanes) > 10, trial
    again = list(segs)
    for i in sorted(rng.choice([i for i, s in enumerate(segs) if s[7]], size=12, replace=False).tolist(), reverse=True):
        _resent_around(again, i)
    _many_against_one(again, 1024, rng)
    # SYN or RST set on segments with payload in the middle of a stream (their sequence numbers and
    # payloads kept: whole FPDUs next in sequence, which the lane must still not take)
    flagged = list(segs)
    for n, i in enumerate(rng.choice([i for i, s in enumerate(segs) if s[7]], size=12, replace=False).tolist()):
        f, src, sp, dst, dp, seq, fl, pay = flagged[i]
        flagged[i] = (f, src, sp, dst, dp, seq, fl | (TCP.SYN if n % 2 else TCP.RST), pay)
    _many_against_one(flagged, 1024, rng)
    # a segment sent again right after itself with fewer octets, or with the next segment's too (TCP
    # may cut a retransmission otherwise)
    repeated = list(segs)
    data = [i for i, s in enumerate(segs) if s[7]]
    for n, i in enumerate(sorted(rng.choice(data, size=10, replace=False).tolist(), reverse=True)):
        s0 = repeated[i]
        nxt = next((s for s in repeated[i + 1:] if s[1:5] == s0[1:5] and s[7]), None)
        more = s0[7][:len(s0[7]) // 2] if n % 2 or nxt is None else s0[7] + nxt[7]
        repeated.insert(i + 1, (*s0[:7], more))
    _many_against_one(repeated, 1024, rng)
    # a segment of the other direction between the two parts of an FPDU that TCP cut in two: an RST,
    # a SYN, a segment with payload
    cut = _segments(_split(recs, rng), tmp_path, head)
    partner, _both = _pairs(cut, [_whole(s[7]) for s in cut])
    firsts = [i for i, j in enumerate(partner) if j >= 0]
    assert len(firsts) > 5
    for n, i in enumerate(sorted(rng.choice(firsts, size=6, replace=False).tolist(), reverse=True)):
        f, src, sp, dst, dp, _seq, _fl, _pay = cut[i]
        flags = (TCP.RST | TCP.ACK, TCP.SYN | TCP.ACK, TCP.ACK)[n % 3]
        cut.insert(i + 1, (f, dst, dp, src, sp, 12345, flags, b"\x00\x10" if n % 3 == 2 else b""))
    _many_against_one(cut, 1024, rng)


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_read_bw.pcap", "siw_crc_send_bw.pcap"])
def test_bytes_sent_again(name: str, tmp_path: Path) -> None:
    """Segments a direction already has, sent again: a run of them after later ones (go-back-N), the
    stream's data again without a SYN (a capture appended to itself), both on connections whose
    other direction carries data too.  process_many against process_segment one by one: the same
    PDUs and state, and none of those segments fed to the tracker."""
    head, recs = _records(CAPS / name)
    segs = _segments(recs + _interleave([_ports(recs, 11), _ports(recs, 23)], np.random.default_rng(2)),
                     tmp_path, head)
    data = [i for i, s in enumerate(segs) if s[7] and not s[6] & (TCP.SYN | TCP.RST)]
    again = [(100_000 + k, *segs[i][1:]) for k, i in enumerate(data[len(data) // 3:len(data) // 3 + 40])]
    later = data[len(data) // 3 + 60]
    replay = [(200_000 + k, *segs[i][1:]) for k, i in enumerate(data[len(data) // 2:])]
    mixed = segs[:later] + again + segs[later:] + replay
    want, _lanes, fed = _many_against_one(mixed, 1024, np.random.default_rng(4))
    assert not any(want[len(mixed) - len(replay):])  # the case is one: bytes seen before complete nothing
    assert not [f for f in fed if f >= 100_000]


def _decoded(payload: bytes, crc: bool = True) -> list[Any]:
    out, at = [], 0
    while at < len(payload):
        pkt, n = decode_fpdu(payload, at, crc=crc, lenient=True)
        out.append(pkt)
        at += n
    return out


def _whole(payload: bytes) -> tuple[bool, bool]:
    """Whether ``payload`` is whole FPDUs of the kinds process_many may take without decoding
    (RDMA Write, Read Response, Send, Send with SE, Read Request, without problems), their CRCs good; or
    without looking at the CRCs."""
    if not payload:
        return False, False
    try:
        pdus = _decoded(payload)
    except DecodeError:
        return False, False
    names = ("RDMA Write ", "RDMA Read Response ", "Send QN", "Send SE QN", "RDMA Read Request QN")
    plain = all(not p.problems and p.summary().startswith(names) and " [BAD" not in p.summary().replace(
        " [BAD CRC32c]", "") for p in pdus)
    return plain and all(p.crc_status == "good" for p in pdus), plain


def _damaged(recs: list[tuple[bytes, bytes]], rng: np.random.Generator, share: float,
             near: int) -> list[tuple[bytes, bytes]]:
    """Copies of ``recs`` with one bit flipped in a ``share`` of the segments of more than 4 octets of
    payload: in its first ``near`` octets (FPDU headers) mostly, anywhere in it (payloads, CRCs) now and then."""
    out = []
    for h, d in recs:
        t = _tcp(d)
        if t is not None and len(t.data) > 4 and rng.random() < share:
            b = bytearray(t.data)
            at = int(rng.integers(0, min(len(b), near))) if rng.random() < 0.8 else int(rng.integers(0, len(b)))
            b[at] ^= 1 << int(rng.integers(0, 8))
            d = _rebuild(d, data=bytes(b))
        out.append((h, d))
    return out


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_rping.pcap", "siw_read_bw.pcap", "siw_crc_send_bw.pcap"])
def test_fpdu_chains_are_decode_fpdu(name: str, tmp_path: Path) -> None:
    """Which segments the columnar FPDU lane describes itself (whole FPDUs of the kinds it knows,
    without a problem, CRC good or not looked at) against rdmalab.wire.iwarp.decode_fpdu, on real
    streams and on copies with octets of their FPDU headers, payloads and CRCs changed."""
    head, recs = _records(CAPS / name)
    damaged = _damaged(recs, np.random.default_rng(11), 0.5, 64)
    for label, rs in (("real", recs), ("damaged", damaged)):
        p = _write(tmp_path / f"{label}.pcap", head, rs)
        for blk in record_blocks(str(p), 4 << 20):
            cols = decode_block(blk, verify_icrc=True, fields=(*cs._FIELDS, *TCP_FIELDS))
            rows = np.flatnonzero(clean_tcp(blk, cols))
            tb = cs._tcp_block(blk, cols, rows, 0.0)
            ok_crc, ok_plain, _f = cs._fpdu_chains(tb, 0, len(rows))
            payloads = [bytes(tb.buf[a:a + n]) for a, n in zip((tb.offset + tb.payload).tolist(), tb.length.tolist(),
                                                              strict=True)]
            want = [_whole(x) for x in payloads]
            assert ok_crc.tolist() == [w[0] for w in want], label
            assert ok_plain.tolist() == [w[1] for w in want], label
            assert any(w[0] for w in want) or "crc" not in name
            assert any(w[1] for w in want)


def test_lines_source_finds_each_line() -> None:
    """columnar_summary._lines: where each row's line starts, from the newlines, and counted when a
    line holds a newline of its own (the 0 bytes are no characters)."""
    texts = [b"ab\n", b"c\0\0d\n", b"\0e\nf\n", b"\n"]
    m = np.zeros((len(texts), 6), dtype=np.uint8)
    for i, t in enumerate(texts):
        m[i, :len(t)] = np.frombuffer(t, dtype=np.uint8)
    rows = np.array([3, 5, 8, 9])
    for sel in ([0, 1, 3], [0, 1, 2, 3]):
        got_rows, text, at = cs._lines(rows[sel], m[sel])
        want = [texts[i].replace(b"\0", b"") for i in sel]
        assert text == b"".join(want)
        assert [text[a:b] for a, b in zip(at[:-1].tolist(), at[1:].tolist(), strict=True)] == want
        assert got_rows.tolist() == rows[sel].tolist()


@pytest.mark.parametrize("width", [1, 8, 9, 36, 37])
def test_distinct_rows_is_unique(width: int) -> None:
    """columnar_summary._distinct_rows against np.unique of the rows as single values: the same
    first rows and numbers, on rows that differ in any octet (the first, the last, a padded word)."""
    rng = np.random.default_rng(width)
    for n in (0, 1, 2, 700):
        base = rng.integers(0, 256, (max(1, n // 10), width), dtype=np.uint8)
        base[::2, :width // 2] = 0  # rows equal but for their last octets
        m = base[rng.integers(0, len(base), n)] if n else np.zeros((0, width), dtype=np.uint8)
        one, inv = cs._distinct_rows(m)
        _u, want_one, want_inv = np.unique(np.ascontiguousarray(m).view(np.dtype((np.void, width))).ravel(),
                                           return_index=True, return_inverse=True)
        assert one.tolist() == want_one.tolist()
        assert inv.tolist() == want_inv.ravel().tolist()


class _OneByOne:
    """An iWARP tracker fed one segment at a time (no process_many): fill_iwarp's reference."""

    def __init__(self) -> None:
        self.tracker = IwarpTracker()

    def process_segment(self, *args: Any) -> Any:
        return self.tracker.process_segment(*args)


def _iwarp_columns_agree(path: Path, block_bytes: int) -> None:
    from rdmalab.capture.columnar import IWARP_COLUMNS, IWARP_LAYERS

    fast, slow = IwarpTracker(), _OneByOne()
    for blk in record_blocks(str(path), block_bytes):
        a = decode_block(blk, verify_icrc=False, fields=("frame.number",), tracker=fast)
        b = decode_block(blk, verify_icrc=False, fields=("frame.number",), tracker=slow)
        for c in IWARP_COLUMNS:
            there = b.layers[c.layer]
            assert np.array_equal(a.layers[c.layer], there), (path.name, c.name)
            assert np.array_equal(a.data[c.name][there], b.data[c.name][there]), (path.name, c.name)
        for name in IWARP_LAYERS:
            assert np.array_equal(a.layers[name], b.layers[name]), (path.name, name)
        assert np.array_equal(a.data["rdmalab.pdus"], b.data["rdmalab.pdus"]), path.name
        assert a.multi == b.multi, path.name


#: iWARP fields of every layer, the CRC's both ways, the PDU count (-T fields: columns against the per-packet path)
_IWARP_FIELDS = ["frame.number", "iwarp_mpa.ulpdulength", "iwarp_mpa.crc", "iwarp_mpa.crc_check", "iwarp_ddp.tagged_flag",
                 "iwarp_ddp.last_flag", "iwarp_ddp.stag", "iwarp_ddp.tagged_offset", "iwarp_ddp.qn", "iwarp_ddp.msn",
                 "iwarp_ddp.mo", "iwarp_rdma.opcode", "iwarp_rdma.sinkstag", "iwarp_rdma.srcto", "iwarp_rdma.rdmardsz",
                 "rdmalab.payload.len", "rdmalab.crc32c.status", "rdmalab.pdus"]


@pytest.mark.parametrize("name", ["siw_write_bw.pcap", "siw_crc_write_bw.pcap", "siw_read_bw.pcap", "siw_crc_read_bw.pcap",
                                  "siw_send_bw.pcap", "siw_crc_send_bw.pcap", "siw_crc_rping.pcap", "siw_rping.pcap"])
def test_iwarp_columns_of_whole_fpdus_are_those_decoded(name: str, tmp_path: Path, capsys: Any) -> None:
    """fill_iwarp reads the columns of a segment of whole FPDUs the tracker takes in step from its octets
    (columnar_decode._fpdu_plan): the same columns, layers, PDU counts and several-PDU fields as the PDUs the
    tracker decodes one segment at a time, on real streams with and without CRC, and on copies with segments
    coalesced (several FPDUs), cut in two, and with octets of their FPDUs changed; in small and large blocks."""
    from rdmalab.capture import columnar_decode

    head, recs = _records(CAPS / name)
    rng = np.random.default_rng(5)
    damaged = _damaged(recs, rng, 0.2, 48)
    variants = {"real": recs, "coalesced": _coalesce(recs, rng), "cut": _split(_coalesce(recs, rng), rng),
                "damaged": damaged}
    columnar_decode._PLANS.clear()
    shown = 0
    for label, rs in variants.items():
        p = _write(tmp_path / f"{label}.pcap", head, rs)
        for block in (2048, 4 << 20):
            _iwarp_columns_agree(p, block)
        fields = [a for f in _IWARP_FIELDS for a in ("-e", f)]
        assert main(["decode", "-r", str(p), "-T", "fields", *fields]) == 0
        columns = capsys.readouterr().out
        assert main(["decode", "--no-columnar", "-r", str(p), "-T", "fields", *fields]) == 0
        assert columns == capsys.readouterr().out, label
        shown += columns.count("\t0x")
    assert shown > 40  # (iWARP frames among them)
    plans = {key for key, plan in columnar_decode._PLANS.items() if plan is not None}
    if "_bw" in name and "send" not in name:  # (the others hold a handful of PDUs, none in step)
        assert plans, "no segment was read from its octets"  # the case is one
        assert any(crc for _kind, crc in plans) == ("crc" in name), plans


def test_iwarp_columns_of_every_fpdu_kind_are_read() -> None:
    """Every kind of FPDU the columns read from octets (Write, Read Response, Send, Send SE, Read Request), with
    and without CRC: a plan made and checked against the FPDU decoded (none falls back for lack of one)."""
    from rdmalab.capture import columnar_decode
    from rdmalab.capture.columnar_tcp import FPDU_KINDS
    from rdmalab.wire.iwarp import encode_fpdu
    from rdmalab.wire.rdmap import DDPTagged, DDPUntagged, RDMAPControl

    for (tagged, op), kind in FPDU_KINDS.items():
        if tagged:
            ulpdu = DDPTagged(last=1, rsvdulp=0x40 | op, stag=0x1234, to=0x99).encode() + bytes(20)
        else:
            rest = bytes(28) if op == 1 else bytes(24)
            ulpdu = DDPUntagged(last=1, rsvdulp=(0x40 | op) << 32, qn=1 if op == 1 else 0, msn=7, mo=0).encode() + rest
        assert RDMAPControl  # (the control octet: RsvdULP's first, RFC 5040 4.1)
        for crc in (True, False):
            fpdu = encode_fpdu(ulpdu, crc=crc)
            plan = columnar_decode._fpdu_plan(fpdu, 0, kind, crc)
            assert plan is not None, (op, crc)
            if op != 1:  # (a plan made from an FPDU without payload reads the payload's length of those with one)
                bare = encode_fpdu(ulpdu[:len(ulpdu) - 20 if tagged else len(ulpdu) - 24], crc=crc)
                again = columnar_decode._fpdu_plan(bare, 0, kind, crc)
                assert again == plan, (op, crc)
