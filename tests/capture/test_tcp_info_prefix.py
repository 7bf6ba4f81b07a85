"""tshark's TCP analysis flags in front of the summary lines' Info (``[TCP Retransmission] ``,
``[TCP Dup ACK 17#1] `` ...: rdmalab.capture.tcp_analysis.info_prefix) against tshark's own lines.

For every capture of ``captures/`` with TCP, the real captures appended (spurious retransmissions,
keep-alives), the made conversation where each flag occurs and the lossy bulk transfers
(test_tcp_analysis.py), the frames whose Info starts with the flags and the text of those flags are
tshark's (``tshark -r FILE``), line by line: on the columnar path (blocks of every size, the lines
written by worker processes while this one follows the analysis from the file read again), per
packet (``--no-columnar``), read from a pipe (``-r -``), and with display filters (on columns, on the
conversations, on the analysis itself and its values).  The other lines are not compared with
tshark's (rdmalab's TCP line keeps its raw ``Seq=``); test_columnar_summary.py holds both paths to the
same bytes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_tcp_analysis import (
    WITH_TCP,
    acknowledged_values,
    appended,
    lossy_conversation,
    made_conversation,
    to_itself,
    unseen_acknowledged,
)
from tshark_util import requires_tshark

from rdmalab.capture.columnar_summary import summary_bytes
from rdmalab.capture.filter import compile_filter
from rdmalab.capture.pcapwriter import write_capture
from rdmalab.capture.tcp_analysis import EXPERT, FLAG_FIELDS, INFO_PREFIXES, info_prefix
from rdmalab.cli import main

#: a line's number and the flags at the start of its Info (after the addresses, the protocol and the length)
_PREFIXED = re.compile(r"^ *(\d+) .*? → \S+ +\S+ +\d+ ((?:\[TCP (?!segment of a reassembled PDU)[^\]]*\] )+)")
#: the lines' frame numbers
_NUMBER = re.compile(r"^ *(\d+) ", re.M)


def prefixes(text: str) -> dict[int, str]:
    """frame -> the flags in front of its Info, of the summary lines ``text``."""
    out = {}
    for line in text.splitlines():
        m = _PREFIXED.match(line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def _tshark(path: Path, flt: str | None = None) -> str:
    args = ["tshark", "-n", "-r", str(path), *(("-Y", flt) if flt else ())]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def _ours(path: Path | str, capsys: Any, *extra: str) -> str:
    capsys.readouterr()
    assert main(["decode", "-r", str(path), *extra]) == 0
    return str(capsys.readouterr().out)


def _compared(path: Path, capsys: Any, flt: str | None = None) -> dict[int, str]:
    """tshark's prefixes (and its lines' frames, with a filter) and rdmalab's, on both paths, the same."""
    theirs = _tshark(path, flt)
    want = prefixes(theirs)
    extra = ("-Y", flt) if flt else ()
    for how in ((), ("--no-columnar",)):
        ours = _ours(path, capsys, *extra, *how)
        assert len(ours.splitlines()) == len(theirs.splitlines()), (how, flt)
        got = prefixes(ours)
        bad = [(f, want.get(f), got.get(f)) for f in sorted(set(want) | set(got)) if want.get(f) != got.get(f)]
        assert not bad, f"{path.name} {how} {flt}: {len(bad)} frames (tshark, rdmalab): {bad[:5]}"
        if flt:
            assert _NUMBER.findall(ours) == _NUMBER.findall(theirs), (how, flt)
    return want


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", WITH_TCP, ids=lambda p: p.name)
def test_the_flags_in_front_of_each_captures_lines_are_tsharks(path: Path, capsys: Any) -> None:
    _compared(path, capsys)


def _made(tmp_path: Path) -> list[Path]:
    out = []
    for name, frames in (("made", made_conversation()), ("unseen", unseen_acknowledged()),
                         ("values", acknowledged_values()), ("itself", to_itself()),
                         *((f"lossy{s}", lossy_conversation(s)) for s in range(6))):
        path = tmp_path / f"{name}.pcap"
        write_capture(path, frames)
        out.append(path)
    path = tmp_path / "appended.pcap"
    appended(path)
    return [*out, path]


@requires_tshark
@pytest.mark.tshark
def test_the_flags_of_made_and_lossy_conversations_are_tsharks(tmp_path: Path, capsys: Any) -> None:
    """Each flag and the combinations tshark writes (window full with a lost segment, zero window with an
    ACK of unseen data, a probe's ACK with a zero window ...) are compared: each text tshark has is seen."""
    seen: set[str] = set()
    for path in _made(tmp_path):
        seen |= set(_compared(path, capsys).values())
    parts = {p for text in seen for p in re.findall(r"\[TCP [^\]]*\] ", text)}
    kinds = {re.sub(r"\d+#\d+", "{frame}#{num}", p) for p in parts}
    assert kinds == {text for _name, text in INFO_PREFIXES}, kinds
    assert any(text.count("[TCP") > 1 for text in seen)


