"""IPoIB (RFC 4391 section 6) in native IB payloads: ``rdmalab.wire.frame._ipoib``'s rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rdmalab.capture import read
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.linktypes import ERF, LINKTYPE_ERF
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.render import protocol
from rdmalab.wire import BTH, RETH, decode_ib, encode_ib, encode_rocev2
from rdmalab.wire.control import ARPoIB, ARPOther
from rdmalab.wire.errors import DecodeError
from rdmalab.wire.frame import decode_ethernet, encode_ip_udp
from rdmalab.wire.ib import DETH, LRH, IPoIB
from rdmalab.wire.net import TCP, UDP, IPv4, IPv6

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")

UDP_DATA = b"0123456789"
IP4_UDP = encode_ip_udp(len(UDP_DATA), src_ip="10.0.0.36", dst_ip="10.0.0.255", ipv6=False, src_port=49501,
                        dst_port=49502)[0] + UDP_DATA
IP6_UDP = encode_ip_udp(len(UDP_DATA), src_ip="fe80::1", dst_ip="ff02::1", ipv6=True, src_port=40000,
                        dst_port=40001)[0] + UDP_DATA
ARP = bytes.fromhex("0020 0800 14 04 0001") + bytes(48)  # RFC 4391 section 4.1: hardware type 32, 20-byte addresses


def ud_send(payload: bytes, *, destqp: int = 0xFFFFFF, qkey: int = 0xB1B) -> bytes:
    return encode_ib(BTH(opcode=0x64, destqp=destqp, psn=5), [DETH(q_key=qkey, src_qp=0x48)], payload,
                     lrh=LRH(dlid=0xC000, slid=5))


def test_ipv4_udp_in_a_ud_send() -> None:
    pkt = decode_ib(ud_send(b"\x08\x00\x00\x00" + IP4_UDP))
    assert [la.name for la in pkt.layers] == ["LRH", "BTH", "DETH", "IPoIB", "IPv4", "UDP"]
    assert pkt.encap == "ib" and pkt.crc_status == "good" and pkt.vcrc_status == "good"
    assert pkt[IPoIB].ethertype == 0x0800
    assert pkt[UDP].sport == 49501 and pkt[UDP].dport == 49502
    assert pkt.payload == UDP_DATA  # what the inner decoders leave, as in an Ethernet frame
    assert "IPoIB IPv4 10.0.0.36 → 10.0.0.255 UDP 49501 → 49502" in pkt.summary()
    assert pkt.layers[3].offset == 8 + 12 + 8  # the IPoIB header starts the payload


def test_ipv6_and_arp() -> None:
    pkt = decode_ib(ud_send(b"\x86\xdd\x00\x00" + IP6_UDP))
    assert [la.name for la in pkt.layers][-3:] == ["IPoIB", "IPv6", "UDP"]
    assert pkt[IPv6].dst == int.from_bytes(bytes.fromhex("ff02" + "00" * 13 + "01"), "big")
    arp = decode_ib(ud_send(b"\x08\x06\x00\x00" + ARP))
    assert [la.name for la in arp.layers][-2:] == ["IPoIB", "ARP"] and arp.payload == b""  # RFC 4391 8: all 56 bytes
    assert isinstance(arp[ARPoIB], ARPoIB) and arp[ARPoIB].opcode == 1 and arp[ARPoIB].hw_size == 20
    assert arp.summary().endswith("IPoIB ARP Who has 0.0.0.0? (ARP Probe)")  # this ARP asks with zero addresses
    other = decode_ib(ud_send(b"\x08\x06\x00\x00" + bytes.fromhex("0006 0800 06 04 0001") + bytes(20)))
    assert isinstance(other.layers[-1].header, ARPOther) and len(other.payload) == 20  # its addresses: bytes


def test_rc_send_and_write_are_tried_too() -> None:
    """Wireshark's heuristic looks at any payload (IPoIB connected mode is RC, RFC 4755)."""
    rc = encode_ib(BTH(opcode=0x04, destqp=0x40, psn=1, ackreq=1), [], b"\x08\x00\x00\x00" + IP4_UDP, lrh=LRH(dlid=4, slid=1))
    assert decode_ib(rc).get(IPv4) is not None
    wr = encode_ib(BTH(opcode=0x0A, destqp=0x40, psn=1), [RETH(va=1, r_key=2, dma_length=4 + len(IP4_UDP))],
                   b"\x08\x00\x00\x00" + IP4_UDP, lrh=LRH(dlid=4, slid=1))
    assert decode_ib(wr).get(UDP) is not None


