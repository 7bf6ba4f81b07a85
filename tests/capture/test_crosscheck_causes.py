"""``crosscheck`` names a difference's real cause, and files nothing under a defect without its signature.

A RoCEv2 capture whose UDP source port is sometimes 69 (a Huawei NIC picks source ports so):
tshark tries the lower port first, finds TFTP for 69 in its port table and never looks at the
BTH, while rdmalab decodes the packets by their destination port 4791.  The differences are
tshark's choice of dissector, named with the port ("tshark dissected UDP port 69 as TFTP (its
port table)"), not unexplained and not a Wireshark defect (CNP 0x81, FLUSH ...) that needs the
InfiniBand dissector to have run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tshark_cli import decode

import rdmalab.capture.crosscheck as cc
from rdmalab.capture import CapturedPacket, read, write_pcap
from rdmalab.capture import fields as fields_mod
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.defects import DissectorTables, dissector_choice, explain
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.ib import BTH, RETH
from rdmalab.wire.opcodes import CNP_OPCODE

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
TFTP = "tshark dissected UDP port 69 as TFTP (its port table)"

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")


def _frames(sport: int) -> list[bytes]:
    """Frames 1, 3, 4, 5 from UDP port ``sport``, frame 2 from 49152 (tshark decodes that one as
    RoCEv2); frame 4 is a CNP 0x81, frame 5 a FLUSH: opcodes a known Wireshark defect covers."""
    send = BTH(opcode=0x04, destqp=0x11, psn=1)
    return [
        encode_rocev2(send, [], b"hello world, 24 bytes!!!", src_port=sport),
        encode_rocev2(send.replace(psn=2), [], b"hello world, 24 bytes!!!", src_port=49152),
        encode_rocev2(BTH(opcode=0x0A, destqp=0x11, psn=3), [RETH(va=0x1000, r_key=5, dma_length=8)], b"A" * 8,
                      src_port=sport),
        encode_rocev2(BTH(opcode=CNP_OPCODE, becn=1, destqp=0x11), [], bytes(16), src_port=sport, check=False),
        encode_rocev2(BTH(opcode=0x1C, destqp=0x11, psn=4), [], b"", src_port=sport, check=False),
    ]


@pytest.fixture
def port69(tmp_path: Path) -> Path:
    path = tmp_path / "rocev2_sport69.pcap"
    write_pcap(path, _frames(69))
    return path


def test_rdmalab_decodes_the_port_69_frames_as_rocev2_with_good_icrcs(port69: Path) -> None:
    got = list(read(port69))
    assert [cp.packet.encap for cp in got] == ["rocev2"] * 5
    assert [cp.packet.crc_status for cp in got] == ["good"] * 5


@requires_tshark
@pytest.mark.tshark
def test_crosscheck_names_tsharks_port_table_as_the_cause(port69: Path) -> None:
    report = crosscheck(port69)
    assert report.packets == report.wireshark_packets == 5
    assert not report.unexplained, report.text()
    assert report.dissector_choices == {TFTP: [1, 3, 4, 5]}
    assert report.results
    for r in report.results:
        assert r.frame != 2, r  # tshark decoded frame 2 as RoCEv2: it agrees field by field
        assert r.cause is not None and r.cause.text == TFTP and r.defect is None, r
        assert str(r).endswith("-> " + TFTP)
    # CNP 0x81's and FLUSH's defects do not claim the ICRC: tshark never saw a BTH there
    assert {4, 5} <= {r.frame for r in report.results if r.key == "infiniband.invariant.crc"}
    text = report.text()
    assert "0 unexplained" in text and f"{TFTP}: " in text and "frame(s) 1, 3, 4, 5" in text
    assert "known defect" not in text


@requires_tshark
@pytest.mark.tshark
def test_the_same_packets_from_an_ephemeral_port_go_to_their_defects(tmp_path: Path) -> None:
    """Control: from port 50000 tshark dissects the BTH, and CNP 0x81 / FLUSH are their known defects."""
    path = tmp_path / "ephemeral.pcap"
    write_pcap(path, _frames(50000))
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    assert report.dissector_choices == {}
    ids = {r.frame: r.defect.id for r in report.results if r.defect and r.key == "infiniband.invariant.crc"}
    assert ids == {4: "cnp-0x81", 5: "flush-atomic-write"}


@requires_tshark
@pytest.mark.tshark
def test_rdmalabs_own_miss_stays_unexplained(port69: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rdmalab dropping a field tshark shows is an rdmalab bug, in frame 2 (dissected alike by both)
    as in a frame tshark gave to TFTP (where tshark shows no such field, so there is no difference)."""
    real = fields_mod.frame_fields

    def dropped(cp, *, raw=False):  # type: ignore[no-untyped-def]
        out = real(cp, raw=raw)
        out.pop("infiniband.invariant.crc", None)
        out.pop("infiniband.bth.psn", None)
        return out

    monkeypatch.setattr(cc, "frame_fields", dropped)
    report = crosscheck(port69)
    missed = sorted((r.frame, r.key, r.status) for r in report.unexplained)
    assert missed == [(2, "infiniband.bth.psn", "only_wireshark"), (2, "infiniband.invariant.crc", "only_wireshark")]


