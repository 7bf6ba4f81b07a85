"""A capture that says its Ethernet frames keep their FCS, or that they do not: a pcap file's header
(the F bit of its link type word and the FCS length in bits 28-31, pcap-savefile(5)) or a pcapng
interface's ``if_fcslen`` option (code 13).  tshark then no longer guesses from the lengths: a frame
under 64 octets ends in its FCS too, an 802.1Q-tagged frame shows its FCS (in the ``eth`` tree: the
tag's dissector divides what is left), and a capture that says 0 has none.

The frames are those of ``test_eth_trailer.CASES`` and two more; every expected value below was
printed by tshark 4.0.17 (``tshark -r F -T fields -e frame.number -e eth.padding -e eth.trailer -e
vlan.trailer -e eth.fcs -e eth.fcs.status``); with tshark installed the tests also ask it again."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from test_eth_trailer import _UDP, _VLAN, CASES, _args, _fcs
from test_pcapng_bulk import _block, _epb, _shb
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import read
from rdmalab.capture.json_blocks import iter_json_file
from rdmalab.capture.pcapio import pcap_fcs_len
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.tsjson import iter_json

#: two frames more: an 802.1Q frame padded, then its FCS; a runt (under 64 octets) ending in its FCS
MORE = {
    "802.1Q, padded to 64, then its FCS": _VLAN + bytes(4) + _fcs(_VLAN + bytes(4)),
    "a runt, then its FCS": _UDP + bytes(2) + _fcs(_UDP + bytes(2)),
}
FRAMES = [f for f, _cells in CASES.values()] + list(MORE.values())


def _pcap(path: Path, fcs: int) -> Path:
    """A pcap file whose header says its frames keep ``fcs`` octets of FCS."""
    write_capture(path, [((1000 + i) * 10**9, d) for i, d in enumerate(FRAMES)], nano=False)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<I", raw, 20, 1 | 0x04000000 | (fcs // 2) << 28)
    path.write_bytes(bytes(raw))
    return path


def _pcapng(path: Path, fcs: int) -> Path:
    """A pcapng file whose one interface says (``if_fcslen``) its frames keep ``fcs`` octets of FCS."""
    opts = struct.pack("<HH", 13, 1) + bytes([fcs, 0, 0, 0]) + struct.pack("<HH", 0, 0)
    parts = [_shb("<"), _block("<", 1, struct.pack("<HHI", 1, 0, 0) + opts)]
    parts += [_epb("<", 0, (1000 + i) * 10**6, d) for i, d in enumerate(FRAMES)]
    path.write_bytes(b"".join(parts))
    return path


#: what tshark 4.0.17 prints (``_args``) when the capture says 4 octets of FCS, frame by frame: note a
#: frame padded to 60 with nothing after (no FCS, no trailer: fewer than 4 octets left after the padding),
#: a datagram that runs into the last 4 octets (the FCS all the same) and the tagged frames' FCS
WITH_FCS = """\
1	000000000000000000000000000000000000
2	000000000000000000000000000000000000			0x0414e8a1	2
3		0101010101010101010101010101		0x01010101	2
4				0x0a000001	2
5	000000000000000000000000000000000000
6	000000000000000000000000000000000000			0xbad63df9	2
7				0x26636866	2
8		11223344		0x883dcfb1	2
9				0xdeadbeef	2
10				0x00001122	2
11	00000000,00000000000000000000
12	00000000000000000000		00000000	0x49e1492c	2
13				0xbd6b8fc5	2
14				0x00010203	2
15	00000000000000000000		0000000000000000	0x93ea1b7c	2
16		0000		0x7b990e4c	2
"""
#: ... and when it says 0: no FCS anywhere, every octet after the padding a trailer
WITHOUT_FCS = """\
1	000000000000000000000000000000000000
2	000000000000000000000000000000000000	0414e8a1
3		010101010101010101010101010101010101
4
5	000000000000000000000000000000000000	abcd
6	000000000000000000000000000000000000	bad63df9
7		26636866
8		11223344883dcfb1
9		deadbeef
10		1122
11	0000000000000000000000000000
12	0000000000000000000000000000		49e1492c
13		bd6b8fc5
14		010203
15	0000000000000000000000000000		0000000093ea1b7c
16		00007b990e4c
"""
#: the one frame rdmalab divides otherwise: 802.1Q, 60 octets with the FCS it is said to keep (a wire's
#: frames are 64 or more with their FCS). tshark shows padding twice, 4 octets in the Ethernet tree where
#: the FCS would be and 10 in the tag's; rdmalab shows the tag's 10 and, like tshark, no FCS
NOT_DIVIDED = {11: "11\t00000000000000000000\t\t\t\t\n"}


def _table(text: str) -> str:
    """The table as ``-T fields`` prints it: every row with its 6 cells."""
    return "".join("\t".join((line.split("\t") + [""] * 6)[:6]) + "\n" for line in text.splitlines())


def _ours(text: str) -> str:
    rows = _table(text).splitlines(keepends=True)
    return "".join(NOT_DIVIDED.get(i, row) for i, row in enumerate(rows, 1))


FORMS = {"pcap": _pcap, "pcapng": _pcapng}


def test_the_header_says_it() -> None:
    head = bytearray(24)
    for word, want in ((1, -1), (1 | 0x04000000 | 2 << 28, 4), (1 | 0x04000000, 0), (1 | 2 << 28, -1)):
        struct.pack_into("<I", head, 20, word)
        assert pcap_fcs_len(bytes(head), "<") == want


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("fcs", [4, 0])
def test_each_frame_divided_as_tshark_divides_it(tmp_path: Path, capsys: Any, form: str, fcs: int) -> None:
    path = FORMS[form](tmp_path / "t", fcs)
    assert [cp.wire_length for cp in read(path)] == [len(f) for f in FRAMES]
    assert decode(capsys, *_args(path)) == (_ours(WITH_FCS) if fcs == 4 else _table(WITHOUT_FCS))


@requires_tshark
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("fcs", [4, 0])
def test_tshark_divides_them_so_today(tmp_path: Path, form: str, fcs: int) -> None:
    path = FORMS[form](tmp_path / "t", fcs)
    assert tshark(*_args(path)) == _table(WITH_FCS if fcs == 4 else WITHOUT_FCS)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_tree_json_and_workers(tmp_path: Path, capsys: Any, form: str) -> None:
    path = FORMS[form](tmp_path / "t", 4)
    runt = len(FRAMES)  # the last frame: 48 octets, its FCS the last 4
    tree = decode(capsys, "-r", str(path), "-V", "-Y", f"frame.number == {runt}")
    assert "    Ethernet FCS: 0x7b990e4c (good) @ bytes 44-47  {eth.fcs}" in tree.splitlines()
    assert "    Ethernet trailer: 2 byte(s) @ bytes 42-43: 00 00  {eth.trailer}" in tree.splitlines()
    # an untagged frame's tree by the templates (-V without a filter) says the same as the per-packet one's
    assert decode(capsys, "-r", str(path), "-V").split("\n\n") == [
        decode(capsys, "-r", str(path), "-V", "-Y", f"frame.number == {i}").rstrip("\n")
        for i in range(1, len(FRAMES) + 1)] + [""]
    layers = [p["_source"]["layers"] for p in json.loads(decode(capsys, "-r", str(path), "-T", "json"))]
    tagged = layers[len(CASES)]  # 802.1Q padded to 64, then its FCS: the FCS in eth's tree, the trailer in the tag's
    assert (tagged["eth"]["eth.fcs"], tagged["vlan"]["vlan.trailer"]) == ("0x93ea1b7c", "00:00:00:00:00:00:00:00")
    assert "eth.fcs" not in tagged["vlan"]
    # blocks rendered in worker processes (what `decode -T json` does with a big file) read the header too
    assert "".join(iter_json_file(str(path), workers=2)) == "".join(iter_json(read(path)))
