"""Linux cooked captures (``tcpdump -i any``, ``rdmalab capture -i any``: link types 113 and 276) read
by the columns as Ethernet frames are: the same summary lines and fields as the per-packet decoder,
the same values as the Ethernet frames they were made from, and tshark's ``sll.*`` fields.

The cooked captures are made here from the real captures in ``captures/``: each Ethernet frame's
header replaced by the cooked header a Linux host writes for it (tcpdump.org LINKTYPE_LINUX_SLL and
LINKTYPE_LINUX_SLL2: the EtherType, the ARPHRD type 1, the sender's address)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import analysis_rows, records
from rdmalab.capture.columnar import _ethernet_only, decode_block, record_blocks
from rdmalab.capture.columnar_summary import _fast_rows
from rdmalab.capture.columnar_tcp import clean_tcp
from rdmalab.capture.fieldtext import field_text
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["rxe_write_bw_loss.pcap", "rxe_rping.pcap", "siw_crc_write_bw.pcap", "siw_write_bw_midstream.pcap",
           "lo_icmp_unreachable.pcap", "synthetic_all_opcodes_rocev1.pcap", "synthetic_all_opcodes_rocev2.pcap"]
FIELDS = ["frame.number", "frame.len", "sll.pkttype", "sll.hatype", "sll.halen", "sll.etype", "sll.ifindex",
          "ip.src", "ipv6.dst", "udp.stream", "tcp.stream", "tcp.seq", "tcp.window_size", "infiniband.bth.opcode",
          "infiniband.bth.psn", "infiniband.grh.dgid", "iwarp_ddp.stag", "rdmalab.encap", "rdmalab.icrc.status"]


def _cooked(frame: bytes, version: int, pkttype: int = 0) -> bytes:
    etype, src, body = frame[12:14], frame[6:12], frame[14:]
    if version == 1:
        return struct.pack(">HHH", pkttype, 1, 6) + src + b"\0\0" + etype + body
    return etype + b"\0\0" + struct.pack(">IHBB", 3, 1, pkttype, 6) + src + b"\0\0" + body


def _write(path: Path, linktype: int, frames: list[tuple[int, bytes]]) -> Path:
    write_capture(path, frames, linktype=linktype, nano=False)
    return path


def cooked_copy(tmp_path: Path, name: str, version: int) -> Path:
    frames = [(r.ns, _cooked(bytes(r.data), version, i % 5)) for i, r in enumerate(records(ROOT / "captures" / name))]
    return _write(tmp_path / f"sll{version}_{name}", 113 if version == 1 else 276, frames)


def _fields(path: Path, *more: str) -> list[str]:
    return ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n)), *more]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", SOURCES)
def test_columns_and_the_per_packet_decoder_agree(tmp_path: Path, capsys: Any, name: str, version: int) -> None:
    path = cooked_copy(tmp_path, name, version)
    summary = decode(capsys, "-r", str(path))
    assert summary == decode(capsys, "-r", str(path), "--no-columnar")
    assert summary.count("\n") == sum(1 for _ in records(path))
    fields = decode(capsys, *_fields(path))
    assert fields == decode(capsys, *_fields(path, "--no-columnar"))


@pytest.mark.parametrize("version", [1, 2])
def test_the_columns_read_them(tmp_path: Path, version: int) -> None:
    """Not the per-packet decoder's fallback: the columns hold every frame, the summary lines of
    RoCE and TCP are made from them, as for the Ethernet frames they came from."""
    for name, layer, fast in (("rxe_write_bw_loss.pcap", "udp", _fast_rows), ("siw_crc_write_bw.pcap", "tcp", clean_tcp)):
        blk = next(record_blocks(cooked_copy(tmp_path, name, version)))
        eth = next(record_blocks(ROOT / "captures" / name))
        assert _ethernet_only(blk)
        cols, ref = decode_block(blk), decode_block(eth)
        assert cols.layers["sll"].all() and not cols.layers["eth"].any()
        assert cols.layers["sll.ifindex"].all() == (version == 2)
        assert cols.layers[layer].sum() > 0.8 * len(blk)
        assert (cols.layers[layer] == ref.layers[layer]).all()
        assert (fast(blk, cols) == fast(eth, ref)).all()


@pytest.mark.parametrize("version", [1, 2])
def test_the_same_values_as_the_ethernet_frames(tmp_path: Path, capsys: Any, version: int) -> None:
    path = cooked_copy(tmp_path, "siw_crc_write_bw.pcap", version)
    names = [n for n in FIELDS if not n.startswith(("sll.", "frame.len"))]
    args = ["-T", "fields", *(a for n in names for a in ("-e", n))]
    assert decode(capsys, "-r", str(path), *args) == decode(capsys, "-r", str(ROOT / "captures" / "siw_crc_write_bw.pcap"), *args)


def test_a_vlan_tag_after_the_cooked_header_is_read_frame_by_frame(tmp_path: Path, capsys: Any) -> None:
    frames = [(r.ns, bytes(r.data)) for r in records(ROOT / "captures" / "rxe_send_bw.pcap")]
    tagged = [(ns, _cooked(d[:12] + b"\x81\x00\x00\x07" + d[12:], 2)) for ns, d in frames]
    path = _write(tmp_path / "tagged.pcap", 276, tagged)
    assert not _ethernet_only(next(record_blocks(path)))
    out = decode(capsys, *_fields(path, "-e", "vlan.id"))
    assert out == decode(capsys, *_fields(path, "-e", "vlan.id", "--no-columnar"))
    assert out.splitlines()[-1].endswith("\t7")


def test_worker_processes_give_the_same_fields(tmp_path: Path) -> None:
    path = cooked_copy(tmp_path, "rxe_write_bw_loss.pcap", 2)
    names = ["frame.number", "sll.etype", "sll.ifindex", "ip.src", "infiniband.bth.psn", "rdmalab.icrc.status"]
    one = b"".join(field_text(path, names, workers=1))
    two = b"".join(field_text(path, names, workers=2, parallel_min_bytes=0, block_bytes=64 << 10))
    assert one == two and one.count(b"\n") == sum(1 for _ in records(path))


@requires_tshark
@pytest.mark.parametrize("version", [1, 2])
def test_tshark_reads_the_cooked_header_so(tmp_path: Path, capsys: Any, version: int) -> None:
    path = cooked_copy(tmp_path, "rxe_rping.pcap", version)
    names = ["frame.number", "sll.pkttype", "sll.hatype", "sll.halen", "sll.etype", "ip.src", "infiniband.bth.psn",
             "frame.protocols"]
    if version == 2:
        names.append("sll.ifindex")
    args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
    assert decode(capsys, *args) == tshark(*args)


@pytest.mark.parametrize("version", [1, 2])
def test_analyze_finds_what_it_finds_in_the_ethernet_frames(tmp_path: Path, capsys: Any, version: int) -> None:
    """``rdmalab analyze`` reads a cooked capture with the columns too: the same connections, messages
    and findings as in the capture it was made from (the first line names the file)."""
    def per_packet(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a frame went to the per-packet decoder")

    src = ROOT / "captures" / "rxe_write_bw_loss.pcap"
    path = cooked_copy(tmp_path, src.name, version)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(analysis_rows, "decode_record", per_packet)
        assert main(["analyze", str(path)]) == 0
    cooked = capsys.readouterr().out.splitlines()
    assert main(["analyze", str(src)]) == 0
    ref = capsys.readouterr().out.splitlines()
    assert cooked[1:] == ref[1:] and len(ref) > 10
    assert cooked[0].split(":", 1)[1] == ref[0].split(":", 1)[1]


@pytest.mark.parametrize("version", [1, 2])
def test_a_frame_without_ip_shows_the_senders_address(tmp_path: Path, capsys: Any, version: int) -> None:
    """Where the summary line of an Ethernet frame without IP shows its MAC addresses, a cooked one has
    only the sender's (tshark's Source column: the cooked header's address; no Destination)."""
    path = cooked_copy(tmp_path, "rxe_write_bw_loss.pcap", version)
    arp = [line for line in decode(capsys, "-r", str(path)).splitlines() if " ARP " in line]
    eth = [line for line in decode(capsys, "-r", str(ROOT / "captures" / "rxe_write_bw_loss.pcap")).splitlines()
           if " ARP " in line]
    assert len(arp) == len(eth) == 2
    for a, e in zip(arp, eth, strict=True):
        src = e.split()[2]  # (frame, time, source, arrow, destination, ...)
        assert a.split()[2:4] == [src, "→"] and a.split()[4] == "ARP"