@requires_tshark
@pytest.mark.tshark
def test_iwarp_on_tcp_port_80_is_https_port_not_a_mid_stream_capture(tmp_path: Path) -> None:
    """The synthetic iWARP stream moved to TCP port 80: tshark hands it to HTTP, which waits for the
    end of a header; its MPA Request/Reply are in the capture, so the mid-stream defect must not
    claim it."""
    frames = []
    for cp in read(CAPTURES / "synthetic_iwarp_mpa_crc.pcap"):
        b = bytearray(cp.packet.data)
        tcp = 14 + (b[14] & 0x0F) * 4
        for at in (tcp, tcp + 2):
            if int.from_bytes(b[at : at + 2], "big") == 33333:
                b[at : at + 2] = (80).to_bytes(2, "big")
        frames.append((cp.timestamp, bytes(b)))
    path = tmp_path / "iwarp80.pcap"
    write_pcap(path, frames)
    assert sum(len(cp.pdus) for cp in read(path)) == 13  # rdmalab follows the stream from its MPA frames
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    text = "tshark dissected TCP port 80 as HTTP (its port table), which kept the bytes as a segment to reassemble"
    assert list(report.dissector_choices) == [text]
    assert not [r for r in report.results if r.defect is not None]


# ----------------------------------------------------------------------------- without tshark

TABLES = DissectorTables(ports={("udp.port", 69): "tftp", ("udp.port", 4791): "infiniband"},
                         heuristics={"udp": frozenset({"stun"})}, names={"tftp": "TFTP", "stun": "STUN"})


def _cp(frame: bytes, tmp_path: Path) -> CapturedPacket:
    path = tmp_path / "one.pcap"
    write_pcap(path, [frame])
    return next(read(path))


def test_a_defect_needs_its_dissector_to_have_seen_the_frame(tmp_path: Path) -> None:
    cnp = _cp(_frames(69)[3], tmp_path)
    under_tftp = {"frame.protocols": ["eth:ethertype:ip:udp:tftp"]}
    under_ib = {"frame.protocols": ["eth:ethertype:ip:udp:infiniband"]}
    assert explain(cnp, under_tftp, "infiniband.invariant.crc", "only_rdmalab") is None
    d = explain(cnp, under_ib, "infiniband.invariant.crc", "only_rdmalab")
    assert d is not None and d.id == "cnp-0x81"
    # a view without frame.protocols (tshark -T fields): Wireshark's own fields tell
    assert explain(cnp, {"udp.srcport": ["69"]}, "infiniband.invariant.crc", "only_rdmalab") is None
    d = explain(cnp, {"infiniband.bth.opcode": ["129"]}, "infiniband.invariant.crc", "only_rdmalab")
    assert d is not None and d.id == "cnp-0x81"


