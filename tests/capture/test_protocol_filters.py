"""Display filters on a protocol's name (``-Y udp``, ``ip && !tcp``, ``infiniband``), answered from the
columns (rdmalab.capture.columnar_schema.FILTER_PROTOCOLS) rather than frame by frame: the frames each keeps,
in every output, are the per-packet path's (``--no-columnar``), an ICMP error's quote included (tshark's
``udp`` and ``infiniband`` match an error that quotes a RoCEv2 datagram), and the frames tshark keeps.

``ip`` is IPv4's: Wireshark's IPv6 dissector adds a hidden ``ip.version`` (``ip.version == 6`` matches an IPv6
packet), but tshark's ``ip`` does not; the per-packet filter took that hidden field for an IPv4 header.  (``ip``
itself stays frame by frame: an IPv4 EtherType before a header of another version is ``ip``.)  A filter on a
protocol's bytes (``eth contains``) is read frame by frame too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_icmp_quotes import _built
from test_vlan_tags import _tagged
from tshark_cli import decode, requires_tshark, shown_frames, tshark

from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.reader import records

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
EXPRESSIONS = ["udp", "tcp", "ip", "ipv6", "eth", "vlan", "infiniband", "udp && !infiniband", "tcp || ipv6", "!ip",
               "ip && !udp", "infiniband && frame.len > 100", "sll", "icmp", "icmpv6", "arp", "icmp || icmpv6 || arp",
               "!arp && !icmpv6"]
NAMES = ["lo_icmp_unreachable.pcap", "synthetic_all_opcodes_rocev2.pcap", "synthetic_all_opcodes_rocev1.pcap",
         "rxe_write_bw_loss.pcap", "siw_crc_rping.pcap", "rxe_ud_pingpong.pcap", "hw_ib_connectx_erf.pcap",
         "synthetic_rocev2_cm_req.pcap"]


def _mixed(tmp_path: Path) -> Path:
    """Routers' quotes (TCP quoted too, test_icmp_quotes), and real RoCEv2, iWARP and IPv6 frames, every
    other one with an 802.1Q tag."""
    path = tmp_path / "mixed.pcap"
    with CaptureWriter(path) as w:
        for r in records(_built(tmp_path)):
            w.write(bytes(r.data), r.ns or 0)
        for k, name in enumerate(("lo_icmp_unreachable.pcap", "siw_crc_rping.pcap", "rxe_send_bw_loss.pcap")):
            for i, r in enumerate(records(CAPTURES / name)):
                data = bytes(r.data)
                w.write(_tagged(data, [(0x8100, 5 + k)]) if i % 2 else data, r.ns or 0)
    return path


def _paths(tmp_path: Path) -> list[Path]:
    return [CAPTURES / n for n in NAMES if (CAPTURES / n).exists()] + [_mixed(tmp_path)]


@pytest.mark.parametrize("mode", [[], ["-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "udp.srcport"],
                                  ["-T", "json"], ["-V"]], ids=["summaries", "fields", "json", "trees"])
def test_protocol_filters_are_answered_from_the_columns_as_frame_by_frame(
        mode: list[str], tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    from rdmalab.cli import decode as cli

    columnar: list[str] = []
    for name in ("_fields_columnar", "_json_shown", "_trees_shown"):
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, lambda *a, _real=real, _name=name: columnar.append(_name) or _real(*a))
    real_answer = cli._columns_answer
    monkeypatch.setattr(cli, "_columns_answer",
                        lambda flt: bool(real_answer(flt)) and (columnar.append(flt.expr) or True))
    kept = 0
    for path in _paths(tmp_path):
        for expr in EXPRESSIONS:
            columnar.clear()
            got = decode(capsys, "-r", str(path), "-Y", expr, *mode)
            assert got == decode(capsys, "--no-columnar", "-r", str(path), "-Y", expr, *mode), (path.name, expr)
            kept += len(shown_frames(got, mode))
            # (ERF: the per-packet path either way; ip too: a bogus header of another version is ip, and the
            # columns do not call it IPv4)
            if path.suffix == ".pcap" and "hw_ib" not in path.name and "ip" not in expr.replace("!", " ").split():
                assert columnar, (path.name, expr, "not answered from the columns")
    assert kept > 1000


@requires_tshark
@pytest.mark.tshark
def test_protocol_filters_keep_the_frames_tshark_keeps(tmp_path: Path, capsys: Any) -> None:
    for path in _paths(tmp_path):
        for expr in EXPRESSIONS:
            ours = shown_frames(decode(capsys, "-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number"),
                                ["-T", "fields"])
            theirs = tshark("-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number").split()
            assert ours == theirs, (path.name, expr)


def test_ip_is_ipv4_not_the_hidden_ip_version_of_ipv6(capsys: Any) -> None:
    """An IPv6 packet has ip.version == 6 (hidden, as Wireshark's) but is not ``ip``; an ICMPv6 error's quote
    neither; IPv4 is."""
    path = str(CAPTURES / "lo_icmp_unreachable.pcap")
    for extra in ([], ["--no-columnar"]):
        six = decode(capsys, *extra, "-r", path, "-Y", "ipv6", "-T", "fields", "-e", "frame.number").split()
        four = decode(capsys, *extra, "-r", path, "-Y", "ip", "-T", "fields", "-e", "frame.number").split()
        hidden = decode(capsys, *extra, "-r", path, "-Y", "ip.version == 6", "-T", "fields", "-e", "frame.number").split()
        assert six and four and not set(six) & set(four), (extra, six, four)
        assert hidden == six


def _cut_everywhere(tmp_path: Path) -> Path:
    """One frame of each kind (RoCEv2 over IPv4 and over IPv6, a TCP segment, an ICMP error quoting RoCEv2,
    an ICMPv6 one, ARP, RoCEv1, 802.1Q-tagged RoCEv2) cut at every length from 1 octet to the whole frame."""
    picks: list[bytes] = []
    for name, want in (("rxe_write_bw_loss.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 17),
                       ("siw_crc_rping.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 6 and len(d) > 80),
                       ("lo_icmp_unreachable.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 1),
                       ("lo_icmp_unreachable.pcap", lambda d: d[12:14] == b"\x86\xdd" and d[20] == 58),
                       ("lo_icmp_unreachable.pcap", lambda d: d[12:14] == b"\x86\xdd" and d[20] == 17),
                       ("synthetic_all_opcodes_rocev1.pcap", lambda d: d[12:14] == b"\x89\x15"),
                       ("rxe_write_bw_loss.pcap", lambda d: d[12:14] == b"\x08\x06")):
        src = CAPTURES / name
        if not src.exists():
            continue
        got = next((bytes(r.data) for r in records(src) if want(bytes(r.data))), None)
        if got is not None:
            picks += [got[:200], _tagged(got[:200], [(0x8100, 7)])]
    path = tmp_path / "cut.pcap"
    with CaptureWriter(path) as w:
        t = 10**9
        for frame in picks:
            for n in range(1, len(frame) + 1):
                w.write(frame[:n], t, wire_len=len(frame))
                t += 1000
    return path


@pytest.mark.parametrize("expr", ["eth", "vlan", "ip", "ipv6", "udp", "tcp", "infiniband", "!udp && ip", "icmp", "icmpv6",
                                  "arp"])
def test_protocol_filters_on_frames_cut_anywhere(expr: str, tmp_path: Path, capsys: Any) -> None:
    """Each kind of frame cut at every length (a header the capture ends in): a protocol is there on the
    columns exactly where it is frame by frame."""
    path = str(_cut_everywhere(tmp_path))
    mode = ["-T", "fields", "-e", "frame.number"]
    got = decode(capsys, "-r", path, "-Y", expr, *mode)
    assert got == decode(capsys, "--no-columnar", "-r", path, "-Y", expr, *mode)


def _ipv6_extensions(tmp_path: Path) -> Path:
    """IPv6 datagrams with an extension header before UDP (RoCEv2 among them), TCP or ICMPv6 (MLD, an error
    quoting RoCEv2), the first fragment of a datagram, 802.1Q-tagged copies, between plain RoCEv2 frames."""
    import struct

    src, dst = bytes.fromhex("fe800000000000000000000000000001"), bytes.fromhex("fe800000000000000000000000000002")
    roce = next(bytes(r.data) for r in records(CAPTURES / "rxe_write_bw_loss.pcap")
                if bytes(r.data)[12:14] == b"\x08\x00" and bytes(r.data)[23] == 17)
    udp_roce = roce[34:]  # (its ICRC covers the IPv4 header: wrong over IPv6, shown bad, the same both ways)

    def ext(kind: int, nxt: int) -> bytes:
        if kind == 44:
            return struct.pack(">BBHI", nxt, 0, 0, 7)  # offset 0, no more fragments: an atomic fragment
        return bytes([nxt, 0]) + b"\x01\x04\x00\x00\x00\x00"  # (a PadN option)

    def ip6(nxt: int, body: bytes) -> bytes:
        return struct.pack(">IHBB", 0x60000000, len(body), nxt, 64) + src + dst + body

    tcp = struct.pack(">HHIIBBHHH", 4000, 5000, 1, 0, 5 << 4, 0x18, 1024, 0, 0) + b"data"
    mld = struct.pack(">BBHHH", 143, 0, 0, 0, 0)
    error = struct.pack(">BBHI", 1, 4, 0, 0) + ip6(17, udp_roce)
    bodies = [ip6(kind, ext(kind, nxt) + body) for kind in (0, 43, 44, 60)
              for nxt, body in ((17, udp_roce), (6, tcp), (58, mld), (58, error))]
    bodies.append(ip6(44, struct.pack(">BBHI", 17, 0, 1, 9) + udp_roce))  # (more fragments: no UDP decoded)
    frames = [b"\x02" * 6 + b"\x04" * 6 + b"\x86\xdd" + b for b in bodies]
    path = tmp_path / "ipv6_ext.pcap"
    with CaptureWriter(path) as w:
        t = 10**9
        for f in frames + [_tagged(f, [(0x8100, 9)]) for f in frames]:
            for one in (roce, f):
                w.write(one, t)
                t += 1000
    return path


def test_ipv6_extension_headers_before_udp_and_tcp(tmp_path: Path, capsys: Any) -> None:
    """A block with an IPv6 extension header the columns do not read past (ipv6_extensions) is read frame by
    frame: the UDP (RoCEv2 too), TCP and quotes after it are in -T fields and filters as on the per-packet
    path, and as tshark has them; a Hop-by-Hop header before MLD keeps the block in the columns."""
    from rdmalab.capture.columnar import ipv6_extensions
    from rdmalab.capture.pcapio import record_blocks

    path = str(_ipv6_extensions(tmp_path))
    fields = ["frame.number", "udp.srcport", "tcp.dstport", "infiniband.bth.opcode", "ipv6.nxt"]
    mode = [a for f in fields for a in ("-e", f)]
    for expr in (None, "udp", "tcp", "infiniband", "udp.dstport == 4791", "icmpv6", "icmpv6 && !udp"):
        extra = ["-Y", expr] if expr else []
        got = decode(capsys, "-r", path, "-T", "fields", *mode, *extra)
        assert got == decode(capsys, "--no-columnar", "-r", path, "-T", "fields", *mode, *extra), expr
    marks = [m for blk in record_blocks(path) for m in ipv6_extensions(blk).tolist()]
    assert sum(marks) == 2 * (4 * 4 + 1) - 2 and len(marks) == 2 * 2 * 17  # (all but the two MLD after a Hop-by-Hop)


@requires_tshark
@pytest.mark.tshark
def test_ipv6_extension_headers_as_tshark(tmp_path: Path, capsys: Any) -> None:
    path = str(_ipv6_extensions(tmp_path))
    for expr in ("udp", "tcp", "ipv6", "ip", "icmpv6"):
        ours = decode(capsys, "-r", path, "-Y", expr, "-T", "fields", "-e", "frame.number", "-e", "udp.srcport",
                      "-e", "tcp.dstport").split("\n")
        theirs = tshark("-r", path, "-Y", expr, "-T", "fields", "-e", "frame.number", "-e", "udp.srcport",
                        "-e", "tcp.dstport").split("\n")
        assert ours == theirs, expr


def test_protocol_filters_on_datagrams_shorter_than_their_frames(tmp_path: Path, capsys: Any) -> None:
    """An IPv4 or IPv6 datagram whose length field ends it inside the frame (the rest Ethernet padding) at
    every length from its header to its whole: ICMP, ICMPv6, UDP and TCP are there on the columns exactly
    where they are frame by frame (a message cut by its datagram, not by the capture)."""
    import struct

    picks = []
    for name, want in (("lo_icmp_unreachable.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 1),
                       ("lo_icmp_unreachable.pcap", lambda d: d[12:14] == b"\x86\xdd" and d[20] == 58),
                       ("siw_crc_rping.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 6),
                       ("rxe_write_bw_loss.pcap", lambda d: d[12:14] == b"\x08\x00" and d[23] == 17)):
        picks.append(next(bytes(r.data) for r in records(CAPTURES / name) if want(bytes(r.data))))
    path = tmp_path / "short.pcap"
    with CaptureWriter(path) as w:
        t = 10**9
        for frame in picks:
            six = frame[12:14] == b"\x86\xdd"
            head = 40 if six else 20
            for k in range(0, 30):
                f = bytearray(frame[:14 + head + 40].ljust(14 + head + 40, b"\0"))
                if six:
                    f[18:20] = struct.pack(">H", k)
                else:
                    f[16:18] = struct.pack(">H", head + k)
                w.write(bytes(f), t)
                t += 1000
    mode = ["-T", "fields", "-e", "frame.number"]
    for expr in ("icmp", "icmpv6", "udp", "tcp", "ip", "ipv6"):
        got = decode(capsys, "-r", str(path), "-Y", expr, *mode)
        assert got == decode(capsys, "--no-columnar", "-r", str(path), "-Y", expr, *mode), expr
