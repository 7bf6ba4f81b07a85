"""``rdmalab decode -x`` (and ``-P``): each packet's bytes in hex and ASCII as tshark 4.0 prints them,
with the bytes tshark shows as further sources (an FPDU put together from several TCP segments, an
FPDU with its MPA markers taken out), against tshark on every capture of the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark

from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.render import hex_dump
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p.name for p in CAPTURES.glob("*.pcap"))
#: the captures where tshark also shows a Send message of several FPDUs put together (packet-iwarp-ddp-rdmap.c's
#: reassembly, titled "Reassembled SMB Direct (4096 bytes)"), as rdmalab -x does
SEND_MESSAGES = {"siw_send_bw.pcap", "siw_crc_send_bw.pcap"}
#: tshark's heuristic dissectors that claim RDMA payloads as other protocols' (and show their reassembly)
NO_HEURISTICS = ["--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"]


def _tshark(*args: str) -> str:
    return subprocess.run(["tshark", "-n", *NO_HEURISTICS, *args], capture_output=True, text=True, check=True).stdout


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
def test_hex_dump_of_every_capture_as_tshark(name: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    want = _tshark("-r", path, "-x")
    assert ("Reassembled SMB Direct" in want) == (name in SEND_MESSAGES)
    assert _ours(capsys, "-r", path, "-x") == want
    flt = "frame.number <= 5 || infiniband.bth.opcode == 4 || tcp.flags.syn == 1"
    if name in SEND_MESSAGES:  # (the frames that end a Send message, whose FPDUs the filter leaves out)
        flt += " || iwarp_ddp.last_flag == 1"
    want = _tshark("-r", path, "-x", "-Y", flt, "-c", "40")
    assert _ours(capsys, "-r", path, "-x", "-Y", flt, "-c", "40") == want


@pytest.mark.parametrize("name", ["rxe_rping.pcap", "siw_read_bw.pcap", "hw_ib_connectx_erf.pcap"])
def test_summary_tree_and_bytes_together(name: str, capsys: Any) -> None:
    """``-P -x``: each summary line, a blank line, the bytes, a blank line; ``-V -x``: the tree, a blank
    line, the bytes, a blank line; ``-P -V``: the summary line above each tree (tshark's layout)."""
    path = str(CAPTURES / name)
    lines = _ours(capsys, "-r", path).splitlines()
    dumps = _ours(capsys, "-r", path, "-x").split("\n\n")[:-1]
    trees = _ours(capsys, "-r", path, "-V").split("\n\n")[:-1]
    assert len(lines) == len(dumps) == len(trees) > 0
    assert _ours(capsys, "-r", path, "-P", "-x") == "".join(f"{s}\n\n{d}\n\n" for s, d in zip(lines, dumps, strict=True))
    assert _ours(capsys, "-r", path, "-V", "-x") == "".join(f"{t}\n\n{d}\n\n" for t, d in zip(trees, dumps, strict=True))
    assert _ours(capsys, "-r", path, "-P", "-V") == "".join(f"{s}\n{t}\n\n" for s, t in zip(lines, trees, strict=True))
    assert _ours(capsys, "-r", path, "-P") == "".join(f"{s}\n" for s in lines)  # -P alone: the summary, as tshark


@requires_tshark
@pytest.mark.tshark
def test_long_and_empty_frames(tmp_path: Path, capsys: Any) -> None:
    """A frame past 64 KiB counts its offsets in five digits; an empty frame is a blank line."""
    path = tmp_path / "odd.pcap"
    with CaptureWriter(path) as w:
        w.write(bytes(range(256)) * 300, 1_000_000_000)
        w.write(b"\x7f\x80 ~AZaz\x00", 2_000_000_000)
        w.write(b"", 3_000_000_000)
        w.write(bytes(16), 4_000_000_000)
    assert _ours(capsys, "-r", str(path), "-x") == _tshark("-r", str(path), "-x")


def test_the_layout() -> None:
    assert hex_dump(b"RT\x00\x01 ~\x7f") == "0000  52 54 00 01 20 7e 7f" + " " * 30 + "RT.. ~."
    assert hex_dump(bytes(17)).splitlines()[1] == "0010  00" + " " * 48 + "."
    assert hex_dump(b"") == ""


@pytest.mark.parametrize("fmt", ["json", "fields"])
def test_not_with_the_other_formats(fmt: str, capsys: Any) -> None:
    rc = main(["decode", "-r", str(CAPTURES / "rxe_rping.pcap"), "-x", "-T", fmt, *(["-e", "ip.src"] if fmt == "fields" else [])])
    assert rc != 0
    assert "-x: for the text output" in capsys.readouterr().err
