"""Frames behind VLAN tags: an 802.1Q tag, an 802.1ad service tag with an 802.1Q tag inside (Q-in-Q,
a provider's network), an 802.1ad tag alone, two 802.1Q tags, three tags.  Real RoCEv2, TCP, ARP and
ICMPv6 frames of the rxe captures, tagged here.  Wireshark names an 802.1ad tag ``ieee8021ad`` (its
type ``ieee8021ah.etype``, packet-ieee8021ah.c) and only 802.1Q tags ``vlan``.

Before: the columns took only one 802.1Q tag, so behind an 802.1ad tag ``-T fields`` printed no IP or
InfiniBand field and ``analyze`` found no RDMA packet at all; the per-packet decoder called the
802.1ad tag a ``vlan`` (``vlan.id`` 100,5 where tshark says 5), and ``-T json`` lost it."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import read, records
from rdmalab.capture.analysis import analyze
from rdmalab.capture.columnar import read_columns
from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")

Q, AD = 0x8100, 0x88A8
#: the tags of each kind of frame: (TPID, VLAN ID) outermost first
SHAPES = {"none": [], "q": [(Q, 5)], "qinq": [(AD, 100), (Q, 5)], "ad": [(AD, 7)], "qq": [(Q, 100), (Q, 5)],
          "three": [(AD, 9), (Q, 100), (Q, 5)]}
FIELDS = ["frame.number", "eth.type", "vlan.id", "vlan.priority", "vlan.etype", "ieee8021ad.id",
          "ieee8021ad.priority", "ieee8021ah.etype", "ip.src", "ip.dst", "udp.dstport", "tcp.seq_raw", "tcp.len",
          "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.invariant.crc",
          "arp.opcode", "icmpv6.type", "frame.len"]


def _tagged(frame: bytes, tags: list[tuple[int, int]]) -> bytes:
    out = frame[:12]
    for tpid, vid in tags:
        out += struct.pack(">HH", tpid, 3 << 13 | vid)
    return out + frame[12:]


def _write(path: Path, shapes: list[str]) -> int:
    """The frames of two real captures, each frame tagged as the next of ``shapes`` says (in turn)."""
    n = 0
    with CaptureWriter(path) as w:
        for name in ("rxe_write_bw.pcap", "rxe_send_bw_loss.pcap"):
            for r in records(CAPTURES / name):
                w.write(_tagged(bytes(r.data), SHAPES[shapes[n % len(shapes)]]), r.ns or 0)
                n += 1
    return n


def _ours(capsys: Any, path: Path, *args: str) -> str:
    assert main(["decode", "-r", str(path), *args]) == 0
    out: str = capsys.readouterr().out
    return out


def _tshark(path: Path, *args: str) -> str:
    return subprocess.run(["tshark", "-n", "-r", str(path), *args], capture_output=True, text=True, check=True).stdout


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("shapes", [["qinq"], ["ad"], ["none", "q", "qinq", "ad"], ["qinq", "qq"],
                                    ["q", "three", "none"]], ids="+".join)
def test_fields_behind_tags_as_tshark(shapes: list[str], tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "tagged.pcap"
    _write(path, shapes)
    args = ["-T", "fields", *[a for f in FIELDS for a in ("-e", f)]]
    want = _tshark(path, *args)
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, path, *args, *opt) == want, (shapes, opt)
    flt = ["-Y", "infiniband.bth.opcode == 6 || (vlan.id == 5 && tcp) || ieee8021ad.id == 100"]
    want = _tshark(path, *args, *flt)
    assert want
    for opt in ([], ["--no-columnar"]):
        assert _ours(capsys, path, *args, *flt, *opt) == want, (shapes, opt)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("shapes", [["qinq"], ["none", "q", "qinq", "ad", "qq"]], ids="+".join)
def test_json_names_the_service_tag_as_tshark(shapes: list[str], tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "tagged.pcap"
    _write(path, shapes)
    theirs = json.loads(_tshark(path, "-T", "json"))
    for opt in ([], ["--no-columnar"]):
        ours = json.loads(_ours(capsys, path, "-T", "json", *opt))
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            la, lb = a["_source"]["layers"], b["_source"]["layers"]
            assert la.get("ieee8021ad") == lb.get("ieee8021ad")
            for key in ("vlan.id", "vlan.etype"):  # (two 802.1Q tags: a list in both)
                assert (la.get("vlan") or {}).get(key) == _first_vlan(lb.get("vlan"), key)
            assert la["frame"]["frame.protocols"] == lb["frame"]["frame.protocols"]
            assert la.get("data") == lb.get("data")


def _first_vlan(v: Any, key: str) -> Any:
    if v is None:
        return None
    if isinstance(v, list):  # tshark: one object a tag; ours: their values as lists
        return [x[key] for x in v]
    return v[key]


@pytest.mark.parametrize("shape", ["qinq", "ad", "q"])
def test_analyze_finds_the_rdma_traffic_behind_the_tags(shape: str, tmp_path: Path) -> None:
    plain, tagged = tmp_path / "plain.pcap", tmp_path / "tagged.pcap"
    _write(plain, ["none"])
    _write(tagged, [shape])
    a, b = analyze(plain), analyze(tagged)
    assert a.rdma_packets > 0 and b.rdma_packets == a.rdma_packets
    assert len(b.connections) == len(a.connections)
    cols = read_columns(tagged)
    assert int(cols.layers["rocev2"].sum()) == a.rdma_packets
    # the per-packet decoder reads the same frames behind the same tags
    assert sum(cp.packet.encap == "rocev2" for cp in read(tagged)) == a.rdma_packets