def test_dissector_choice_names_the_port_or_the_heuristic_or_nothing(tmp_path: Path) -> None:
    cp = _cp(_frames(69)[0], tmp_path)
    asked: list[int] = []

    def tables() -> DissectorTables:
        asked.append(1)
        return TABLES

    assert dissector_choice(cp, {"frame.protocols": ["eth:ethertype:ip:udp:infiniband"]}, tables) is None
    assert not asked  # the protocols agree: the tables are not needed
    c = dissector_choice(cp, {"frame.protocols": ["eth:ethertype:ip:udp:tftp"]}, tables)
    assert c is not None and c.text == TFTP and c.covers("infiniband.bth.psn") and not c.covers("udp.srcport")
    c = dissector_choice(cp, {"frame.protocols": ["eth:ethertype:ip:udp:stun"]}, tables)
    assert c is not None and c.port is None
    assert c.text == "tshark's STUN heuristic dissector claimed the UDP payload (its heuristic list)"
    # a protocol neither table names for this frame: no cause to name, the difference stays unexplained
    assert dissector_choice(cp, {"frame.protocols": ["eth:ethertype:ip:udp:dns"]}, tables) is None
    assert dissector_choice(cp, {"frame.protocols": ["eth:ethertype:ip:udp:data"]}, tables) is None
    assert dissector_choice(cp, {}, tables) is None  # no frame.protocols in the view


def test_the_tables_parse_tsharks_reports() -> None:
    t = DissectorTables.parse("udp.port\t69\ttftp\ntcp.port\t80\thttp\nethertype\t2048\tip\n",
                              "udp\tstun\tT\nudp\txml\tF\n",
                              "Trivial File Transfer Protocol\tTFTP\ttftp\n")
    assert t.ports == {("udp.port", 69): "tftp", ("tcp.port", 80): "http"}
    assert t.heuristics == {"udp": frozenset({"stun"})}  # xml is disabled (F)
    assert t.names == {"tftp": "TFTP"}


def _short_datagrams(path: Path, snap: bool = False) -> None:
    """Real RoCEv2 frames (RC writes and their ACKs, CM MADs), each UDP datagram cut short by its IP and UDP
    lengths (whole in the capture, or, ``snap``, cut by the capture too) to 12 to 19 octets after the UDP
    header, or 4 octets short of its MAD and ICRC: too short for its headers and its ICRC."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    with CaptureWriter(path) as w:
        for name in ("rxe_write_bw.pcap", "rxe_write_bw_cm.pcap"):
            for i, r in enumerate(records(CAPTURES / name)):
                d = bytearray(r.data)
                if d[12:14] != b"\x08\x00" or d[23] != 17 or d[36:38] != b"\x12\xb7":
                    continue
                udp = int.from_bytes(d[38:40], "big")
                keep = 8 + (12 + i % 8 if udp < 200 else udp - 8 - 4)
                d[16:18] = (20 + keep).to_bytes(2, "big")
                d[38:40] = keep.to_bytes(2, "big")
                cut = 14 + 20 + keep
                w.write(bytes(d[:cut - 2] if snap else d[:cut]), r.ns or 0, wire_len=cut)


@requires_tshark
@pytest.mark.tshark
def test_headers_into_the_icrc_are_named(tmp_path: Path) -> None:
    """A RoCEv2 datagram too short for its headers and ICRC: tshark reads a BTH from any 12 octets, an AETH
    or a MAD from the ICRC's octets, then shows what is left as ICRC or VCRC; rdmalab names the header that
    does not fit truncated.  Each difference goes to that known defect, none is left unexplained; the same
    datagrams cut by the capture as well are not the defect's (the frame is not whole)."""
    path = tmp_path / "short.pcap"
    _short_datagrams(path)
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    ids = {r.defect.id for r in report.explained if r.defect}
    assert "headers-into-icrc" in ids
    keys = {r.key for r in report.explained if r.defect and r.defect.id == "headers-into-icrc"}
    assert {"infiniband.bth.opcode", "infiniband.invariant.crc"} <= keys
    cut = tmp_path / "short_cut.pcap"
    _short_datagrams(cut, snap=True)
    report = crosscheck(cut)
    assert "headers-into-icrc" not in {r.defect.id for r in report.explained if r.defect}


