"""Damaged frames of the link types the columns read besides Ethernet (Linux cooked v1 and v2, ERF
Ethernet records, raw IP) and of Ethernet itself: random octets changed, some records cut (never below the
link header), and the columns' summary lines and fields must be the per-packet decoder's."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from test_cooked_columns import cooked_copy
from test_erf_columns import erf_copy
from test_rawip_columns import rawip_copy
from tshark_cli import decode

from rdmalab.capture import records
from rdmalab.capture.pcapwriter import write_capture

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["frame.number", "frame.len", "frame.cap_len", "sll.pkttype", "sll.etype", "ip.src", "ip.proto", "udp.length",
          "tcp.seq", "tcp.len", "infiniband.bth.psn", "infiniband.bth.opcode", "rdmalab.encap", "rdmalab.icrc.status",
          "tcp.window_size", "udp.stream", "tcp.stream", "iwarp_ddp.stag", "rdmalab.payload.len"]
SOURCES = ["rxe_write_bw_loss.pcap", "siw_crc_write_bw.pcap", "rxe_rping.pcap", "lo_icmp_unreachable.pcap",
           "synthetic_all_opcodes_rocev1.pcap"]
HEADER = {"eth": 14, "sll1": 16, "sll2": 20, "erf": 32, "rawip": 1}  # (ERF: its 16 octets, the pad octets, Ethernet's 14)


def _damaged(src: Path, dest: Path, rng: random.Random, keep: int) -> Path:
    frames = []
    recs = list(records(src))
    for r in recs:
        body = bytearray(r.data)
        for _ in range(rng.choice((0, 0, 1, 2))):
            if body:
                body[rng.randrange(min(len(body), 96))] = rng.randrange(256)
        if len(body) > keep and rng.random() < 0.03:  # cut by a snap length, the link header kept
            body = body[:rng.randrange(keep, len(body))]
        frames.append((r.ns, bytes(body)))
    write_capture(dest, frames, linktype=recs[0].linktype, nano=False)
    return dest


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["eth", "sll1", "sll2", "erf", "rawip"])
def test_columns_read_damaged_frames_as_the_per_packet_decoder(tmp_path: Path, capsys: Any, kind: str, seed: int) -> None:
    rng = random.Random(f"{kind}{seed}")
    name = SOURCES[(seed + len(kind)) % len(SOURCES)]
    src = ROOT / "captures" / name if kind == "eth" else rawip_copy(tmp_path, name) if kind == "rawip" else \
        erf_copy(tmp_path, name) if kind == "erf" else cooked_copy(tmp_path, name, int(kind[-1]))
    path = _damaged(src, tmp_path / f"damaged_{kind}.pcap", rng, HEADER[kind])
    summary = decode(capsys, "-r", str(path))
    assert summary == decode(capsys, "-r", str(path), "--no-columnar"), name
    args = ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n))]
    assert decode(capsys, *args) == decode(capsys, *args, "--no-columnar"), name


def test_ipv4_headers_whose_payload_is_not_read(tmp_path: Path, capsys: Any) -> None:
    """A first fragment (More Fragments set), a total length under the header's, a header length under
    20 octets: the per-packet decoder reads nothing after the IPv4 header (tshark: a fragment, "Bogus IP
    length", "Bogus IP header length"), and neither do the columns (they read the UDP header and the
    BTH after all three)."""
    from rdmalab.wire.frame import encode_rocev2
    from rdmalab.wire.ib import BTH

    good = encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40)
    frames = []
    for at, value in ((20, good[20] | 0x20), (17, 1), (14, 0x43), (None, None)):
        d = bytearray(good)
        if at is not None:
            d[at] = value
        frames.append(bytes(d))
    path = tmp_path / "ip.pcap"
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(frames)], nano=False)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "udp.length", "-e", "infiniband.bth.psn",
            "-e", "rdmalab.encap", "-e", "udp.stream"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert out.splitlines() == ["1\t\t\teth\t", "2\t\t\teth\t", "3\t\t\teth\t", "4\t64\t5\trocev2\t0"]
    assert decode(capsys, "-r", str(path)) == decode(capsys, "-r", str(path), "--no-columnar")


def test_roce_packets_whose_headers_do_not_add_up(tmp_path: Path, capsys: Any) -> None:
    """The per-packet decoder's rules (rdmalab.wire.packet.decode_transport) on the columns too: an
    extended header cut short by the datagram's end (the ICRC is still read at the end, the rest of the
    packet is its payload), an unknown opcode (all after the BTH is payload), an opcode without payload
    that has some, a pad larger than the payload."""
    from rdmalab.wire.frame import encode_rocev2
    from rdmalab.wire.ib import AETH, BTH

    ack = bytearray(encode_rocev2(BTH(opcode=0x11, destqp=0x21, psn=9), [AETH.ack(3)]))
    short = bytearray(ack)
    short[16:18] = (int.from_bytes(ack[16:18], "big") - 1).to_bytes(2, "big")  # the IP datagram one octet short
    unknown = bytearray(ack)
    unknown[42] = 0x1F  # an opcode of no table
    extra = bytearray(encode_rocev2(BTH(opcode=0x04, destqp=0x21, psn=9), [], b"xyz12345"))
    extra[42] = 0x11  # an RC Acknowledge, then 4 octets more than its AETH ("xyz1": MSN 0x797a31)
    pad = bytearray(encode_rocev2(BTH(opcode=0x04, destqp=0x21, psn=9), [], b""))
    pad[43] |= 0x10  # a pad of 1 where there is no payload
    path = tmp_path / "roce.pcap"
    frames = [bytes(f) for f in (ack, short, unknown, extra, pad)]
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(frames)], nano=False)
    names = ["frame.number", "infiniband.bth.opcode", "infiniband.aeth.msn", "rdmalab.payload.len", "rdmalab.icrc.status"]
    args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert [line.split("\t")[2:] for line in out.splitlines()] == [
        ["3", "0", "good"], ["", "3", "bad"], ["", "4", "bad"], ["7961137", "4", "bad"], ["", "0", "bad"]]


def test_an_ip_version_its_ethertype_does_not_name(tmp_path: Path, capsys: Any) -> None:
    """An IPv4 header after the IPv6 EtherType, and the other way round: Wireshark reads nothing after
    the EtherType ("Bogus IP version"), nor do the columns; the per-packet decoder read the header its
    version nibble named."""
    from rdmalab.wire.frame import encode_rocev2
    from rdmalab.wire.ib import BTH

    v4 = bytearray(encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40))
    v6 = bytearray(encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40, src_ip="fe80::1", dst_ip="fe80::2"))
    v4[12:14], v6[12:14] = b"\x86\xdd", b"\x08\x00"
    path = tmp_path / "version.pcap"
    write_capture(path, [((1000 + i) * 10**9, bytes(d)) for i, d in enumerate((v4, v6))], nano=False)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src", "-e",
            "infiniband.bth.psn", "-e", "rdmalab.encap"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar") == "1\t\t\t\teth\n2\t\t\t\teth\n"
    assert "expected 6 (EtherType 0x86dd)" in decode(capsys, "-r", str(path), "--no-columnar").splitlines()[0]


def test_a_bogus_tcp_header_length_leaves_no_payload(tmp_path: Path, capsys: Any) -> None:
    """A TCP data offset under 5 (a header under 20 octets): tshark reads no payload after it ("Bogus TCP
    header length"), and neither does rdmalab, on both paths: the iWARP stream is not fed octets from
    where the header says it ends (the columns fed them from there, the per-packet decoder from octet 20)."""
    recs = list(records(ROOT / "captures" / "siw_crc_write_bw.pcap"))
    frames = []
    hit = None
    for r in recs:
        d = bytearray(r.data)
        if hit is None and d[12:14] == b"\x08\x00" and d[23] == 6 and len(d) > 100 and r.frame_number > 12:
            d[46] = (3 << 4) | (d[46] & 0x0F)  # data offset 3: 12 octets
            hit = r.frame_number
        frames.append((r.ns, bytes(d)))
    assert hit is not None
    path = tmp_path / "bogus.pcap"
    write_capture(path, frames, nano=False)
    args = ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n)), "-e", "tcp.payload"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    row = out.splitlines()[hit - 1].split("\t")
    assert row[0] == str(hit) and row[FIELDS.index("tcp.len")] != "0" and row[-1] == ""
    assert decode(capsys, "-r", str(path)) == decode(capsys, "-r", str(path), "--no-columnar")
