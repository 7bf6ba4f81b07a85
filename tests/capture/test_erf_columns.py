"""ERF Ethernet records (a DAG card's captures: pcap link type 197, record type 2) read by the columns as
the Ethernet frames they hold (``columnar_decode.erf_ethernet_view``): the same summary lines and
fields as the per-packet decoder, which also shows the ERF header; and RoCEv2 datagrams too short for
a BTH and its ICRC, which the columns do not read a BTH into from the Ethernet padding after them."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import analysis_rows, records
from rdmalab.capture.columnar import _ethernet_only, decode_block, record_blocks
from rdmalab.capture.columnar_decode import erf_ethernet_view
from rdmalab.capture.columnar_summary import _fast_rows
from rdmalab.cli import main
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.ib import BTH

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["frame.number", "frame.len", "frame.cap_len", "frame.time_epoch", "frame.time_delta", "ip.src", "udp.stream",
          "tcp.seq", "tcp.window_size", "infiniband.bth.opcode", "infiniband.bth.psn", "rdmalab.icrc.status",
          "rdmalab.encap", "iwarp_ddp.stag", "eth.src"]


def erf_copy(tmp_path: Path, name: str, *, ext: bool = False) -> Path:
    """The frames of a real capture as ERF Ethernet records (the offset and pad octets, the frame, then
    padding to 8 octets; ``wlen`` the frame's length), times of 32.32 fixed-point seconds."""
    path = tmp_path / f"erf_{name}"
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 197))
        for r in records(ROOT / "captures" / name):
            d = bytes(r.data)
            body = (b"\0" * 8 if ext else b"") + b"\0\0" + d
            body += bytes(-(16 + len(body)) % 8)
            ts = (r.ns // 10**9) << 32 | (r.ns % 10**9 << 32) // 10**9
            head = struct.pack("<Q", ts) + struct.pack(">BBHHH", 2 | (0x80 if ext else 0), 4, 16 + len(body), 0, len(d))
            rec = head + body
            f.write(struct.pack("<IIII", r.ns // 10**9, r.ns % 10**9 // 1000, len(rec), len(rec)) + rec)
    return path


@pytest.mark.parametrize("name", ["rxe_write_bw_loss.pcap", "siw_crc_write_bw.pcap", "rxe_rping.pcap",
                                  "lo_icmp_unreachable.pcap"])
def test_columns_and_the_per_packet_decoder_agree(tmp_path: Path, capsys: Any, name: str) -> None:
    path = erf_copy(tmp_path, name)
    summary = decode(capsys, "-r", str(path))
    assert summary == decode(capsys, "-r", str(path), "--no-columnar")
    args = ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n))]
    assert decode(capsys, *args) == decode(capsys, *args, "--no-columnar")


def test_the_columns_read_them(tmp_path: Path) -> None:
    raw = next(record_blocks(erf_copy(tmp_path, "rxe_write_bw_loss.pcap")))
    eth = next(record_blocks(ROOT / "captures" / "rxe_write_bw_loss.pcap"))
    blk = erf_ethernet_view(raw)
    assert not _ethernet_only(raw) and _ethernet_only(blk)
    assert (blk.caplen == eth.caplen).all() and (blk.wirelen == eth.wirelen).all()
    assert (np.abs(blk.ts_ns - eth.ts_ns) <= 1).all()  # (32.32 fixed point: within a nanosecond)
    cols, ref = decode_block(blk), decode_block(eth)
    assert (cols.layers["infiniband.bth"] == ref.layers["infiniband.bth"]).all()
    assert (_fast_rows(blk, cols) == _fast_rows(eth, ref)).all()


def test_extension_headers_are_left_to_the_per_packet_decoder(tmp_path: Path, capsys: Any) -> None:
    path = erf_copy(tmp_path, "rxe_send_bw.pcap", ext=True)
    raw = next(record_blocks(path))
    assert erf_ethernet_view(raw) is raw
    assert decode(capsys, "-r", str(path)) == decode(capsys, "-r", str(path), "--no-columnar")


@requires_tshark
def test_tshark_reads_them_so(tmp_path: Path, capsys: Any) -> None:
    path = erf_copy(tmp_path, "rxe_rping.pcap")
    names = ["frame.number", "frame.len", "frame.time_epoch", "ip.src", "infiniband.bth.psn", "erf.eth.pad"]
    args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
    assert decode(capsys, *args) == tshark(*args)


def test_no_bth_out_of_the_padding_after_a_short_roce_datagram(tmp_path: Path, capsys: Any) -> None:
    """A UDP datagram to port 4791 with fewer than 16 octets after its header (a BTH and an ICRC),
    padded to 60 octets: the per-packet decoder reports it short and reads no BTH; nor do the columns."""
    full = encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"")  # 12 + 4 octets after the UDP header
    frames = []
    for keep in (0, 8, 12, 15, 16):
        d = bytearray(full[:42 + keep])
        d[16:18] = (20 + 8 + keep).to_bytes(2, "big")  # ip.len
        d[38:40] = (8 + keep).to_bytes(2, "big")  # udp.length
        frames.append(bytes(d) + bytes(max(0, 60 - len(d))))
    path = tmp_path / "short.pcap"
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, d in enumerate(frames):
            f.write(struct.pack("<IIII", 1000 + i, 0, len(d), len(d)) + d)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "udp.length", "-e", "infiniband.bth.psn",
            "-e", "rdmalab.encap"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert [line.split("\t")[2] for line in out.splitlines()] == ["", "", "", "", "5"]


def test_analyze_finds_what_it_finds_in_the_ethernet_frames(tmp_path: Path, capsys: Any) -> None:
    def per_packet(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a frame went to the per-packet decoder")

    src = ROOT / "captures" / "rxe_write_bw_loss.pcap"
    path = erf_copy(tmp_path, src.name)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(analysis_rows, "decode_record", per_packet)
        assert main(["analyze", str(path)]) == 0
    erf = capsys.readouterr().out.splitlines()
    assert main(["analyze", str(src)]) == 0
    ref = capsys.readouterr().out.splitlines()
    assert erf[1:] == ref[1:] and len(ref) > 10
    assert erf[0].split(":", 1)[1] == ref[0].split(":", 1)[1]


def test_damaged_roce_headers_read_as_the_per_packet_decoder_reads_them(tmp_path: Path, capsys: Any) -> None:
    """A RoCEv1 GRH whose next header is not IBA's (0x1b): no BTH after it (the columns read one);
    a RoCEv2 UDP length past the IP datagram's end: the datagram's end is the packet's, its ICRC
    checked there (the columns took the packet as cut by the capture and checked no ICRC)."""
    v1 = bytearray(next(iter(records(ROOT / "captures" / "synthetic_all_opcodes_rocev1.pcap"))).data)
    v1[14 + 6] = 0xBB
    v2 = bytearray(encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40))
    v2[38:40] = (40992).to_bytes(2, "big")
    path = tmp_path / "damaged.pcap"
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, d in enumerate((bytes(v1), bytes(v2))):
            f.write(struct.pack("<IIII", 1000 + i, 0, len(d), len(d)) + d)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "infiniband.bth.psn", "-e",
            "rdmalab.icrc.status", "-e", "rdmalab.encap"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert out.splitlines() == ["1\t\t\trocev1", "2\t5\tbad\trocev2"]
