"""The native InfiniBand ICRC rule (IBA Vol 1 7.8.1): which LRH bytes it covers depends on the GRH.

* without a GRH (LRH.LNH 2) the ICRC covers the LRH with only VL set to ones;
* with a GRH (LNH 3) the whole LRH is set to ones (a router rebuilds it), plus GRH TClass,
  FlowLabel and HopLmt; BTH byte 4 ("Resv8a") in both.

Known answers from hardware:

* ``captures/hw_ib_connectx_erf.pcap`` (provenance in ``captures/MANIFEST.md``): ERF
  records from an Endace DAG card between ConnectX HCAs, 43 packets, 6 of them IPoIB multicast
  with a GRH.  rdmalab called those 6 ``[BAD ICRC]`` while their VCRCs were good.
* ``captures/public_hw_byte_vectors.pcap`` frames 2 and 3: RoCEv1 packets a ConnectX sent.  RoCE
  (IBA Annex A16) keeps IB's global-packet ICRC with the absent LRH as its 8 bytes of ones, so the
  GRH..ICRC of those frames behind any LRH with LNH 3 is a global native IB packet whose ICRC the
  hardware computed.

The "by hand" functions below mask bytes at the offsets the spec's header figures give, without
rdmalab's field tables, so that the library is checked against an independent construction.
"""

from __future__ import annotations

import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from rdmalab.capture import read, write_pcap
from rdmalab.capture.linktypes import LINKTYPE_INFINIBAND
from rdmalab.wire import ib
from rdmalab.wire.crc import ICRC_VARIANT_FIELDS, icrc_ib, icrc_masked_ib, icrc_rule_ib, vcrc
from rdmalab.wire.frame import decode_ib
from rdmalab.wire.packet import Packet, encode_ib

ROOT = Path(__file__).resolve().parents[2]
HW_ERF = ROOT / "captures" / "hw_ib_connectx_erf.pcap"
HW_ROCEV1 = ROOT / "captures" / "public_hw_byte_vectors.pcap"

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark (Wireshark) is not installed")


def _mask_grh_bth(b: bytearray, grh: int | None, bth: int) -> None:
    if grh is not None:
        b[grh] |= 0x0F  # IPVer(4) | TClass high nibble ...
        b[grh + 1 : grh + 4] = b"\xff\xff\xff"  # ... TClass low nibble | FlowLabel(20)
        b[grh + 7] = 0xFF  # HopLmt
    b[bth + 4] = 0xFF  # FECN, BECN, Resv6


def icrc_global_by_hand(lrh_through_pad: bytes) -> int:
    """The GRH rule: 8 bytes of ones for the LRH, GRH TClass/FlowLabel/HopLmt, BTH byte 4 (applied
    to a packet without a GRH too, to show that it is the wrong rule there)."""
    b = bytearray(lrh_through_pad)
    has_grh = b[1] & 3 == 3
    b[0:8] = b"\xff" * 8
    _mask_grh_bth(b, 8 if has_grh else None, 48 if has_grh else 8)
    return zlib.crc32(b)


def icrc_local_by_hand(lrh_through_pad: bytes) -> int:
    """The no-GRH rule: LRH.VL (the high nibble of byte 0), BTH byte 4; a GRH, if there is one,
    masked as the GRH rule masks it (what rdmalab did for every native IB packet before)."""
    b = bytearray(lrh_through_pad)
    b[0] |= 0xF0
    has_grh = b[1] & 3 == 3
    _mask_grh_bth(b, 8 if has_grh else None, 48 if has_grh else 8)
    return zlib.crc32(b)


def _ib_packets(path: Path) -> list[tuple[int, bytes, int, int]]:
    """(frame, LRH..pad, ICRC on the wire, VCRC on the wire) of every native IB packet in ``path``."""
    out = []
    for cp in read(path):
        p = cp.packet
        assert p.encap == "ib" and p.crc_offset is not None, f"frame {cp.frame_number}"
        lrh = next(layer.offset for layer in p.layers if layer.name == "LRH")
        out.append((cp.frame_number, bytes(p.data[lrh : p.crc_offset]), p.crc, p.vcrc))
    return out