@requires_tshark
@pytest.mark.tshark
def test_the_flags_follow_the_analysis_from_block_to_block(tmp_path: Path, capsys: Any) -> None:
    """Small blocks, in one process and in worker processes (this one reads the file again for the
    analysis, beside them), and a pipe: the same lines."""
    path = tmp_path / "lossy.pcap"
    write_capture(path, lossy_conversation(1))
    theirs = _tshark(path)
    want = prefixes(theirs)
    assert len(want) > 40
    whole = _ours(path, capsys)
    assert prefixes(whole) == want
    for block in (512, 4096, 65536):
        for workers in (1, 2):
            got = b"".join(summary_bytes(path, block_bytes=block, workers=workers, parallel_min_bytes=0)).decode()
            assert got == whole, (block, workers)
    piped = subprocess.run([sys.executable, "-m", "rdmalab", "decode", "-r", "-"], input=path.read_bytes(),
                           capture_output=True, check=True).stdout.decode()
    assert piped == whole


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("flt", ["tcp.analysis.flags", "tcp.len > 0", "tcp.stream == 0 && tcp.flags.push == 1",
                                 "!tcp.analysis.retransmission", "tcp.analysis.ack_rtt > 0.001",
                                 "tcp.analysis.duplicate_ack_num >= 1 || tcp.analysis.window_update"])
def test_the_flags_of_the_lines_a_filter_keeps_are_tsharks(flt: str, tmp_path: Path, capsys: Any) -> None:
    """A filter on columns (written by blocks), on the conversations or the analysis (their own pass):
    the lines kept are tshark's, with its prefixes; and in blocks, in worker processes too."""
    for seed in (0, 1):
        path = tmp_path / f"lossy{seed}.pcap"
        write_capture(path, lossy_conversation(seed))
        _compared(path, capsys, flt)
        whole = _ours(path, capsys, "-Y", flt)
        for workers in (1, 2):
            got = b"".join(summary_bytes(path, flt=compile_filter(flt), filter_expr=flt, block_bytes=2048,
                                         workers=workers, parallel_min_bytes=0)).decode()
            assert got == whole, (flt, workers)


def test_the_text_of_each_flag() -> None:
    """packet-tcp.c's texts, the last prepended first; a retransmission's kind said alone."""
    assert info_prefix([]) == ""
    assert info_prefix(["tcp.analysis.retransmission"]) == "[TCP Retransmission] "
    assert info_prefix(["tcp.analysis.retransmission", "tcp.analysis.fast_retransmission"]) == \
        "[TCP Fast Retransmission] "
    assert info_prefix(["tcp.analysis.duplicate_ack"], (2, 17)) == "[TCP Dup ACK 17#2] "
    assert info_prefix(["tcp.analysis.lost_segment", "tcp.analysis.window_full"]) == \
        "[TCP Window Full] [TCP Previous segment not captured] "
    assert {name for name, _t in INFO_PREFIXES} == set(FLAG_FIELDS)


def seq_ack_trees(text: str, indent: int) -> dict[int, list[str]]:
    """frame -> its ``[SEQ/ACK analysis]`` tree's lines (``-V`` text: tshark's under its TCP tree at
    ``indent`` 4, rdmalab's among its TCP header's fields at 8), dedented."""
    out: dict[int, list[str]] = {}
    frame = 0
    cur: list[str] | None = None
    head = " " * indent + "[SEQ/ACK analysis]"
    for line in text.splitlines():
        m = re.match(r"^Frame (\d+): ", line)
        if m:
            frame, cur = int(m.group(1)), None
        elif line == head:
            cur = out[frame] = [line[indent:]]
        elif cur is not None and line.startswith(" " * (indent + 4)):
            cur.append(line[indent:])
        else:
            cur = None
    return out


def _same_trees(path: Path, capsys: Any) -> dict[int, list[str]]:
    """tshark's SEQ/ACK analysis trees (-V) and rdmalab's, on both paths (whose -V text is the same)."""
    want = seq_ack_trees(subprocess.run(["tshark", "-n", "-r", str(path), "-V"], capture_output=True, text=True,
                                        check=True).stdout, 4)
    fast = _ours(path, capsys, "-V")
    assert _ours(path, capsys, "-V", "--no-columnar") == fast
    got = seq_ack_trees(fast, 8)
    bad = [f for f in sorted(set(want) | set(got)) if want.get(f) != got.get(f)]
    assert not bad, f"{path.name}: {len(bad)} frames' trees differ; frame {bad[0]}: {want.get(bad[0])} {got.get(bad[0])}"
    return want


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", WITH_TCP, ids=lambda p: p.name)
def test_the_seq_ack_tree_of_each_capture_is_tsharks(path: Path, capsys: Any) -> None:
    _same_trees(path, capsys)