def _rewritten(path: Path, source: str, change: dict[int, tuple[int, bytes]]) -> None:
    """The frames of ``source``, frame ``n`` of ``change`` with octets from its offset replaced."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    with CaptureWriter(path) as w:
        for n, r in enumerate(records(CAPTURES / source), start=1):
            d = bytearray(r.data)
            if n in change:
                at, octets = change[n]
                d[at:at + len(octets)] = octets
            w.write(bytes(d), r.ns or 0)


def _roce_frames(source: str) -> list[int]:
    """The numbers of ``source``'s RoCEv2 frames (IPv4, UDP to 4791), with their opcodes."""
    return [n for n, cp in enumerate(read(CAPTURES / source), start=1) if cp.packet.encap == "rocev2"]


@requires_tshark
@pytest.mark.tshark
def test_an_opcode_the_iba_does_not_name_is_tsharks_vendor_data(tmp_path: Path) -> None:
    """Reserved and manufacturer-specific opcodes: tshark shows every octet after the BTH as vendor data, the
    ICRC's included, rdmalab the ICRC at the end; named, none unexplained.  A named opcode put in their place
    (an RDMA WRITE Only of the same bytes) is no such difference."""
    ops = (0x15, 0x1E, 0x3F, 0x60, 0x83, 0x9F, 0xC0, 0xDF, 0xE0, 0xF3, 0xFF)
    frames = _roce_frames("rxe_write_bw.pcap")
    path = tmp_path / "unnamed.pcap"
    _rewritten(path, "rxe_write_bw.pcap", {n: (42, bytes([ops[i % len(ops)]])) for i, n in enumerate(frames)})
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    named = {r.frame for r in report.explained if r.defect and r.defect.id == "unnamed-opcode-vendor"}
    assert named == set(frames)


@requires_tshark
@pytest.mark.tshark
def test_an_unnamed_opcode_in_an_icmp_errors_quote_is_named(tmp_path: Path) -> None:
    """The same in the RoCEv2 packets the real port unreachables quote (IPv4 and IPv6): tshark shows the
    quote's octets after its BTH as vendor data."""
    at = {n: next(la.offset for la in cp.packet.quoted.layers if isinstance(la.header, BTH))
          for n, cp in enumerate(read(CAPTURES / "lo_icmp_unreachable.pcap"), start=1)
          if cp.packet.quoted is not None and cp.packet.quoted.get(BTH) is not None}
    assert len(at) >= 8
    path = tmp_path / "quoted.pcap"
    _rewritten(path, "lo_icmp_unreachable.pcap", {n: (o, bytes([(0x34, 0xC5)[n % 2]])) for n, o in at.items()})
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    assert {r.frame for r in report.explained if r.defect and r.defect.id == "unnamed-opcode-vendor"} == set(at)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("snap", [70, 100, 212, 300])
def test_a_mad_cut_by_a_snap_length_is_named(snap: int, tmp_path: Path) -> None:
    """The CM MADs of real rdma_cm captures cut at a snap length: tshark shows none of their MAD fields
    once the cut falls inside the MAD (the packet's length is checked first), rdmalab those captured;
    named, none unexplained."""
    from rdmalab.capture.pcapwriter import CaptureWriter
    from rdmalab.wire.mad import MADHeader

    path = tmp_path / "cut.pcap"
    cut = 0
    with CaptureWriter(path) as w:
        for name in ("rxe_write_bw_cm.pcap", "rxe_rping.pcap"):
            for cp in read(CAPTURES / name):
                d = cp.packet.data
                mad = cp.packet.get(MADHeader) is not None and len(d) > snap
                cut += mad
                w.write(d[:snap] if mad else d, cp.epoch_ns, wire_len=cp.wire_length or len(d))
    assert cut == 17
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    named = {r.frame for r in report.explained if r.defect and r.defect.id == "cut-mad-not-parsed"}
    assert len(named) == (cut if snap >= 100 else 0)  # (cut before the MAD: no MAD field of rdmalab's either)


