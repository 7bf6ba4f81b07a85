"""Raw IP captures (link types 101, 12, 14, 228 and 229: a tun device's, where each record is an IPv4
or IPv6 datagram) read by the columns, as Ethernet frames are: the same summary lines and fields as
the per-packet decoder, the same values as the Ethernet frames they were made from, and tshark's.

The raw IP captures are made here from the real captures in ``captures/``: each Ethernet frame's
header taken off, and the frames that carry no IP (ARP, RoCEv1) left out."""

from __future__ import annotations

import json
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
           "lo_icmp_unreachable.pcap", "synthetic_all_opcodes_rocev2.pcap"]
FIELDS = ["frame.number", "frame.len", "ip.src", "ip.proto", "ipv6.dst", "udp.stream", "tcp.stream", "tcp.seq",
          "tcp.window_size", "infiniband.bth.opcode", "infiniband.bth.psn", "iwarp_ddp.stag", "rdmalab.encap",
          "rdmalab.icrc.status", "rdmalab.payload.len"]


def rawip_copy(tmp_path: Path, name: str, linktype: int = 101) -> Path:
    """The IP datagrams of ``captures/NAME``, each frame's Ethernet header taken off."""
    frames = [(r.ns, bytes(r.data)[14:]) for r in records(ROOT / "captures" / name)
              if bytes(r.data)[12:14] in (b"\x08\x00", b"\x86\xdd")]
    path = tmp_path / f"raw{linktype}_{name}"
    write_capture(path, frames, linktype=linktype, nano=False)
    return path


def _fields(path: Path, *more: str) -> list[str]:
    return ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n)), *more]


@pytest.mark.parametrize("name", SOURCES)
def test_columns_and_the_per_packet_decoder_agree(tmp_path: Path, capsys: Any, name: str) -> None:
    path = rawip_copy(tmp_path, name)
    summary = decode(capsys, "-r", str(path))
    assert summary == decode(capsys, "-r", str(path), "--no-columnar")
    assert summary.count("\n") == sum(1 for _ in records(path))
    assert decode(capsys, *_fields(path)) == decode(capsys, *_fields(path, "--no-columnar"))


@pytest.mark.parametrize("linktype", [101, 12, 14, 228, 229])
def test_the_columns_read_them(tmp_path: Path, linktype: int) -> None:
    """Not the per-packet decoder's fallback: the columns hold every frame, and the summary lines of
    RoCE and TCP are made from them, as for the Ethernet frames they came from."""
    for name, layer, fast in (("rxe_write_bw_loss.pcap", "udp", _fast_rows), ("siw_crc_write_bw.pcap", "tcp", clean_tcp)):
        blk = next(record_blocks(rawip_copy(tmp_path, name, linktype)))
        assert _ethernet_only(blk)
        cols = decode_block(blk)
        assert cols.layers["rawip"].all() and not cols.layers["eth"].any()
        assert cols.layers[layer].sum() > 0.8 * len(blk)
        assert fast(blk, cols).sum() > 0.8 * len(blk)


def test_the_same_values_as_the_ethernet_frames(tmp_path: Path, capsys: Any) -> None:
    for name in ("siw_crc_write_bw.pcap", "rxe_write_bw_loss.pcap"):
        path = rawip_copy(tmp_path, name)
        kept = [r.frame_number for r in records(ROOT / "captures" / name)
                if bytes(r.data)[12:14] in (b"\x08\x00", b"\x86\xdd")]
        names = [n for n in FIELDS if n not in ("frame.number", "frame.len", "rdmalab.encap")]
        args = ["-T", "fields", *(a for n in names for a in ("-e", n))]
        eth = decode(capsys, "-r", str(ROOT / "captures" / name), *args).splitlines(keepends=True)
        assert decode(capsys, "-r", str(path), *args) == "".join(eth[n - 1] for n in kept)


def test_worker_processes_give_the_same_fields(tmp_path: Path) -> None:
    path = rawip_copy(tmp_path, "rxe_write_bw_loss.pcap")
    names = ["frame.number", "ip.src", "infiniband.bth.psn", "rdmalab.icrc.status", "rdmalab.encap"]
    one = b"".join(field_text(path, names, workers=1))
    two = b"".join(field_text(path, names, workers=2, parallel_min_bytes=0, block_bytes=64 << 10))
    assert one == two and one.count(b"\n") == sum(1 for _ in records(path))


@pytest.mark.parametrize("name", ["rxe_send_bw_loss.pcap", "siw_crc_write_bw.pcap"])  # (IP frames only)
def test_analyze_finds_what_it_finds_in_the_ethernet_frames(tmp_path: Path, capsys: Any, monkeypatch: Any,
                                                             name: str) -> None:
    path = rawip_copy(tmp_path, name)
    assert main(["analyze", str(ROOT / "captures" / name)]) == 0
    eth = capsys.readouterr().out

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the per-packet decoder was asked for a raw IP frame")

    monkeypatch.setattr(analysis_rows, "decode_record", refuse)
    assert main(["analyze", str(path)]) == 0
    raw = capsys.readouterr().out
    assert raw.replace(str(path), "F") == eth.replace(str(ROOT / "captures" / name), "F") and "RDMA packets" in eth


@requires_tshark
def test_tshark_reads_them_so(tmp_path: Path, capsys: Any) -> None:
    for name in ("rxe_rping.pcap", "siw_crc_write_bw.pcap"):
        path = rawip_copy(tmp_path, name)
        names = ["frame.number", "ip.src", "udp.stream", "tcp.stream", "tcp.seq", "infiniband.bth.psn",
                 "iwarp_ddp.stag"]
        args = ["-r", str(path), "-T", "fields", *(a for n in names for a in ("-e", n))]
        assert decode(capsys, *args) == tshark(*args)
    # the link type's own protocol and encapsulation as tshark names them ("raw", WTAP_ENCAP_RAW_IP 7; the IPv4
    # and IPv6 link types go to IP straight, WTAP_ENCAP_RAW_IP4 129): frame.protocols, and the JSON's raw layer
    for linktype in (101, 12, 14, 228):
        path = rawip_copy(tmp_path, "rxe_rping.pcap", linktype)
        args = ["-r", str(path), "-T", "fields", "-e", "frame.protocols"]
        assert decode(capsys, *args) == tshark(*args), linktype
        ours = json.loads(decode(capsys, "-r", str(path), "-T", "json", "-c", "3"))
        theirs = json.loads(tshark("-r", str(path), "-T", "json", "-c", "3"))
        def head(doc: list[Any]) -> list[Any]:
            return [(list(p["_source"]["layers"])[:2], p["_source"]["layers"]["frame"]["frame.encap_type"]) for p in doc]

        assert head(ours) == head(theirs)
