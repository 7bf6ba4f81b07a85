"""``decode -T json`` of a pcapng file carries what tshark's does from the file's own blocks: the frame
layer begins with ``frame.section_number``, ``frame.interface_id`` and ``frame.interface_id_tree`` (the
interface's name and description), and a frame with comments has a ``pkt_comment`` layer before it
(each comment with its expert item).  An ERF record's capture port is its interface, as in tshark.
Before, the JSON had none of them (the fields and filters did).  Both ways of writing the JSON (one
process, and blocks rendered in worker processes whose text gets them in the parent) and a pipe are
held to tshark and to each other, on files whose interfaces change inside a block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_frame_meta import _sections
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark

from rdmalab.capture import read
from rdmalab.capture.json_blocks import iter_json_file
from rdmalab.capture.pcapio import FrameMeta
from rdmalab.capture.tsjson import iter_json
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: the frame layer's keys that come from the pcapng blocks
HEAD = ("frame.section_number", "frame.interface_id", "frame.interface_id_tree")


@pytest.fixture(scope="module")
def files(tmp_path_factory: Any) -> dict[str, Path]:
    """Captures with sections, several interfaces and comments: rdmalab's annotated one, a one-section
    file of three interfaces (one named and described) with one and two comments per frame, captures of
    different links appended (an interface each) with comments added by editcap, and the ERF capture."""
    d = tmp_path_factory.mktemp("jsonmeta")
    annotated = d / "annotated.pcapng"
    assert main(["analyze", str(CAPTURES / "rxe_write_bw_loss.pcap"), "--annotate", str(annotated), "-q"]) == 0
    one = d / "one.pcapng"
    _sections(one, 1)
    merged, commented = d / "merged.pcapng", d / "commented.pcapng"
    subprocess.run(["mergecap", "-a", "-F", "pcapng", "-w", str(merged), str(CAPTURES / "rxe_send_bw_loss.pcap"),
                    str(CAPTURES / "siw_send_bw.pcap"), str(CAPTURES / "rxe_rping.pcap")], check=True)
    notes = [a for k, n in ((1, "first"), (150, "with a comma, and ü"), (160, "x"), (250, "late")) for a in ("-a", f"{k}:{n}")]
    subprocess.run(["editcap", *notes, str(merged), str(commented)], check=True)
    return {"annotated": annotated, "one": one, "commented": commented, "erf": CAPTURES / "hw_ib_connectx_erf.pcap",
            "pcap": CAPTURES / "rxe_rping.pcap"}


def _tshark_json(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json", "--no-duplicate-keys"],
                         capture_output=True, text=True, check=True).stdout
    data: list[dict[str, Any]] = json.loads(out)
    return data


def _blocks_part(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What a frame's JSON holds from the pcapng blocks: the frame layer's first keys and their values,
    the pkt_comment layer, and the order of the first two layers."""
    layers = obj["_source"]["layers"]
    frame = layers["frame"]
    head = [(k, frame[k]) for k in list(frame)[:3] if k in HEAD]
    return head, layers.get("pkt_comment"), list(layers)[:2]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["annotated", "one", "commented", "erf", "pcap"])
def test_json_has_the_blocks_fields_as_tshark(name: str, files: dict[str, Path], capsys: Any) -> None:
    path = files[name]
    capsys.readouterr()
    mine = json.loads(_ours(capsys, "-T", "json", "-r", str(path)))
    theirs = _tshark_json(path)
    assert len(mine) == len(theirs)
    assert [_blocks_part(a) for a in mine] == [_blocks_part(b) for b in theirs]
    heads = [_blocks_part(a) for a in mine]
    if name == "pcap":  # (a pcap file has neither, in tshark as here)
        assert all(h == ([], None, ["frame", "eth"]) for h in heads)
    else:
        assert all(h[0] for h in heads)
    if name in ("annotated", "one", "commented"):
        assert any(h[1] is not None for h in heads)
    if name in ("annotated", "one"):  # (two comments on a frame: a list, as tshark --no-duplicate-keys)
        assert any(h[1] is not None and isinstance(h[1]["frame.comment"], list) for h in heads)


@pytest.mark.parametrize("name", ["annotated", "one", "commented"])
def test_json_in_workers_gets_them_in_frame_order(name: str, files: dict[str, Path]) -> None:
    """Small blocks (many of them; the interface changes inside some; TCP frames decoded in the parent
    between runs of frames rendered in the workers): the text of one process, byte for byte."""
    path = str(files[name])
    one = "".join(iter_json(read(path), meta=FrameMeta(path)))
    for count in (None, 37):
        many = "".join(iter_json_file(path, workers=2, block_bytes=4096, count=count, meta=FrameMeta(path)))
        want = one if count is None else "".join(iter_json(read(path, count=count), meta=FrameMeta(path)))
        assert many == want, count
    assert '"frame.interface_id"' in one


@requires_tshark
@pytest.mark.tshark
def test_a_later_section_named_by_its_own_interfaces(tmp_path: Path, capsys: Any) -> None:
    """tshark 4.0 names an interface of a later section after the first section's interface of the same
    number (the -T fields test holds the same); rdmalab names it by its own section's block.  Everything
    else agrees."""
    path = tmp_path / "two.pcapng"
    _sections(path, 2)
    capsys.readouterr()
    mine = json.loads(_ours(capsys, "-T", "json", "-r", str(path)))
    theirs = _tshark_json(path)
    differ = []
    for a, b in zip(mine, theirs, strict=True):
        if _blocks_part(a) != _blocks_part(b):
            fa, fb = a["_source"]["layers"]["frame"], b["_source"]["layers"]["frame"]
            assert fa["frame.section_number"] == "2" and fa["frame.interface_id_tree"] != fb["frame.interface_id_tree"]
            differ.append(fa["frame.interface_id_tree"]["frame.interface_name"])
    assert differ and set(differ) <= {"veth1"}, differ  # section 2's first interface is veth1, not veth0


@requires_tshark
@pytest.mark.tshark
def test_a_stream_gives_them_too(files: dict[str, Path]) -> None:
    """From a pipe the blocks are read as the stream's reader reads them: the JSON of the file."""
    for name in ("one", "commented"):
        with open(files[name], "rb") as f:
            proc = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-T", "json", "-r", "-"], stdin=f,
                                  capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
        assert proc.returncode == 0, proc.stderr
        assert [_blocks_part(a) for a in json.loads(proc.stdout)] == [_blocks_part(b) for b in _tshark_json(files[name])]