def test_every_mad_field_rdmalab_declares_is_among_the_cut_mad_fields() -> None:
    from fnmatch import fnmatchcase

    from rdmalab.capture.defects import MAD_FIELDS

    transport = ("bth", "grh", "lrh", "rwh", "deth", "rdeth", "reth", "aeth", "atomiceth", "atomicacketh", "immdt",
                 "ieth", "invariant", "variant")
    mad = [n for n in cc.known_ws_names() if n.startswith("infiniband.") and n.split(".")[1] not in transport]
    assert len(mad) > 200
    assert [n for n in mad if not any(fnmatchcase(n, p) for p in MAD_FIELDS)] == []


@requires_tshark
@pytest.mark.tshark
def test_octets_after_the_headers_of_an_opcode_without_payload_are_named(tmp_path: Path) -> None:
    """RDMA WRITE packets (a RETH and a payload) made ACKs and Atomic ACKs (no payload): tshark shows no ICRC
    (only when exactly 4 octets are left after its headers), rdmalab the ICRC and a malformed payload."""
    writes = [n for n, cp in enumerate(read(CAPTURES / "rxe_write_bw.pcap"), start=1)
              if (b := cp.packet.get(BTH)) is not None and b.opcode in (0x06, 0x07, 0x08, 0x0A)]
    assert len(writes) >= 10
    path = tmp_path / "acks.pcap"
    _rewritten(path, "rxe_write_bw.pcap", {n: (42, bytes([(0x11, 0x12)[i % 2]])) for i, n in enumerate(writes)})
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    named = {r.frame for r in report.explained if r.defect and r.defect.id == "octets-after-headers-no-crc"}
    assert named == set(writes)


def _with_flags(path: Path, flags: int) -> list[CapturedPacket]:
    """siw's rping with the TCP flags of the client's first Send (frame 8, [PSH, ACK]) changed; the frames
    of the undamaged capture."""
    original = list(read(CAPTURES / "siw_rping.pcap"))
    assert original[7].pdus and original[7].packet.data[14 + 20 + 13] == 0x18
    _rewritten(path, "siw_rping.pcap", {8: (14 + 20 + 13, bytes([flags]))})
    return original