@pytest.mark.parametrize(("head", "why"), [
    (b"\x08\x00\x00\x01", "reserved bits not zero"),
    (b"\x12\x34\x00\x00", "an EtherType IPoIB does not carry"),
    (b"\x00\x00\x00\x00", "EtherType 0"),
])
def test_not_ipoib(head: bytes, why: str) -> None:
    pkt = decode_ib(ud_send(head + IP4_UDP))
    assert pkt.get(IPoIB) is None and pkt.get(IPv4) is None, why
    assert pkt.payload == head + IP4_UDP


def test_short_payloads_and_mads_are_not_ipoib() -> None:
    assert decode_ib(ud_send(b"\x08\x00")).get(IPoIB) is None
    # to QP1 (the GSI): a MAD, whatever its first bytes
    mad = decode_ib(ud_send(b"\x08\x00\x00\x00" + IP4_UDP + bytes(256 - 4 - len(IP4_UDP)), destqp=1, qkey=0x80010000), lenient=True)
    assert mad.get(IPoIB) is None


def test_roce_payloads_are_not_ipoib() -> None:
    frame = encode_rocev2(BTH(opcode=0x64, destqp=9, psn=1), [DETH(q_key=0xB1B, src_qp=0x48)], b"\x08\x00\x00\x00" + IP4_UDP)
    pkt = decode_ethernet(frame)
    assert pkt.encap == "rocev2" and pkt.get(IPoIB) is None and pkt.crc_status == "good"


def test_tcp_inside_stays_an_ib_packet() -> None:
    tcp = TCP(sport=22, dport=5000, seq=1, data_offset=5, flags=TCP.ACK, window=100).encode()
    ip = IPv4(total_length=20 + len(tcp), ttl=64, protocol=6, src=1, dst=2).with_checksum().encode()
    pkt = decode_ib(ud_send(b"\x08\x00\x00\x00" + ip + tcp))
    assert pkt.get(TCP) is not None and pkt.encap == "ib" and pkt.crc_status == "good"


def test_a_truncated_inner_datagram_is_a_problem_not_a_crash() -> None:
    bad = b"\x08\x00\x00\x00" + IP4_UDP[:10]  # an IPv4 header cut at 10 bytes
    pkt = decode_ib(ud_send(bad), lenient=True)
    assert pkt.get(IPoIB) is not None and pkt.problems and pkt.crc_status == "good"
    with pytest.raises(DecodeError):
        decode_ib(ud_send(bad), lenient=False)


def _erf_capture(path: Path, packets: list[bytes]) -> None:
    with CaptureWriter(path, linktype=LINKTYPE_ERF) as w:
        for i, ib in enumerate(packets):
            rlen = (16 + len(ib) + 7) // 8 * 8
            rec = ERF(ts=(1000 + i) << 32, type=21, flags=4, rlen=rlen, wlen=len(ib)).encode() + ib
            w.write(rec + b"\0" * (rlen - len(rec)), (1000 + i) * 1_000_000_000)


@requires_tshark
@pytest.mark.tshark
def test_tshark_sees_the_same(tmp_path: Path) -> None:
    """Every field rdmalab decodes agrees with tshark's (crosscheck), and tshark finds IPoIB in the
    same frames, with the same protocol names."""
    path = tmp_path / "ipoib.pcap"
    rc = encode_ib(BTH(opcode=0x04, destqp=0x40, psn=1), [], b"\x86\xdd\x00\x00" + IP6_UDP, lrh=LRH(dlid=4, slid=1))
    _erf_capture(path, [ud_send(b"\x08\x00\x00\x00" + IP4_UDP), ud_send(b"\x08\x06\x00\x00" + ARP), rc,
                        ud_send(b"\x08\x00\x00\x01" + IP4_UDP), ud_send(b"\x12\x34\x00\x00" + IP4_UDP)])
    report = crosscheck(path)
    assert not report.unexplained, report.text()
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "infiniband.rwh.etype",
                          "-e", "_ws.col.Protocol"], capture_output=True, text=True, check=True).stdout.splitlines()
    theirs = [line.split("\t") for line in out]
    ours = [(f"0x{cp.packet[IPoIB].ethertype:04x}" if cp.packet.get(IPoIB) else "", protocol(cp)) for cp in read(path)]
    assert [t[0] for t in theirs] == [o[0] for o in ours] == ["0x0800", "0x0806", "0x86dd", "", ""]
    assert [t[1] for t in theirs[:3]] == [o[1] for o in ours[:3]] == ["UDP", "ARP", "UDP"]
