"""The octets of an Ethernet frame after its datagram: padding, a trailer, the FCS (eth.padding,
eth.trailer, vlan.trailer, eth.fcs, eth.fcs.status), as tshark 4.0 divides them, on pcap and on ERF
records; and an ERF Ethernet record's frame, which starts after its two pad octets.

Every expected value below was printed by tshark 4.0.17 for the same frames (``tshark -r F -T fields
-e frame.number -e eth.padding -e eth.trailer -e vlan.trailer -e eth.fcs -e eth.fcs.status``); with
tshark installed the tests also ask it again."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import read
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.linktypes import LINKTYPE_ERF, erf_ethernet_record
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.wire.frame import decode_ethernet, encode_rocev2, encode_tcp_frame
from rdmalab.wire.ib import BTH
from rdmalab.wire.net import ethernet_trailer

FIELDS = ("frame.number", "eth.padding", "eth.trailer", "vlan.trailer", "eth.fcs", "eth.fcs.status")


def _fcs(frame: bytes) -> bytes:
    """The FCS a NIC appends: the CRC-32 of the frame, least significant octet first (IEEE 802.3 3.2.9)."""
    return struct.pack("<I", zlib.crc32(frame))


_MACS = bytes.fromhex("525400000101525400000102")
_ARP = (bytes.fromhex("ffffffffffff525400000102" "0806") +
        bytes.fromhex("0001080006040001525400000102" "0a000002" "000000000000" "0a000001"))
_UDP = _MACS + bytes.fromhex("0800" "4500001c00004000401100000a0000020a000001" "1f4012b800080000")
_BIG = _MACS + bytes.fromhex("0800" "4500003c00004000401100000a0000020a000001" "1f4012b800280000") + bytes(32)
_VLAN = _MACS + bytes.fromhex("8100" "0005" "0800" "4500001c00004000401100000a0000020a000001" "1f4012b800080000") \
    + bytes(14)
_IP6 = _MACS + bytes.fromhex("86dd" "60000000000811ff") + bytes(16) + bytes(15) + b"\x01" + bytes.fromhex("1f4012b800080000")

#: name -> (frame, tshark's cells for FIELDS after frame.number)
CASES: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "arp padded with zeros": (_ARP + bytes(18), ("0" * 36, "", "", "", "")),
    "arp padded, then its FCS": (_ARP + bytes(18) + _fcs(_ARP + bytes(18)), ("0" * 36, "", "", "0x0414e8a1", "2")),
    "arp padded with ones: no padding": (_ARP + b"\x01" * 18, ("", "01" * 18, "", "", "")),
    "arp unpadded": (_ARP, ("", "", "", "", "")),
    "udp padded, two more octets": (_UDP + bytes(18) + b"\xab\xcd", ("0" * 36, "abcd", "", "", "")),
    "udp padded, then its FCS": (_UDP + bytes(18) + _fcs(_UDP + bytes(18)), ("0" * 36, "", "", "0xbad63df9", "2")),
    "64 octets or more, then the FCS": (_BIG + _fcs(_BIG), ("", "", "", "0x26636866", "2")),
    "a trailer, then the FCS": (_BIG + b"\x11\x22\x33\x44" + _fcs(_BIG + b"\x11\x22\x33\x44"),
                                ("", "11223344", "", "0x883dcfb1", "2")),
    "a bad FCS": (_BIG + b"\xde\xad\xbe\xef", ("", "", "", "0xdeadbeef", "2")),
    "two octets: too few for an FCS": (_BIG + b"\x11\x22", ("", "1122", "", "", "")),
    "802.1Q, padded": (_VLAN, ("0" * 28, "", "", "", "")),
    "802.1Q, padded, four more: no FCS after a tag": (_VLAN + _fcs(_VLAN), ("0" * 28, "", "49e1492c", "", "")),
    "IPv6, then the FCS": (_IP6 + _fcs(_IP6), ("", "", "", "0xbd6b8fc5", "2")),
    "IPv6, three more": (_IP6 + b"\x01\x02\x03", ("", "010203", "", "", "")),
}


def _pcap(path: Path, frames: list[bytes]) -> Path:
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(frames)], nano=False)
    return path


def _erf(path: Path, frames: list[bytes]) -> Path:
    """The frames as ERF Ethernet records (type 2: two octets, offset and pad, before the frame;
    ``wlen`` counts the FCS) in a pcap of link type ERF."""
    times = [(1000 + i) * 10**9 for i in range(len(frames))]
    write_capture(path, [(t, erf_ethernet_record(t, d)) for t, d in zip(times, frames, strict=True)],
                  linktype=LINKTYPE_ERF, nano=False)
    return path


def _expected() -> str:
    return "".join("\t".join((str(i), *cells)) + "\n" for i, (_f, cells) in enumerate(CASES.values(), 1))


def _args(path: Path) -> list[str]:
    return ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n))]


@pytest.mark.parametrize("form", [_pcap, _erf], ids=["pcap", "erf"])
def test_each_case_divided_as_tshark_divides_it(tmp_path: Path, capsys: Any, form: Any) -> None:
    path = form(tmp_path / "t.pcap", [f for f, _cells in CASES.values()])
    assert decode(capsys, *_args(path)) == _expected()


@requires_tshark
@pytest.mark.parametrize("form", [_pcap, _erf], ids=["pcap", "erf"])
def test_tshark_divides_them_so_today(tmp_path: Path, form: Any) -> None:
    path = form(tmp_path / "t.pcap", [f for f, _cells in CASES.values()])
    assert tshark(*_args(path)) == _expected()


def test_the_fcs_is_checked_and_a_bad_one_says_what_it_should_be() -> None:
    good = decode_ethernet(_BIG + _fcs(_BIG), lenient=True).eth_trailer
    bad = decode_ethernet(_BIG + b"\xde\xad\xbe\xef", lenient=True).eth_trailer
    assert good is not None and good.fcs == good.fcs_expected == 0x26636866
    assert bad is not None and bad.fcs == 0xDEADBEEF and bad.fcs_expected == 0x26636866


def test_a_frame_cut_by_the_capture_has_no_fcs_it_did_not_keep() -> None:
    # 78 octets on the wire, 76 captured: the FCS is not whole, the datagram is
    t = ethernet_trailer((_BIG + _fcs(_BIG))[:76], 74, 78)
    assert t is not None and t.fcs is None and t.trailer == b""
    assert ethernet_trailer(_BIG, 74, 78) is None  # nothing after the datagram captured


def test_fields_filter_json_and_tree(tmp_path: Path, capsys: Any) -> None:
    frames = [f for f, _cells in CASES.values()]
    path = _pcap(tmp_path / "t.pcap", frames)
    names = list(CASES)
    bad = names.index("a bad FCS") + 1
    out = decode(capsys, "-r", str(path), "-Y", 'rdmalab.fcs.status == "bad"', "-T", "fields", "-e", "frame.number")
    assert out == f"{bad}\n"
    out = decode(capsys, "-r", str(path), "-Y", "eth.fcs", "-T", "fields", "-e", "frame.number")
    assert out.split() == [str(i) for i, (_f, c) in enumerate(CASES.values(), 1) if c[3]]
    layers = [p["_source"]["layers"] for p in json.loads(decode(capsys, "-r", str(path), "-T", "json"))]
    two = layers[names.index("udp padded, two more octets")]["eth"]
    assert list(two)[-2:] == ["eth.padding", "eth.trailer"]  # after eth.type, as tshark's
    assert two["eth.padding"] == ":".join(["00"] * 18) and two["eth.trailer"] == "ab:cd"
    fcs = layers[names.index("64 octets or more, then the FCS")]["eth"]
    assert (fcs["eth.fcs"], fcs["eth.fcs.status"]) == ("0x26636866", "2")
    tree = decode(capsys, "-r", str(path), "-V", "-c", str(bad))
    assert tree.rstrip("\n").splitlines()[-1] == "    Ethernet FCS: 0xdeadbeef (bad, should be 0x26636866) @ bytes 74-77  {eth.fcs}"


def test_an_erf_ethernet_frame_starts_after_its_pad_octets(tmp_path: Path, capsys: Any) -> None:
    frame = _BIG + _fcs(_BIG)
    path = _erf(tmp_path / "e.pcap", [frame])
    (cp,) = list(read(path))
    assert bytes(cp.frame_bytes) == frame  # (the pad octets are the ERF pseudo-header's; the FCS is the frame's)
    assert (cp.wire_length, cp.captured) == (len(frame), len(frame))
    dump = decode(capsys, "-r", str(path), "-x")
    assert dump.splitlines()[0].startswith("0000  52 54 00 00 01 01 52 54 00 00 01 02 08 00 45 00")
    assert dump.splitlines()[4].startswith("0040  ") and "26 63 68 66" in dump.splitlines()[4]  # the last: the FCS


@requires_tshark
def test_crosscheck_finds_nothing_unexplained_in_erf_ethernet(tmp_path: Path) -> None:
    """Offsets included: before, every field of an ERF Ethernet record was two octets off."""
    report = crosscheck(_erf(tmp_path / "e.pcap", [f for f, _cells in CASES.values()]))
    assert report.fields_compared > 100
    assert [r for r in report.results if r.defect is None and r.cause is None] == []


def test_trees_from_templates_show_the_trailer_as_the_per_packet_trees(tmp_path: Path, capsys: Any) -> None:
    """``-V`` writes well-formed RoCEv2 and TCP frames from templates: with an FCS after them too."""
    roce = encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40)
    ack = encode_tcp_frame(b"", flags=0x10) + bytes(6)  # a bare ACK (54 octets) padded to 60
    frames = [roce + _fcs(roce), roce + b"\x01\x02", ack + _fcs(ack)]
    path = _pcap(tmp_path / "t.pcap", frames)
    fast = decode(capsys, "-r", str(path), "-V")
    assert fast == decode(capsys, "-r", str(path), "-V", "--no-columnar")
    assert fast.count("Ethernet FCS: ") == 2 and fast.count("(good)") == 4  # (an ICRC twice, two FCSs)
    assert "Ethernet padding: 6 byte(s) @ bytes 54-59" in fast and "Ethernet trailer: 2 byte(s)" in fast


#: filters comparing the octets of the trailer fields (and of data.data): -> the frame numbers tshark shows
BYTE_FILTERS = {
    "eth.trailer == ab:cd": "5",
    "eth.trailer == abcd": "5",
    "eth.trailer == ab-cd": "5",
    "eth.trailer != ab:cd": "3 8 10 14",
    "eth.trailer > 11:22": "3 5 8 14",  # (a longer value is the greater; of one length, octet by octet)
    "eth.trailer < 11:22:33": "5 10 14",
    "eth.trailer in {11:22:33:44, 01:02:03}": "8 14",
    "vlan.trailer == 49:e1:49:2c": "12",
    "eth.padding == 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00": "1 2 5 6",
    "eth.trailer == \"\\x11\\x22\"": "10",
    "eth.trailer contains 22:33": "8",
    "eth.trailer contains 10:20": "",  # (not across octets: 01:02:03's hex text holds 1020)
    "eth.trailer matches \"^\\x01\\x02\"": "14",
}


@requires_tshark
def test_filters_compare_the_octets_of_byte_fields(tmp_path: Path, capsys: Any) -> None:
    """``eth.trailer == ab:cd`` compares octets, written as tshark takes them (hex pairs with or without
    separators, a quoted string), on both paths: only a 6-octet value matched before (read as a MAC address),
    others matched nothing, silently; ``contains`` and ``matches`` read the octets (they were refused)."""
    path = _pcap(tmp_path / "t.pcap", [f for f, _cells in CASES.values()])
    for flt, want in BYTE_FILTERS.items():
        args = ["-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"]
        assert tshark(*args).split() == want.split(), flt
        assert decode(capsys, *args).split() == want.split(), flt
        assert decode(capsys, *args, "--no-columnar").split() == want.split(), flt