def _same_pdus(path: Path, original: list[CapturedPacket], frames: set[int]) -> None:
    damaged = list(read(path))
    for n in frames:
        ours = [[la.header for la in p.layers] for p in damaged[n - 1].pdus]
        assert ours and ours == [[la.header for la in p.layers] for p in original[n - 1].pdus], n


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("flags", [0x1A, 0x1B])
def test_a_syn_with_ack_in_step_goes_on_with_the_stream(flags: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SYN (and FIN) set on a Send whose payload starts where its direction is: rdmalab takes it for a damaged
    flag and follows both directions' FPDUs on, the undamaged capture's, as tshark does; nothing to name."""
    path = tmp_path / "syn.pcap"
    original = _with_flags(path, flags)
    report = crosscheck(path)
    assert not report.unexplained and not report.explained, report.text()
    _same_pdus(path, original, {n for n, cp in enumerate(original, start=1) if cp.pdus})
    for mode in ([], ["-T", "fields", "-e", "frame.number", "-e", "iwarp_ddp.msn", "-e", "tcp.stream"]):
        assert decode(capsys, "-r", str(path), *mode) == decode(capsys, "-r", str(path), *mode, "--no-columnar")


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("flags", [0x02, 0x0A, 0x0B])
def test_a_syn_without_ack_is_tsharks_new_conversation(flags: int, tmp_path: Path) -> None:
    """SYN set and ACK not on that Send: tshark starts a new conversation (port numbers reused) and decodes no
    iWARP after it in either direction; rdmalab follows both directions' FPDUs on, the undamaged capture's.
    Named, none unexplained."""
    path = tmp_path / "syn.pcap"
    original = _with_flags(path, flags)
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    named = {r.frame for r in report.explained if r.defect and r.defect.id == "tcp-syn-new-conversation"}
    assert named == {n for n, cp in enumerate(original, start=1) if cp.pdus and n >= 8}
    _same_pdus(path, original, named)


@requires_tshark
@pytest.mark.tshark
def test_tsharks_sequence_analysis_after_a_damaged_sequence_number_is_named(tmp_path: Path) -> None:
    """siw's rping with the sequence number of an ACK without payload (frame 16) moved far ahead: tshark then
    takes the next segments of that direction for out of order and retransmissions and decodes no iWARP in
    them; rdmalab, for which a segment without payload moves nothing, decodes the FPDUs tshark decodes in the
    undamaged capture.  Named, none unexplained, and rdmalab's PDUs are the undamaged capture's."""
    seq_at = 14 + 20 + 4
    original = list(read(CAPTURES / "siw_rping.pcap"))
    assert original[15].packet.payload_length == 0
    seq = int.from_bytes(original[15].packet.data[seq_at:seq_at + 4], "big")
    path = tmp_path / "moved.pcap"
    _rewritten(path, "siw_rping.pcap", {16: (seq_at, ((seq + 0x0C000000) % 2**32).to_bytes(4, "big"))})
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    named = {r.frame for r in report.explained if r.defect and r.defect.id == "tcp-analysis-not-new"}
    assert {19, 21} <= named
    damaged = list(read(path))
    for n in named:
        ours = [[la.header for la in p.layers] for p in damaged[n - 1].pdus]
        assert ours and ours == [[la.header for la in p.layers] for p in original[n - 1].pdus]
    assert not crosscheck(CAPTURES / "siw_rping.pcap").unexplained


# ----------------------------------------------------------------------------- a payload rdmalab leaves as bytes


def _tunnelled() -> list[bytes]:
    """UDP datagrams whose payload rdmalab leaves as bytes and tshark dissects by its port: VXLAN (4789)
    carrying an Ethernet frame, VXLAN-GPE (4790) carrying an IPv4 datagram, Geneve (6081) carrying an
    Ethernet frame; then one to a port no table names."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN
    from scapy.packet import Raw

    inner = bytes(Ether(src="02:00:00:00:00:09", dst="02:00:00:00:00:0a") / IP(src="192.168.7.1", dst="192.168.7.2", ttl=3)
                  / UDP(sport=1111, dport=2222) / (b"x" * 20))
    outer = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64)
    gpe = bytes([0x0C, 0, 0, 0x01, 0, 0, 0x2A, 0])  # (flags: next protocol present; next protocol 1: IPv4)
    geneve = bytes([0, 0, 0x65, 0x58, 0, 0, 0x2A, 0])  # (no options; protocol 0x6558: an Ethernet frame)
    return [bytes(outer / UDP(sport=50000, dport=4789) / VXLAN(vni=42) / Raw(inner)),
            bytes(outer / UDP(sport=50001, dport=4790) / Raw(gpe + inner[14:])),
            bytes(outer / UDP(sport=50002, dport=6081) / Raw(geneve + inner)),
            bytes(outer / UDP(sport=50003, dport=40000) / Raw(inner))]


