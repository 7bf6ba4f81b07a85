"""The summary lines of ICMP and ICMPv6 errors that quote a datagram are written from columns
(``columnar_summary._quoting_rows``, ``_quoting_text``) when the columns read the frame to its ICMP
header without a problem: the same bytes as the per-packet path, with and without a filter, for every
error type and code, quotes of RoCEv2, TCP and other datagrams, and frames the per-packet path must
write (a fragment, a length past the capture, an extension header, a message without a quote).
Against tshark: the Protocol and Info columns of every error."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

import rdmalab.capture.columnar_summary as cs
from rdmalab.capture import records
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.wire.net import internet_checksum

CAPTURES = Path(__file__).resolve().parents[2] / "captures"

#: every error type and its codes (RFC 792, RFC 1812, RFC 4443 2.1), and a code no table names
V4_ERRORS = [(3, c) for c in range(16)] + [(3, 99), (4, 0), *[(5, c) for c in range(4)], (11, 0), (11, 1),
                                            (12, 0), (12, 1), (12, 2), (12, 7)]
V6_ERRORS = [(1, c) for c in range(9)] + [(1, 42), (2, 0), (3, 0), (3, 1), (4, 0), (4, 1), (4, 2), (4, 3), (4, 9)]


def _ip4(payload: bytes, proto: int, *, options: bytes = b"", flags: int = 0, frag: int = 0,
         length: int | None = None) -> bytes:
    ihl = 5 + len(options) // 4
    total = 4 * ihl + len(payload) if length is None else length
    hdr = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0xC0, total, 7, flags << 13 | frag, 64, proto, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + options
    return hdr[:10] + internet_checksum(hdr).to_bytes(2, "big") + hdr[12:] + payload


def _ip6(payload: bytes, nxt: int, *, plen: int | None = None) -> bytes:
    src, dst = bytes.fromhex("fe800000000000000000000000000001"), bytes.fromhex("fe800000000000000000000000000002")
    return struct.pack(">IHBB", 6 << 28, len(payload) if plen is None else plen, nxt, 255) + src + dst + payload


def _eth(etype: int, body: bytes, *, vlan: bool = False) -> bytes:
    tag = struct.pack(">HH", 0x8100, 3 << 13 | 5) if vlan else b""
    return bytes.fromhex("020000000002020000000001") + tag + struct.pack(">H", etype) + body


def _message(kind: int, code: int, quote: bytes) -> bytes:
    body = struct.pack(">BBHI", kind, code, 0, 0) + quote
    return body[:2] + internet_checksum(body).to_bytes(2, "big") + body[4:]


def _quoted_datagrams() -> list[bytes]:
    """IP datagrams to quote, from the real captures: RoCEv2 packets (rxe), TCP segments (siw) and other
    UDP (the first frames of rxe's captures that are neither)."""
    out: list[bytes] = []
    for name, want in (("rxe_write_bw.pcap", 17), ("siw_write_bw.pcap", 6), ("rxe_rping.pcap", 17)):
        got = [bytes(r.data)[14:] for r in records(CAPTURES / name)
               if bytes(r.data)[12:14] == b"\x08\x00" and r.data[23] == want]
        out += got[-6:]
    return out


def _errors(path: Path, *, with_hard: bool = True) -> Path:
    """A capture of ICMP and ICMPv6 errors of every type and code, quoting real datagrams, over
    Ethernet and 802.1Q; with ``with_hard`` also frames only the per-packet path writes."""
    quotes = _quoted_datagrams()
    t = 1_700_000_000 * 10**9
    with CaptureWriter(path, nano=True) as w:
        def put(frame: bytes, wire: int | None = None) -> None:
            nonlocal t
            t += 12_345
            w.write(frame, t, wire_len=wire)

        for i, (kind, code) in enumerate(V4_ERRORS * 2):
            q = quotes[i % len(quotes)][:548]
            put(_eth(0x0800, _ip4(_message(kind, code, q), 1, options=b"\x01\x01\x01\x00" if i % 5 == 0 else b""),
                     vlan=i % 3 == 0))
        for i, (kind, code) in enumerate(V6_ERRORS * 2):
            q = _ip6(quotes[i % len(quotes)][20:], 17 if i % 2 else 6)[:1232]
            put(_eth(0x86DD, _ip6(_message(kind, code, q), 58), vlan=i % 4 == 0))
        # an Ethernet trailer after the datagram (a short error padded to 60 octets)
        put(_eth(0x0800, _ip4(_message(3, 3, quotes[0][:8]), 1)) + bytes(10))
        if with_hard:
            q = quotes[1][:64]
            put(_eth(0x0800, _ip4(_message(3, 3, q), 1, flags=1)))  # More Fragments
            put(_eth(0x0800, _ip4(_message(3, 3, q), 1, frag=8)))  # a later fragment
            put(_eth(0x0800, _ip4(_message(3, 3, q), 1, length=20 + 8 + len(q) + 30)))  # longer than the frame
            put(_eth(0x0800, _ip4(_message(3, 3, q), 1, length=24)))  # shorter than the ICMP header
            put(_eth(0x0800, _ip4(_message(3, 3, b""), 1)))  # no quote
            cut = _eth(0x0800, _ip4(_message(11, 0, q), 1))
            put(cut[:50], len(cut))  # a snap length inside the quote
            put(cut[:36], len(cut))  # ... inside the ICMP header
            hop = bytes([58, 0, 1, 4, 0, 0, 0, 0])  # a hop-by-hop header before the ICMPv6 message
            put(_eth(0x86DD, _ip6(hop + _message(1, 4, _ip6(q[20:], 17)), 0)))
            put(_eth(0x86DD, _ip6(_message(1, 4, _ip6(q[20:], 17)), 58, plen=2000)))  # past the frame
            put(_eth(0x0800, _ip4(_message(3, 3, _ip4(_message(3, 1, q[:28]), 1)), 1)))  # an error quoting an error
            # UDP whose first octets read as an error's type and code (source port 0x0303, 0x0104)
            udp = struct.pack(">HHHH", 0x0303, 9, 8 + 12, 0) + bytes(12)
            put(_eth(0x0800, _ip4(udp, 17)))
            put(_eth(0x86DD, _ip6(b"\x01\x04" + udp[2:], 17)))
    return path


def _counted(monkeypatch: Any) -> list[int]:
    """How many lines the columns wrote for quoting frames, counted."""
    done: list[int] = []
    real = cs._quoting_text

    def counting(blk: Any, c: Any, rows: Any, t0: int) -> Any:
        done.append(len(rows))
        return real(blk, c, rows, t0)

    monkeypatch.setattr(cs, "_quoting_text", counting)
    return done


@pytest.mark.parametrize("flt", [None, "udp.dstport == 4791", "ip.ttl == 64", "tcp.srcport == 18515 || tcp.dstport == 18515",
                                 "frame.len > 100", "infiniband.bth.opcode == 10 && ip.src == 10.0.0.1"])
def test_the_columns_write_what_the_per_packet_path_writes(flt: str | None, tmp_path: Path, capsys: Any,
                                                           monkeypatch: Any) -> None:
    path = _errors(tmp_path / "errors.pcap")
    extra = [] if flt is None else ["-Y", flt]
    done = _counted(monkeypatch)
    columns = decode(capsys, "-r", str(path), *extra)
    per_packet = decode(capsys, "-r", str(path), *extra, "--no-columnar")
    assert columns == per_packet
    if flt is None:  # every clean error by the columns (the padded one and the error quoting an error
        # among them: their quotes are never their lines' business), none of the other eleven
        assert sum(done) == 2 * (len(V4_ERRORS) + len(V6_ERRORS)) + 2
        assert len(columns.splitlines()) == sum(done) + 11
    elif flt.startswith(("udp.", "tcp.", "ip.ttl")):
        assert sum(done) > 20


def test_the_columns_are_not_asked_for_a_frame_that_is_no_error(tmp_path: Path, capsys: Any,
                                                                monkeypatch: Any) -> None:
    """Echo requests and replies (paired in order) and neighbour discovery are no quoting errors."""
    done = _counted(monkeypatch)
    for name in ("rxe_write_bw.pcap", "siw_rping.pcap"):
        assert decode(capsys, "-r", str(CAPTURES / name)) == decode(capsys, "-r", str(CAPTURES / name), "--no-columnar")
    assert sum(done) == 0


@requires_tshark
def test_protocol_and_info_as_tshark(tmp_path: Path) -> None:
    path = _errors(tmp_path / "errors.pcap", with_hard=False)
    ours = [line.split(None, 7) for line in "".join(cs.summary_lines(path)).splitlines()]
    theirs = tshark("-r", str(path), "-T", "fields", "-e", "_ws.col.Protocol", "-e", "_ws.col.Info").splitlines()
    assert len(ours) == len(theirs) > 60
    for mine, line in zip(ours, theirs, strict=True):
        # number, time, source, arrow, destination, protocol, length, info
        assert (mine[5], mine[7].rstrip("\n")) == tuple(line.split("\t")), mine