def test_the_hardware_capture_has_both_forms_and_every_icrc_and_vcrc_verifies() -> None:
    pkts = _ib_packets(HW_ERF)
    glob = [f for f, raw, _, _ in pkts if raw[1] & 3 == 3]
    assert len(pkts) == 43 and glob == [3, 4, 5, 24, 25, 26]
    for cp in read(HW_ERF):
        assert cp.packet.crc_status == "good", f"frame {cp.frame_number}: ICRC {cp.packet.crc_status}"
        assert cp.packet.vcrc_status == "good", f"frame {cp.frame_number}: VCRC {cp.packet.vcrc_status}"


def test_each_hardware_icrc_follows_its_rule_and_not_the_other() -> None:
    """GOOD under its own rule, BAD under the other: the two rules are told apart on every packet."""
    for frame, raw, wire, _ in _ib_packets(HW_ERF):
        right, wrong = ((icrc_global_by_hand, icrc_local_by_hand) if raw[1] & 3 == 3
                        else (icrc_local_by_hand, icrc_global_by_hand))
        assert right(raw) == wire, f"frame {frame}"
        assert wrong(raw) != wire, f"frame {frame}"
        assert icrc_ib(raw) == wire, f"frame {frame}"


def test_a_rocev1_hardware_icrc_is_the_icrc_of_the_same_packet_behind_a_global_lrh() -> None:
    seen = 0
    for cp in read(HW_ROCEV1):
        p = cp.packet
        if p.encap != "rocev1":
            continue
        grh = next(layer.offset for layer in p.layers if layer.name == "GRH")
        body = bytes(p.data[grh : p.crc_offset + 4])  # GRH .. ICRC, as the ConnectX sent them
        for lrh in (ib.LRH(vl=0, sl=0, dlid=1, slid=2), ib.LRH(vl=7, lver=0, sl=9, dlid=0xBEEF, slid=0x1234)):
            head = lrh.replace(lnh=ib.LNH_IBA_GLOBAL, pktlen=(8 + len(body)) // 4).encode()
            raw = head + body
            pkt = decode_ib(raw + vcrc(raw).to_bytes(2, "little"))
            assert pkt.crc_status == "good" and pkt.vcrc_status == "good"
            assert icrc_local_by_hand(raw[:-4]) != pkt.crc  # the VL-only rule calls it bad
        seen += 1
    assert seen == 2


def test_encode_ib_global_covers_no_lrh_byte_and_local_covers_all_but_vl() -> None:
    bth, pay = ib.BTH(opcode=0x04, destqp=0x123, psn=77), b"payload!"
    glob = encode_ib(bth, [], pay, lrh=ib.LRH(vl=1, sl=2, dlid=3, slid=4), grh=ib.GRH(sgid=5, dgid=6, hoplmt=9))
    local = encode_ib(bth, [], pay, lrh=ib.LRH(vl=1, sl=2, dlid=3, slid=4))
    assert icrc_rule_ib(glob) == "ib_global" and icrc_rule_ib(local) == "ib"
    assert int.from_bytes(glob[-6:-2], "little") == icrc_global_by_hand(glob[:-6])
    assert int.from_bytes(local[-6:-2], "little") == icrc_local_by_hand(local[:-6])

    def edited(raw: bytes, at: int, value: int) -> Packet:
        b = bytearray(raw)
        b[at] = value
        b[-2:] = vcrc(bytes(b[:-2])).to_bytes(2, "little")  # the VCRC is recomputed on each link
        return decode_ib(bytes(b))

    # a router rebuilds the LRH: every LRH bit but LNH (it picks the rule) and PktLen (the decoder
    # checks it against the length) may change
    for at, flip in ((0, 0xFF), (1, 0xFC), (2, 0xFF), (3, 0xFF), (4, 0xF8), (6, 0xFF), (7, 0xFF)):
        assert edited(glob, at, glob[at] ^ flip).crc_status == "good", f"LRH byte {at}"
    assert edited(glob, 8 + 7, 1).crc_status == "good"  # HopLmt
    assert edited(glob, 8 + 8, glob[16] ^ 1).crc_status == "bad"  # SGID
    assert edited(local, 0, local[0] ^ 0xF0).crc_status == "good"  # VL
    for at in (0, 1, 2, 3, 6, 7):  # LVer, SL, DLID, SLID
        flip = 0x0F if at == 0 else 0xF0 if at == 1 else 0xFF
        assert edited(local, at, local[at] ^ flip).crc_status == "bad", f"LRH byte {at}"


def test_the_masked_bytes_are_the_declared_fields() -> None:
    """icrc_masked_ib sets exactly the fields ICRC_VARIANT_FIELDS declares for the packet's rule."""
    for grh in (None, ib.GRH(tclass=0x12, flowlabel=0x34567, hoplmt=3, sgid=1, dgid=2)):
        raw = encode_ib(ib.BTH(opcode=0x04, fecn=1, destqp=9, psn=1), [], b"abcd", lrh=ib.LRH(vl=2, dlid=7, slid=8),
                        grh=grh, vcrc=False)[:-4]
        rule = icrc_rule_ib(raw)
        want = bytearray(raw)
        at = {"LRH": 0, "GRH": 8, "BTH": 8 if grh is None else 48}
        classes = {"LRH": ib.LRH, "GRH": ib.GRH, "BTH": ib.BTH}
        for name in at:
            if name == "GRH" and grh is None:
                continue
            cls = classes[name]
            ones = {f: cls.LAYOUT.field(f).mask for h, f in ICRC_VARIANT_FIELDS[rule] if h == name}
            want[at[name] : at[name] + cls.LAYOUT.size] = cls.decode(raw, at[name]).replace(**ones).encode()
        assert icrc_masked_ib(raw) == bytes(want)
        assert (icrc_masked_ib(raw)[:8] == b"\xff" * 8) == (grh is not None)


def test_a_short_packet_is_refused_with_its_length() -> None:
    with pytest.raises(ValueError, match="8-byte LRH; got 5 bytes"):
        icrc_rule_ib(b"\x00" * 5)


def _tshark_icrcs(path: Path, *args: str) -> list[str]:
    out = subprocess.run(["tshark", *args, "-r", str(path), "-T", "fields", "-e", "infiniband.invariant.crc"],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


@requires_tshark
@pytest.mark.tshark
def test_tshark_shows_the_icrc_rdmalab_computes_on_the_hardware_capture() -> None:
    """tshark 4.0 does not check the ICRC (no verdict field, no preference, no expert info); what it
    can confirm is that the 4 bytes rdmalab verifies are the ones it shows as the ICRC (read
    big-endian), on every packet."""
    pkts = _ib_packets(HW_ERF)
    shown = _tshark_icrcs(HW_ERF)
    assert len(shown) == len(pkts)
    for (frame, raw, _, _), text in zip(pkts, shown, strict=True):
        assert int(text, 16) == int.from_bytes(icrc_ib(raw).to_bytes(4, "little"), "big"), f"frame {frame}"


@requires_tshark
@pytest.mark.tshark
def test_both_forms_in_a_linktype_infiniband_file_against_tshark(tmp_path: Path) -> None:
    """Built packets, with and without a GRH, in a LINKTYPE_INFINIBAND (247) file: rdmalab reads
    them with good ICRCs.  tshark 4.0 rejects link type 247, so the same bytes go to it as
    LINKTYPE_USER0 mapped to its "infiniband" dissector; it must show the same ICRC and VCRC."""
    bth = ib.BTH(opcode=0x0A, destqp=0x77, psn=5)
    reth = ib.RETH(va=0x1000, r_key=0x42, dma_length=8)
    frames = [encode_ib(bth, [reth], b"12345678", lrh=ib.LRH(vl=3, sl=1, dlid=9, slid=10), grh=g)
              for g in (None, ib.GRH(tclass=0x20, flowlabel=0xABCDE, hoplmt=64, sgid=0xFE80 << 112 | 1,
                                     dgid=0xFF12 << 112 | 2))]
    p247, p147 = tmp_path / "ib247.pcap", tmp_path / "ib147.pcap"
    write_pcap(p247, frames, linktype=LINKTYPE_INFINIBAND)
    write_pcap(p147, frames, linktype=147)
    got = list(read(p247))
    assert [cp.packet.crc_status for cp in got] == ["good", "good"]
    assert [cp.packet.vcrc_status for cp in got] == ["good", "good"]
    try:
        shown = _tshark_icrcs(p247)
    except subprocess.CalledProcessError:
        uat = '"User 0 (DLT=147)","infiniband","0","","0",""'
        shown = _tshark_icrcs(p147, "-o", f"uat:user_dlts:{uat}")
    assert [int(t, 16) for t in shown] == [int.from_bytes(f[-6:-2], "big") for f in frames]
