"""ERF Ethernet records (a DAG card's captures: pcap link type 197, record type 2) read by the columns as
the Ethernet frames they hold (``columnar_decode.erf_ethernet_view``): the same summary lines and
fields as the per-packet decoder, which also shows the ERF header; and RoCEv2 datagrams too short for
a BTH and its ICRC, which the columns do not read a BTH into from the Ethernet padding after them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import analysis_rows, records
from rdmalab.capture.columnar import _ethernet_only, decode_block, record_blocks
from rdmalab.capture.columnar_decode import erf_ethernet_view
from rdmalab.capture.columnar_summary import _fast_rows
from rdmalab.capture.linktypes import ERF, LINKTYPE_ERF, ERFExt, erf_ethernet_record
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.cli import main
from rdmalab.wire.frame import encode_rocev2
from rdmalab.wire.ib import BTH

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["frame.number", "frame.len", "frame.cap_len", "frame.time_epoch", "frame.time_delta", "ip.src", "udp.stream",
          "tcp.seq", "tcp.window_size", "infiniband.bth.opcode", "infiniband.bth.psn", "rdmalab.icrc.status",
          "rdmalab.encap", "iwarp_ddp.stag", "eth.src"]


def _with_extension_header(record: bytes) -> bytes:
    """An ERF record with one (empty) extension header put after its 16-octet header."""
    erf = ERF.decode(record, 0)
    body = ERFExt().encode() + record[16:]
    body += bytes(-(16 + len(body)) % 8)
    return erf.replace(ext=1, rlen=16 + len(body)).encode() + body


def erf_copy(tmp_path: Path, name: str, *, ext: bool = False) -> Path:
    """The frames of a real capture as ERF Ethernet records (``erf_ethernet_record``: the offset and pad
    octets, the frame, padding to 8 octets; ``wlen`` the frame's length), times of 32.32 fixed-point
    seconds; with ``ext``, each with an extension header."""
    path = tmp_path / f"erf_{name}"
    recs = [(r.ns, erf_ethernet_record(r.ns, bytes(r.data))) for r in records(ROOT / "captures" / name)]
    write_capture(path, [(ns, _with_extension_header(rec) if ext else rec) for ns, rec in recs],
                  linktype=LINKTYPE_ERF, nano=False)
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
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(frames)], nano=False)
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
    write_capture(path, [((1000 + i) * 10**9, bytes(d)) for i, d in enumerate((v1, v2))], nano=False)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "infiniband.bth.psn", "-e",
            "rdmalab.icrc.status", "-e", "rdmalab.encap"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert out.splitlines() == ["1\t\t\trocev1", "2\t5\tbad\trocev2"]


@pytest.mark.parametrize("ext", [False, True])
def test_summary_lines_in_worker_processes(tmp_path: Path, capsys: Any, ext: bool) -> None:
    """The summary lines of an ERF capture are written in worker processes too (each record's own time:
    its frame's time since the first record's), the same text as one process and as the per-packet path:
    Ethernet records read as frames, records with an extension header, and a DAG card's native
    InfiniBand records, which the per-packet decoder writes in the workers."""
    from rdmalab.capture import blockpool
    from rdmalab.capture.columnar_summary import summary_bytes

    paths = [erf_copy(tmp_path, "rxe_write_bw_loss.pcap", ext=ext), erf_copy(tmp_path, "siw_crc_write_bw.pcap", ext=ext),
             ROOT / "captures" / "hw_ib_connectx_erf.pcap", ROOT / "captures" / "synthetic_native_ib_erf.pcap"]
    for path in paths:
        p = str(path)
        assert not blockpool.parallel_capture(p) and blockpool.parallel_capture(p, own_times=True)
        one = b"".join(summary_bytes(p, block_bytes=4096))
        many = b"".join(summary_bytes(p, block_bytes=4096, workers=2, parallel_min_bytes=0))
        assert many == one and one.count(b"\n") == sum(1 for _ in records(path))
        assert many.decode() == decode(capsys, "-r", p, "--no-columnar")


@requires_tshark
@pytest.mark.parametrize("rlen", [0, 8, 16, 18, 20, 40, 56, 72, 80, 200])
def test_a_record_is_read_whatever_its_rlen_says_as_tshark_reads_it(tmp_path: Path, capsys: Any, rlen: int) -> None:
    """tshark 4.0 dissects what follows an ERF record's headers in a pcap file by the captured length,
    whatever ``rlen`` says (too small for the headers, shorter or longer than the record): so does rdmalab
    (lenient), on both paths, without a problem in the line."""
    src = next(r for r in records(ROOT / "captures" / "rxe_write_bw_loss.pcap")
               if bytes(r.data)[36:38] == (4791).to_bytes(2, "big"))  # (the first RoCEv2 frame)
    rec = bytearray(erf_ethernet_record(src.ns, bytes(src.data)))
    rec[10:12] = rlen.to_bytes(2, "big")
    path = tmp_path / f"erf_rlen_{rlen}.pcap"
    write_capture(path, [(src.ns, bytes(rec))], linktype=LINKTYPE_ERF, nano=False)
    names = ["frame.number", "frame.len", "erf.rlen", "erf.wlen", "eth.src", "ip.src", "udp.dstport",
             "infiniband.bth.opcode", "infiniband.bth.psn"]
    args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
    assert decode(capsys, *args) == tshark(*args)
    line = decode(capsys, "-r", str(path))
    assert line == decode(capsys, "-r", str(path), "--no-columnar")
    assert "problem" not in line and line.split()[5] == "RRoCE", line
