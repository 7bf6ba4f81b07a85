"""``rdmalab decode -r FILE -Y FILTER -w OUT`` (and ``-F pcap``, ``-w -``): the packets a filter shows
copied into a new capture, each record as it was read, as ``tshark -w`` writes them.  Compared with
tshark's own output file, read back by tshark: the same frames, bytes, lengths and times.  Before:
"unrecognized arguments: -w"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture import frame_fields, read, records
from rdmalab.capture.linktypes import LINKTYPE_ERF, LINKTYPE_ETHERNET
from rdmalab.capture.pcapio import CaptureError
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.reader import write_shown
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILTERS = [None, "infiniband.bth.opcode == 4 || tcp.flags.syn == 1", 'frame contains "MPA"',
           "ip.addr == 10.0.0.1 && frame.time_relative > 1", "infiniband.aeth.syndrome >= 0x60 || arp"]
#: what tshark reads back from each copy (its time of an ERF record is the pcapng block's, not the ERF
#: header's, in tshark's own copy too: left out for ERF)
READ_BACK = ["frame.len", "frame.cap_len", "frame.encap_type", "frame.protocols"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["siw_rping.pcap", "rxe_send_bw_loss.pcap", "hw_ib_connectx_erf.pcap",
                                  "rxe_write_bw.pcap"])
@pytest.mark.parametrize("fmt", ["pcapng", "pcap"])
def test_the_copy_is_tsharks(name: str, fmt: str, tmp_path: Path, capsys: Any) -> None:
    path = str(CAPTURES / name)
    erf = next(records(path)).linktype == LINKTYPE_ERF
    fields = READ_BACK + ([] if erf else ["frame.time_epoch"])
    for flt in FILTERS:
        theirs, ours = tmp_path / f"t.{fmt}", tmp_path / f"o.{fmt}"
        sel = ["-Y", flt] if flt else []
        subprocess.run(["tshark", "-n", "-r", path, *sel, "-F", fmt, "-w", str(theirs)], check=True,
                       capture_output=True)
        assert main(["decode", "-r", path, *sel, "-F", fmt, "-w", str(ours)]) == 0
        assert capsys.readouterr().out == ""  # (nothing printed, as tshark -w)
        args = ["-T", "fields", *[a for f in fields for a in ("-e", f)]]
        assert _tshark("-r", str(ours), *args) == _tshark("-r", str(theirs), *args), flt
        assert _tshark("-r", str(ours), "-x") == _tshark("-r", str(theirs), "-x"), flt
        assert ours.read_bytes()[:4] == (b"\x0a\x0d\x0d\x0a" if fmt == "pcapng" else b"\x4d\x3c\xb2\xa1")


def test_a_pcap_holds_one_link_type(tmp_path: Path) -> None:
    two = tmp_path / "two.pcapng"
    with CaptureWriter(two, format="pcapng", linktype=None) as w:
        eth = w.add_interface(LINKTYPE_ETHERNET)
        erf = w.add_interface(LINKTYPE_ERF)
        first = next(records(CAPTURES / "rxe_rping.pcap"))
        w.write(first.data, 1_000, interface=eth)
        w.write(next(records(CAPTURES / "hw_ib_connectx_erf.pcap")).data, 2_000, interface=erf)
    with pytest.raises(CaptureError, match="frame 2 is of link type 197, the pcap file written of link type 1: "
                                           "a pcap file holds one \\(write pcapng\\)"):
        write_shown(two, tmp_path / "out.pcap", format="pcap")
    assert write_shown(two, tmp_path / "out.pcapng") == 2
    assert [r.linktype for r in records(tmp_path / "out.pcapng")] == [LINKTYPE_ETHERNET, LINKTYPE_ERF]


def test_a_stream_in_and_out(tmp_path: Path) -> None:
    """``cat FILE | rdmalab decode -r - -Y ... -w - | ...``: read once, written as it goes."""
    src = CAPTURES / "rxe_send_bw_loss.pcap"
    got = subprocess.run([sys.executable, "-c", "from rdmalab.cli import main; raise SystemExit(main())", "decode",
                          "-r", "-", "-Y", "infiniband.aeth", "-w", "-"], input=src.read_bytes(),
                         capture_output=True, check=True).stdout
    out = tmp_path / "piped.pcapng"
    out.write_bytes(got)
    want = [r.data for r in records(src) if r.frame_number in _aeth_frames(src)]
    assert [r.data for r in records(out)] == want and want


def _aeth_frames(path: Path) -> set[int]:
    return {cp.frame_number for cp in read(path) if any(k.startswith("infiniband.aeth") for k in frame_fields(cp))}


@pytest.mark.parametrize("extra,needle", [
    (["-V"], "-w out.pcapng writes the packets to a file; -V prints them"),
    (["-T", "json"], "-T json prints them"),
    (["-x", "-P"], "-x, -P prints them"),
])
def test_writing_or_printing(extra: list[str], needle: str, capsys: Any) -> None:
    assert main(["decode", "-r", str(CAPTURES / "rxe_rping.pcap"), "-w", "out.pcapng", *extra]) == 1
    assert needle in capsys.readouterr().err


def test_not_over_the_file_read(tmp_path: Path, capsys: Any) -> None:
    copy = tmp_path / "c.pcap"
    copy.write_bytes((CAPTURES / "rxe_rping.pcap").read_bytes())
    assert main(["decode", "-r", str(copy), "-w", str(copy)]) == 1
    assert "that is the file being read" in capsys.readouterr().err
    assert copy.read_bytes() == (CAPTURES / "rxe_rping.pcap").read_bytes()
    assert main(["decode", "-r", str(copy), "-F", "pcap"]) == 1
    assert "-F pcap: the format of the file -w writes" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["/nonexistent/out.pcapng", "."])
def test_a_place_that_cannot_be_written_is_named(where: str, capsys: Any) -> None:
    assert main(["decode", "-r", str(CAPTURES / "rxe_rping.pcap"), "-w", where]) == 1
    err = capsys.readouterr().err
    assert f"-w {where}: cannot write the file there" in err and "Traceback" not in err
