"""The datagram an ICMP or ICMPv6 error quotes, decoded as tshark decodes it (packet-icmp.c and
packet-icmpv6.c hand the quote to the IP dissector): its ip.src after the frame's, its UDP or TCP
header, the BTH of a quoted RoCEv2 packet, its conversation counted in tcp.stream/udp.stream, on the
per-packet and the columnar paths, in -T fields, display filters, -T json and -V.

``lo_icmp_unreachable.pcap`` is real: the kernel's ICMP port unreachable answers to RoCEv2 datagrams
sent to a port nobody listens on (captures/MANIFEST.md says how it was made), quoted whole and cut at
576 octets (RFC 1812 4.3.2.3).  The frames built here add the quotes a router makes: 8 octets of TCP
(RFC 792), a conversation first seen in a quote."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.columnar import COLUMN_NAMES
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.reader import read
from rdmalab.cli import main
from rdmalab.wire.ib import BTH

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
REAL = CAPTURES / "lo_icmp_unreachable.pcap"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")

FIELDS = ("frame.number", "frame.protocols", "ip.src", "ip.dst", "ip.len", "ip.ttl", "ip.proto", "ip.id",
          "ip.flags.df", "ipv6.src", "ipv6.plen", "ipv6.nxt", "ipv6.hlim", "udp.srcport", "udp.dstport",
          "udp.length", "udp.checksum", "udp.stream", "tcp.srcport", "tcp.dstport", "tcp.stream", "tcp.seq",
          "tcp.ack", "tcp.len", "tcp.flags", "tcp.flags.syn", "infiniband.bth.opcode", "infiniband.bth.destqp",
          "infiniband.bth.psn", "infiniband.bth.p_key", "infiniband.reth.va", "infiniband.reth.r_key",
          "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.deth.srcqp",
          "infiniband.invariant.crc", "icmp.type", "icmp.code", "icmpv6.type", "icmpv6.code", "tcp.window_size",
          "tcp.window_size_value", "tcp.payload", "data.len", "data.data")


def _ip4(src: int, dst: int, proto: int, body: bytes, total: int | None = None) -> bytes:
    return struct.pack(">BBHHHBBHII", 0x45, 0, total or 20 + len(body), 7, 0, 64, proto, 0, src, dst) + body


def _udp(sport: int, dport: int, body: bytes) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(body), 0) + body


def _tcp(sport: int, dport: int, seq: int, ack: int, flags: int) -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 8192, 0, 0)


def _eth(ip: bytes) -> bytes:
    return bytes(6) + bytes(6) + b"\x08\x00" + ip


def _icmp(kind: int, code: int, quote: bytes) -> bytes:
    return struct.pack(">BBHI", kind, code, 0, 0) + quote


A, B, C, D = 0x0A000001, 0x0A000002, 0x0A000005, 0x0A000006
BTH_BYTES = bytes.fromhex("0440ffff000000110000000a")  # RC SEND Only to QP 0x11, PSN 10


def _built(tmp_path: Path) -> Path:
    """Routers' quotes: a UDP conversation first seen in a quote (tshark numbers it there), a RoCEv2
    datagram quoted whole, a TCP SYN quoted whole, 8 octets of a TCP segment (no conversation), and
    what each quote's conversation does to the frames after it."""
    roce = _ip4(A, B, 17, _udp(49152, 4791, BTH_BYTES + b"\x00" * 8 + b"\x11\x22\x33\x44"))
    frames = [
        _eth(_ip4(C, D, 17, _udp(5000, 6000, b"a"))),
        _eth(_ip4(B, A, 1, _icmp(3, 3, _ip4(A, B, 17, _udp(7000, 7001, b"x" * 8))))),  # a conversation new in a quote
        _eth(_ip4(C, D, 17, _udp(8000, 8001, b"z"))),  # another, new after it
        _eth(_ip4(A, B, 17, _udp(7000, 7001, b"y"))),  # the quote's conversation: the quote's number
        _eth(roce),
        _eth(_ip4(B, A, 1, _icmp(3, 3, roce))),  # a RoCEv2 datagram quoted whole
        _eth(_ip4(B, A, 1, _icmp(11, 0, _ip4(A, B, 6, _tcp(3333, 4444, 1000, 0, 0x02))))),
        _eth(_ip4(A, B, 6, _tcp(3333, 4444, 1000, 0, 0x02))),
        _eth(_ip4(B, A, 1, _icmp(3, 4, _ip4(A, B, 6, _tcp(3333, 4444, 1001, 5, 0x18))[:28]))),  # 8 octets of TCP
        _eth(_ip4(C, D, 6, _tcp(1, 2, 9, 0, 0x02))),
        _eth(_ip4(B, A, 1, _icmp(3, 4, _ip4(A, B, 6, _tcp(3333, 4444, 1001, 5, 0x18) + b"abc")))),  # with its payload
    ]
    path = tmp_path / "quotes.pcap"
    write_capture(path, [((10 + i) * 10**9, f) for i, f in enumerate(frames)], nano=False)
    return path