@requires_tshark
@pytest.mark.tshark
def test_crosscheck_names_the_tunnel_tshark_opened(tmp_path: Path) -> None:
    """tshark dissects what a tunnel carries, and repeats the names of the outer headers' fields (eth.src,
    ip.ttl, udp.srcport ...) for the inner ones; rdmalab reads the outer ones alone.  The outer values agree,
    and the difference is named as tshark's port table's choice, not left unexplained."""
    path = tmp_path / "tunnels.pcap"
    write_pcap(path, _tunnelled())
    report = crosscheck(path)
    assert report.packets == report.wireshark_packets == 4
    assert not report.unexplained, report.text()
    assert report.dissector_choices == {
        "tshark dissected UDP port 4789 as VXLAN (its port table)": [1],
        "tshark dissected UDP port 4790 as VXLAN (GPE) (its port table)": [2],
        "tshark dissected UDP port 6081 as Geneve (its port table)": [3],
    }
    keys = {r.key for r in report.results}
    assert {"eth.src", "ip.ttl", "udp.srcport"} <= keys


def test_a_tunnel_explains_only_the_fields_inside_it(tmp_path: Path) -> None:
    """The fields tshark found inside the payload are explained by its choice; a difference in the frame's
    own headers is not (the outer IPv4 TTL said otherwise stays unexplained)."""
    cp = _cp(_tunnelled()[0], tmp_path)
    tables = DissectorTables(ports={("udp.port", 4789): "vxlan"}, heuristics={}, names={"vxlan": "VXLAN"})
    inside = cp.packet.payload_offset
    assert inside == 42

    def view(outer_ttl: str) -> dict[str, list[cc.WsField]]:
        def f(name: str, show: str, pos: int | None, size: int = 1) -> cc.WsField:
            return cc.WsField(name, show, "", pos, size)

        return {"frame.protocols": [f("frame.protocols", "eth:ethertype:ip:udp:vxlan:eth:ethertype:ip:udp:data", None)],
                "ip.ttl": [f("ip.ttl", outer_ttl, 22), f("ip.ttl", "3", inside + 8 + 14 + 8)],
                "udp.dstport": [f("udp.dstport", "4789", 36, 2), f("udp.dstport", "2222", inside + 8 + 14 + 22, 2)],
                "vxlan.vni": [f("vxlan.vni", "42", inside + 4, 3)]}

    def compared(outer_ttl: str) -> dict[str, bool]:  # (the fields in the view: explained or not)
        report = cc.CrosscheckReport("tunnel")
        cc.compare_packet(cp, view(outer_ttl), report, cc.known_ws_names(), lambda: tables)
        return {r.key: r.explained for r in report.results if r.key in ("ip.ttl", "udp.dstport")}

    assert compared("64") == {"ip.ttl": True, "udp.dstport": True}
    assert compared("65") == {"ip.ttl": False, "udp.dstport": True}


def test_rdma_rdmalab_did_not_read_is_never_a_choice(tmp_path: Path) -> None:
    """tshark finding iWARP or InfiniBand in a payload rdmalab left as bytes is rdmalab's own miss (or a defect's
    signature, checked as such), never put down to tshark's heuristic or port table."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    outer = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
    tables = DissectorTables(ports={("udp.port", 4789): "vxlan", ("udp.port", 4791): "infiniband"},
                             heuristics={"tcp": frozenset({"iwarp_mpa"}), "udp": frozenset({"infiniband"})},
                             names={"vxlan": "VXLAN", "iwarp_mpa": "IWARP_MPA", "infiniband": "InfiniBand"})
    tcp = _cp(bytes(outer / TCP(sport=40000, dport=18515, flags="PA") / Raw(bytes(40))), tmp_path)
    assert not tcp.pdus
    assert dissector_choice(tcp, {"frame.protocols": ["eth:ethertype:ip:tcp:iwarp_mpa"]}, lambda: tables) is None
    udp = _cp(bytes(outer / UDP(sport=4789, dport=40000) / Raw(bytes(40))), tmp_path)
    assert dissector_choice(udp, {"frame.protocols": ["eth:ethertype:ip:udp:infiniband"]}, lambda: tables) is None
    c = dissector_choice(udp, {"frame.protocols": ["eth:ethertype:ip:udp:vxlan:eth"]}, lambda: tables)
    assert c is not None and c.port == 4789 and c.inside == 42