@requires_tshark
@pytest.mark.tshark
def test_the_seq_ack_trees_of_made_and_lossy_conversations_are_tsharks(tmp_path: Path, capsys: Any) -> None:
    """Every line kind tshark writes there (each flag's expert information, RTO, RTT negative too, bytes in
    flight, duplicate ACKs) is compared; the trees come after the TCP header's fields, in worker processes
    and small blocks too."""
    lines: set[str] = set()
    for path in _made(tmp_path):
        for tree in _same_trees(path, capsys).values():
            lines |= {re.sub(r"-?\d+(\.\d+)?", "N", x.strip()) for x in tree}
    assert {"[The RTO for this segment was: N seconds]", "[The RTT to ACK the segment was: N seconds]",
            "[Bytes in flight: N]", "[Duplicate to the ACK in frame: N]", "[This is a TCP duplicate ack]",
            "[Expert Info (Chat/Sequence): TCP window update]"} <= lines, lines
    assert sum(1 for x in lines if x.startswith("[Expert Info")) >= 14
    from rdmalab.capture.tree_templates import tree_blocks

    path = tmp_path / "lossy3.pcap"
    whole = _ours(path, capsys, "-V")
    assert "[SEQ/ACK analysis]" in whole
    for block in (1024, 65536):
        for workers in (1, 2):
            got = b"".join(tree_blocks(path, block_bytes=block, workers=workers, parallel_min_bytes=0)).decode()
            assert got == whole, (block, workers)


def json_analysis(text: str) -> dict[int, Any]:
    """frame -> the ``tcp.analysis`` member of its ``tcp`` layer in ``-T json`` text, its members as (key,
    value) pairs in order (tshark repeats a key: a fast retransmission's two ``_ws.expert``)."""
    out: dict[int, Any] = {}
    for pkt in json.loads(text, object_pairs_hook=list):
        layers = dict(dict(dict(pkt)["_source"])["layers"])
        tcp = layers.get("tcp")
        got = [v for k, v in tcp or [] if k == "tcp.analysis"]
        if got:
            out[int(dict(layers["frame"])["frame.number"])] = got[0]
    return out


def _same_json(path: Path, capsys: Any, monkeypatch: Any) -> dict[int, Any]:
    """tshark's tcp.analysis (-T json) and rdmalab's, per packet and in worker processes (the same text)."""
    from rdmalab.capture import blockpool

    want = json_analysis(subprocess.run(["tshark", "-n", "-r", str(path), "-T", "json"], capture_output=True,
                                        text=True, check=True).stdout)
    one = _ours(path, capsys, "-T", "json", "--workers", "1")
    got = json_analysis(one)
    bad = [f for f in sorted(set(want) | set(got)) if want.get(f) != got.get(f)]
    assert not bad, f"{path.name}: {len(bad)} frames differ; frame {bad[0]}: {want.get(bad[0])} {got.get(bad[0])}"
    with monkeypatch.context() as m:
        m.setattr(blockpool, "JSON_PARALLEL_MIN_BYTES", 0)
        assert _ours(path, capsys, "-T", "json", "--workers", "2") == one
    return want


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", [p for p in WITH_TCP if p.name.startswith("siw")], ids=lambda p: p.name)
def test_the_json_tcp_analysis_of_each_capture_is_tsharks(path: Path, capsys: Any, monkeypatch: Any) -> None:
    _same_json(path, capsys, monkeypatch)


@requires_tshark
@pytest.mark.tshark
def test_the_json_tcp_analysis_of_made_and_lossy_conversations_is_tsharks(tmp_path: Path, capsys: Any,
                                                                          monkeypatch: Any) -> None:
    """Every flag's expert object, the RTO, the duplicate ACK's frame tree, repeated keys in order."""
    keys: set[str] = set()

    def walk(members: Any) -> None:
        for k, v in members:
            keys.add(k if k != "_ws.expert" else f"_ws.expert/{v[0][0]}")
            if isinstance(v, list):
                walk(v)

    for path in _made(tmp_path):
        for members in _same_json(path, capsys, monkeypatch).values():
            walk(members)
    assert {f"_ws.expert/{name}" for name, _s, _m in EXPERT} <= keys, keys
    assert {"tcp.analysis.rto", "tcp.analysis.duplicate_ack_frame_tree", "tcp.analysis.ack_rtt"} <= keys
