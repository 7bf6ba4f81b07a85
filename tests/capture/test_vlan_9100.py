"""EtherType 0x9100, the TPID of stacked tags before IEEE 802.1ad gave 0x88A8: tshark 4.0 reads an 802.1Q
tag after it (packet-vlan.c registers its ``vlan.qinq_ethertype`` preference, 0x9100 by default, in the
``ethertype`` table), a ``vlan`` layer like 0x8100's.  rdmalab read no tag: the frame stopped at ``eth``.
The columns leave such frames to the per-packet decoder (``columnar.stacked_tags``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture


def _capture(path: Path, linktype: int = 1) -> Path:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Dot1Q, Ether

    def eth(tpid: int) -> Ether:
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=tpid)

    ip = IP(src="10.0.0.1", dst="10.0.0.2")
    seqs = iter(range(1000, 2000, 12))

    def seg() -> TCP:  # (each segment after the last: no retransmission)
        return TCP(sport=40000, dport=5001, flags="A", seq=next(seqs), ack=1) / (b"t" * 12)

    frames = [
        eth(0x8100) / Dot1Q(vlan=5) / ip / seg(),
        eth(0x9100) / Dot1Q(vlan=9, prio=3) / ip / seg(),  # (one tag)
        eth(0x9100) / Dot1Q(vlan=7) / Dot1Q(vlan=5) / ip / seg(),  # (then an 802.1Q tag)
        eth(0x88A8) / Dot1Q(vlan=9, type=0x9100) / Dot1Q(vlan=10) / ip / seg(),  # (after an 802.1ad tag)
        eth(0x9100) / Dot1Q(vlan=9, type=0x88A8) / Dot1Q(vlan=10) / ip / seg(),  # (before one)
        eth(0x8100) / Dot1Q(vlan=9, type=0x9100) / Dot1Q(vlan=10) / ip / seg(),  # (after an 802.1Q tag)
        eth(0x9100) / Dot1Q(vlan=11) / ip / UDP(sport=7000, dport=7001) / (b"u" * 20),
        eth(0x9100) / Dot1Q(vlan=12, type=20) / (b"x" * 30),  # (a length after the tag)
    ]
    raw = [bytes(f) for f in frames]
    if linktype == 113:  # (Linux cooked v1: its header, then the EtherType and what follows it)
        raw = [(4).to_bytes(2, "big") + (1).to_bytes(2, "big") + (6).to_bytes(2, "big") + r[6:12] + bytes(2) + r[12:]
               for r in raw]
    write_capture(path, [(1_700_000_000_000_000_000 + i * 1000, r) for i, r in enumerate(raw)], linktype=linktype)
    return path


_FIELDS = ("frame.number", "eth.type", "vlan.id", "vlan.priority", "vlan.etype", "vlan.len",
           "ieee8021ad.id", "ip.src", "tcp.srcport", "tcp.stream", "udp.dstport", "vlan.trailer", "eth.padding")


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
@pytest.mark.parametrize("linktype", [1, 113])
def test_as_tshark_shows_it(path_args: list[str], linktype: int, tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "tags.pcap", linktype))
    fields = ["-T", "fields", *(a for f in _FIELDS if linktype == 1 or not f.startswith("eth.")
                                for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    # (frame.protocols of the TCP frames: rdmalab's ends at udp and vlan where tshark's goes on to data and llc)
    protocols = ["-Y", "tcp", "-T", "fields", "-e", "frame.protocols"]
    assert decode(capsys, *path_args, "-r", path, *protocols) == tshark("-r", path, *protocols)
    for flt in ("vlan.id == 9", "vlan", "vlan.etype == 0x88a8", "tcp.stream == 0", "vlan.len"):
        want = tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, *path_args, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt


@requires_tshark
@pytest.mark.tshark
def test_the_json_vlan_layers_and_lines(tmp_path: Path, capsys: Any) -> None:
    import json

    path = str(_capture(tmp_path / "tags.pcap"))
    want = [p["_source"]["layers"] for p in json.loads(tshark("-r", path, "-T", "json"))]
    for path_args in ([], ["--no-columnar"]):
        got = [p["_source"]["layers"] for p in json.loads(decode(capsys, *path_args, "-r", path, "-T", "json"))]
        for w, g in zip(want, got, strict=True):
            assert g.get("vlan") == w.get("vlan") and g.get("ieee8021ad") == w.get("ieee8021ad")
    lines = decode(capsys, "-r", path)
    assert lines == decode(capsys, "--no-columnar", "-r", path)
    assert lines.count("40000 → 5001 [ACK]") == 6


@pytest.mark.parametrize("tpids", [(0x9100,), (0x8100, 0x8100), (0x9100, 0x8100), (0x88A8, 0x8100, 0x8100)],
                         ids=["9100", "two 802.1Q", "9100 then 802.1Q", "three tags"])
def test_analyze_and_top_read_the_frames_behind_the_tags(tmp_path: Path, capsys: Any, tpids: tuple[int, ...]) -> None:
    """``analyze`` and ``top`` find in a real rxe capture whose every frame carries tags the columns do not
    read (0x9100, two 802.1Q tags, three tags) what they find in the untagged capture (the connections,
    messages, NAKs and retransmissions): such frames go to the per-packet decoder, as ``decode``'s do.  They
    found no RDMA packet at all before."""
    import json
    import struct

    from rdmalab.capture import records
    from rdmalab.cli import main

    src = Path(__file__).resolve().parents[2] / "captures" / "rxe_write_bw_loss.pcap"
    tags = b"".join(struct.pack(">HH", tp, 5 + i) for i, tp in enumerate(tpids))
    path = tmp_path / "tagged.pcap"
    write_capture(path, [(r.ns, bytes(r.data)[:12] + tags + bytes(r.data)[12:]) for r in records(src)], nano=False)
    outs = []
    for p in (path, src):
        assert main(["analyze", str(p)]) == 0
        outs.append(capsys.readouterr().out.splitlines()[1:])
        assert main(["top", "-r", str(p), "--once", "--speed", "max", "-T", "json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[2] and len(outs[0]) > 10 and "retransmission" in "\n".join(outs[0])
    assert outs[1] == outs[3]