def _tshark(path: Path, *args: str) -> list[str]:
    return subprocess.run(["tshark", "-n", "-r", str(path), *args], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def _ours(capsys: Any, *args: str) -> list[str]:
    assert main(["decode", *args]) == 0
    out: list[str] = capsys.readouterr().out.splitlines()
    return out


def _fields(path: Path, names: tuple[str, ...]) -> list[str]:
    return [a for n in names for a in ("-e", n)]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("columnar", [True, False], ids=["columns", "per-packet"])
def test_fields_of_quotes_as_tshark(columnar: bool, capsys: Any, tmp_path: Path) -> None:
    """Every field of FIELDS, each occurrence in order (the frame's, then the quote's), equals tshark's, on
    the kernel's quotes and on the routers'; before, the quote was bytes (ip.src once, no udp, no BTH)."""
    built = _built(tmp_path)
    flag = [] if columnar else ["--no-columnar"]
    for path in (REAL, built):
        names = FIELDS if path == REAL else tuple(n for n in FIELDS if not n.startswith("infiniband.reth"))
        if path == built:  # (tshark names a 1-octet UDP payload's heuristic protocols: not rdmalab's to guess)
            names = tuple(n for n in names if n not in ("frame.protocols", "infiniband.invariant.crc", "data.len",
                                                        "data.data"))
        # all of them (icmp.type is no column: the per-packet decoder), then the columns' alone (the columns)
        columns = tuple(n for n in names if n in COLUMN_NAMES)
        assert len(columns) >= 25
        for asked in (names, columns):
            want = _tshark(path, "-T", "fields", *_fields(path, asked))
            got = _ours(capsys, "-r", str(path), "-T", "fields", *_fields(path, asked), *flag)
            assert got == want, (path.name, len(asked))
    # (and those left out above, of the quoted segment with a payload: tshark's data)
    names = ("frame.protocols", "tcp.payload", "data.len", "data.data", "tcp.window_size")
    want = _tshark(built, "-Y", "frame.number == 11", "-T", "fields", *_fields(built, names))
    assert want == ["eth:ethertype:ip:icmp:ip:tcp:data\t616263\t3\t616263\t8192"]
    assert _ours(capsys, "-r", str(built), "-Y", "frame.number == 11", "-T", "fields", *_fields(built, names),
                 *flag) == want
    # the quotes' numbers the conversations take, as tshark's: the quote's conversation numbered in the quote
    assert _ours(capsys, "-r", str(built), "-T", "fields", "-e", "udp.stream", *flag)[:4] == ["0", "1", "2", "1"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("occurrence", ["f", "l"])
def test_each_occurrence_picked_alike_on_both_paths(occurrence: str, capsys: Any, tmp_path: Path) -> None:
    """``-E occurrence``: the first or the last of a field that occurs twice, as tshark, on the columns
    and on the per-packet path (both now through fieldtext.pick_occurrence); tshark's other values
    are errors (the test below)."""
    built = _built(tmp_path)
    names = _fields(built, ("frame.number", "ip.src", "ip.dst", "ip.addr", "udp.srcport"))
    args = ["-r", str(built), "-T", "fields", *names, "-E", f"occurrence={occurrence}"]
    got = _ours(capsys, *args)
    assert _ours(capsys, *args, "--no-columnar") == got == _tshark(built, *args[2:])
    # frame 2: B -> A quoting A -> B (udp 7000 -> 7001): ip.src is B then A, ip.addr B, A, A, B
    want = {"f": "10.0.0.2\t10.0.0.1\t10.0.0.2\t7000", "l": "10.0.0.1\t10.0.0.2\t10.0.0.2\t7000"}[occurrence]
    assert got[1] == "2\t" + want, got[1]


@pytest.mark.parametrize("occurrence", ["2", "-1", "0", "first"])
def test_an_occurrence_tshark_has_not_is_an_error(occurrence: str, capsys: Any) -> None:
    assert main(["decode", "-r", str(REAL), "-T", "fields", "-e", "ip.src", "-E", f"occurrence={occurrence}"]) != 0
    err = capsys.readouterr().err
    assert f"-E occurrence={occurrence}: must be f (first), l (last) or a (all)" in err, err


@requires_tshark
@pytest.mark.tshark
def test_frame_protocols_of_quotes_as_tshark(capsys: Any) -> None:
    want = _tshark(REAL, "-T", "fields", "-e", "frame.protocols")
    assert "eth:ethertype:ip:icmp:ip:udp:infiniband:data" in want
    assert _ours(capsys, "-r", str(REAL), "-T", "fields", "-e", "frame.protocols") == want


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("expr", ["infiniband.bth.destqp == 0x17", "infiniband", "udp.dstport == 4791 && icmp",
                                  "ip.len == 576 && infiniband.bth.opcode == 13", "icmpv6 && udp.length > 500",
                                  "udp.stream == 3"])
def test_filters_see_the_quote(expr: str, capsys: Any) -> None:
    """A filter matches a quoted field as tshark does (any occurrence); on both paths and summary lines."""
    want = [line.split()[0] for line in _tshark(REAL, "-Y", expr)]
    assert any(int(n) % 2 == 0 for n in want)  # (the ICMP errors are the even frames)
    for flag in ([], ["--no-columnar"]):
        assert [line.split()[0] for line in _ours(capsys, "-r", str(REAL), "-Y", expr, *flag)] == want
        assert _ours(capsys, "-r", str(REAL), "-Y", expr, "-T", "fields", "-e", "frame.number", *flag) == want


def test_a_quote_is_not_the_frame() -> None:
    """What counts a frame's headers never takes the quote for the frame: an ICMP error is no RoCE
    packet (no BTH, encapsulation as before, no problems of the quote's), the quote has its own."""
    frames = list(read(REAL))
    assert len(frames) == 20
    for cp in frames:
        pkt = cp.packet
        if cp.frame_number % 2:
            assert pkt.encap == "rocev2" and pkt.quoted is None
            continue
        assert pkt.get(BTH) is None and pkt.encap == "eth" and not pkt.problems
        assert pkt.quoted is not None and pkt.quoted.encap == "rocev2"
        assert pkt.quoted.get(BTH) == frames[cp.frame_number - 2].packet.get(BTH)
    # a quote cut short (576 octets: RFC 1812) shows its last octets as the ICRC, unchecked
    cut = frames[1].packet.quoted
    assert cut is not None and cut.crc is not None and cut.crc_status is None


def test_tree_shows_the_quote(capsys: Any) -> None:
    lines = _ours(capsys, "-r", str(REAL), "-V", "-Y", "frame.number == 6")
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("Quoted datagram"))
    assert "@ bytes 42-101" in lines[at]
    below = "\n".join(lines[at:])
    assert "        BTH  [" in below and "destqp: 0x000017" in below and "RDMA READ Request" in below


@requires_tshark
@pytest.mark.tshark
def test_json_puts_the_quote_where_tshark_does(capsys: Any) -> None:
    """The quote's IP and UDP headers in the ICMP message's layer, its InfiniBand layer in the frame's."""
    want = json.loads(subprocess.run(["tshark", "-n", "-r", str(REAL), "-T", "json", "--no-duplicate-keys"],
                                     capture_output=True, text=True, check=True).stdout)
    got = json.loads("\n".join(_ours(capsys, "-r", str(REAL), "-T", "json")))
    for a, b in zip(got, want, strict=True):
        la, lb = a["_source"]["layers"], b["_source"]["layers"]
        assert list(la)[:len(lb) - (1 if "data" in lb else 0)] == [k for k in lb if k != "data"][:len(la) - 1]
        for icmp in ("icmp", "icmpv6"):
            if icmp in lb:
                inner = [k for k in lb[icmp] if isinstance(lb[icmp][k], dict)]
                assert [k for k in la[icmp] if isinstance(la[icmp][k], dict)] == inner
                for proto in inner:
                    for key in ("ip.src", "ip.len", "ipv6.plen", "udp.srcport", "udp.length"):
                        if key in lb[icmp][proto]:
                            assert la[icmp][proto][key] == lb[icmp][proto][key]
        if "infiniband" in lb:
            assert la["infiniband"]["infiniband.bth"] == lb["infiniband"]["infiniband.bth"]


def test_analyze_and_top_name_the_unreachable_peer() -> None:
    """An ICMP error for a RoCE packet is an ``unreachable`` finding of analyze (on the connection of the
    quoted packet) and of the live view, with the quoted packet's QP and PSN; not a RoCE packet."""
    from rdmalab.capture.analysis import analyze
    from rdmalab.capture.pcapio import record_blocks
    from rdmalab.capture.top import LiveTop

    a = analyze(REAL)
    assert (a.packets, a.rdma_packets) == (20, 10)  # the ICMP errors are no RDMA packets
    found = a.of_kind("unreachable")
    assert [f.frames for f in found] == [[n] for n in range(2, 21, 2)]
    first = found[0]
    assert first.connection == 0 and first.detail["qp"] == 0x16 and first.detail["psn"] == 9676492
    assert first.text == ("Destination unreachable (Port unreachable) from 127.0.0.1 for RC RDMA WRITE First "
                          "to 127.0.0.1 QP 0x16 PSN 9676492")
    assert found[-1].text.startswith("Destination Unreachable (Port unreachable) from ::1 for UD SEND Only")
    top = LiveTop(idle_s=None)
    for blk in record_blocks(str(REAL), 1 << 10):  # (several blocks)
        top.feed_block(blk)
    top.tick()
    live = [f for f in top.findings if f.kind == "unreachable"]
    assert [f.text for f in live] == [f"{f.text} (frame {f.frames[0]})" for f in found]


@requires_tshark
@pytest.mark.tshark
def test_the_docs_example(capsys: Any) -> None:
    """docs/captures.md's example prints what the docs show, and tshark prints the same."""
    import shlex

    text = (CAPTURES.parent / "docs" / "captures.md").read_text()
    block = text.split("$ rdmalab decode -r captures/lo_icmp_unreachable.pcap", 1)[1].split("```", 1)[0]
    command, shown = block.split("\n", 2)[:2], block.split("\n")[2:]
    argv = shlex.split(("-r captures/lo_icmp_unreachable.pcap" + command[0] + " " + command[1]).replace("\\", ""))
    argv = [str(CAPTURES / "lo_icmp_unreachable.pcap") if a.endswith("lo_icmp_unreachable.pcap") else a for a in argv]
    want = [line for line in shown if line.strip()]
    assert len(want) == 2
    assert _ours(capsys, *argv) == want
    assert _tshark(REAL, *argv[2:]) == want


@requires_tshark
@pytest.mark.tshark
def test_hostile_quotes(tmp_path: Path, capsys: Any) -> None:
    """Quotes of random octets (IPv4 and IPv6 version nibbles, header lengths past the quote, any
    protocol) and an error that quotes an error that quotes a RoCEv2 packet (tshark decodes each level):
    no frame fails, both paths say the same, every address and port is tshark's."""
    import random

    rnd = random.Random(7)
    inner = _ip4(A, B, 17, _udp(49152, 4791, BTH_BYTES + b"\x00" * 4))
    frames = [_eth(_ip4(C, D, 1, _icmp(3, 3, _ip4(D, C, 1, _icmp(3, 3, inner)))))]
    sane = [1]  # the frames whose quoted header is whole: those compared with tshark
    for n in range(2, 302):
        q = bytearray(rnd.randbytes(rnd.randrange(1, 80)))
        q[0] = rnd.choice([0x45, 0x46, 0x4F, 0x40, 0x60, 0x65])
        if len(q) > 9 and rnd.random() < 0.7:
            q[9] = rnd.choice([1, 6, 17, 58])
        if q[0] in (0x45, 0x60) and len(q) >= 40 or q[0] == 0x40:
            sane.append(n)
        frames.append(_eth(_ip4(C, D, 1, _icmp(rnd.choice([3, 4, 5, 11, 12]), rnd.randrange(16), bytes(q)))))
    path = tmp_path / "hostile.pcap"
    write_capture(path, [((10 + i) * 10**9, f) for i, f in enumerate(frames)], nano=False)
    names = ("frame.number", "ip.src", "ip.dst", "udp.srcport", "udp.dstport", "udp.stream")
    want = _tshark(path, "-T", "fields", *_fields(path, names))
    got = [_ours(capsys, "-r", str(path), "-T", "fields", *_fields(path, (*names, "rdmalab.problems")), *flag)
           for flag in ([], ["--no-columnar"])]
    assert got[0] == got[1]
    assert not any("internal" in line for line in got[0])
    assert len(sane) > 60
    assert [got[0][n - 1].rsplit("\t", 1)[0] for n in sane] == [want[n - 1] for n in sane]
    assert want[0].split("\t")[1] == "10.0.0.5,10.0.0.6,10.0.0.1"  # (the nested quote: three IP headers)


def test_a_quoting_frames_time_is_exact_on_the_columns_too(capsys: Any) -> None:
    """Its fields come from the per-packet decoder (Columns.multi), its time from the columns' nanoseconds:
    ``frame.time_epoch`` of frame 2 is ...766003000 (tshark's), not the float's ...766002893."""
    args = ["decode", "-r", str(CAPTURES / "lo_icmp_unreachable.pcap"), "-T", "fields", "-e", "frame.number",
            "-e", "frame.time_epoch", "-e", "ip.src"]
    assert main(args) == 0
    fast = capsys.readouterr().out
    assert main([*args, "--no-columnar"]) == 0
    assert fast == capsys.readouterr().out
    assert fast.splitlines()[1] == "2\t1796061022.766003000\t127.0.0.1,127.0.0.1"


def _raw_ip_copy(tmp_path: Path) -> Path:
    """lo_icmp_unreachable.pcap as a raw IP capture (link type 101: no link header), which the columns
    do not read: its columns come from the per-packet decoder."""
    from rdmalab.capture import records

    path = tmp_path / "raw.pcap"
    write_capture(path, [(r.ns, bytes(r.data)[14:]) for r in records(CAPTURES / "lo_icmp_unreachable.pcap")],
                  linktype=101, nano=False)
    return path


def test_quotes_in_columns_made_frame_by_frame(tmp_path: Path, capsys: Any) -> None:
    """Columns the per-packet decoder makes (a link type the columns do not read) keep an ICMP error's own
    headers and its quote's fields beside them, as the columns the columnar decoder makes: before, the
    quote's UDP header made the error a RoCEv2 frame there and its second ip.src was lost."""
    path = _raw_ip_copy(tmp_path)
    args = ["decode", "-r", str(path), "-T", "fields"] + [a for n in ("frame.number", "ip.src", "udp.stream",
                                                                      "infiniband.bth.psn", "rdmalab.encap", "ip.proto")
                                                         for a in ("-e", n)]
    assert main(args) == 0
    fields = capsys.readouterr().out
    assert main([*args, "--no-columnar"]) == 0
    assert fields == capsys.readouterr().out
    assert all(n in COLUMN_NAMES for n in ("udp.stream", "rdmalab.encap", "ip.proto"))  # (the columns' path)
    assert "2\t127.0.0.1,127.0.0.1\t0\t9676492\tip\t1,17" in fields.splitlines()
    flt = ["decode", "-r", str(path), "-Y", "udp.stream == 1 && ip.proto == 1", "-T", "fields", "-e", "frame.number"]
    assert main(flt) == 0
    assert capsys.readouterr().out == "4\n"  # (the error that quotes frame 3, of conversation 1)
    assert main([*flt, "--no-columnar"]) == 0
    assert capsys.readouterr().out == "4\n"


def test_analyze_finds_the_unreachables_in_columns_made_frame_by_frame(tmp_path: Path, capsys: Any) -> None:
    """The same report for the raw IP copy as for the Ethernet capture: its 10 port unreachables
    among the findings (before, 0: the per-packet columns had no quotes)."""
    assert main(["analyze", str(_raw_ip_copy(tmp_path))]) == 0
    raw = capsys.readouterr().out.splitlines()
    assert main(["analyze", str(CAPTURES / "lo_icmp_unreachable.pcap")]) == 0
    eth = capsys.readouterr().out.splitlines()
    assert raw[1:] == eth[1:] and "10 unreachable" in "\n".join(eth)