def _padded_frames(version: int) -> list[tuple[int, bytes]]:
    """Cooked frames whose datagram is followed by octets: zeros (padding up to the 60 octets of the cooked
    frame, as an incoming frame the NIC padded keeps them), other octets (a trailer), both, none, after an
    IPv4 TCP ACK, a UDP datagram, an ARP packet, an IPv6 datagram and an 802.1Q tag."""
    import random

    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import ARP, Dot1Q, Ether

    rnd = random.Random(version)
    bodies = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(flags="A", sport=40000, dport=40001),
              Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=40000, dport=40001),
              Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ARP(psrc="10.0.0.1", pdst="10.0.0.2"),
              Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(src="fe80::1", dst="fe80::2") / UDP(sport=40000, dport=40001),
              Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5) / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(flags="A", sport=40000, dport=40001)]
    out = []
    for i in range(200):
        eth = bytes(bodies[i % len(bodies)])
        n = rnd.choice([0, 1, 2, 4, 5, 6, 8, 12, 20])
        tail = bytes(n) if i % 3 else bytes(rnd.randrange(256) for _ in range(n))
        if i % 7 == 0:
            tail = bytes(max(0, 60 - 16 - (len(eth) - 14))) + b"\x12\x34\x56\x78"  # padding, then a trailer
        out.append((1_000_000_000 + i * 1000, _cooked(eth + tail, version)))
    return out


def _trailer_key(k: str) -> bool:
    """A padding or trailer field of the JSON (not tshark's expert info under it, ``sll.trailer_tree``)."""
    return ("padding" in k or "trailer" in k) and not k.endswith("_tree")


@requires_tshark
@pytest.mark.parametrize("version", [1, 2])
def test_padding_and_trailers_after_the_datagram_as_tshark_divides_them(tmp_path: Path, capsys: Any,
                                                                         version: int) -> None:
    """The octets after a cooked frame's datagram: ``eth.padding`` (zeros up to the 60-octet minimum, counted
    from the cooked header's start) and ``sll.trailer`` (the rest: Linux cooked captures say no FCS is
    there; ``vlan.trailer`` after a tag), in fields, filters and the JSON's ``sll`` layer, as tshark has them
    (it showed no padding or trailer before, on either path)."""
    path = _write(tmp_path / f"padded{version}.pcap", 113 if version == 1 else 276, _padded_frames(version))
    names = ["frame.number", "frame.protocols", "eth.padding", "sll.trailer", "vlan.trailer", "eth.fcs"]
    args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
    want = tshark(*args)
    assert "\t\t00000000" in want and "12345678" in want  # (both kinds are there)
    assert decode(capsys, *args) == want
    assert decode(capsys, *args, "--no-columnar") == want
    for flt in ("sll.trailer", "eth.padding", "vlan.trailer", "sll.trailer == 12:34:56:78"):
        sel = ["-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"]
        assert decode(capsys, *sel) == tshark(*sel), flt
    import json

    mine = json.loads(decode(capsys, "-r", str(path), "-T", "json"))
    theirs = json.loads(tshark("-r", str(path), "-T", "json"))
    for m, t in zip(mine, theirs, strict=True):
        for layer in ("sll", "vlan"):
            got = {k: v for k, v in m["_source"]["layers"].get(layer, {}).items() if _trailer_key(k)}
            exp = {k: v for k, v in t["_source"]["layers"].get(layer, {}).items() if _trailer_key(k)}
            assert got == exp, (m["_source"]["layers"]["frame"]["frame.number"], layer)
