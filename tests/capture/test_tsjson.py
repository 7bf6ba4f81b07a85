"""``rdmalab decode -T json`` against ``tshark -T json``, field by field, on every capture in captures/."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture import read
from rdmalab.capture.columnar import COLUMN_BY_NAME
from rdmalab.capture.crosscheck import known_ws_names, parse_ws_value
from rdmalab.capture.defects import explain
from rdmalab.cli import build_parser

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p for p in CAPTURES.glob("*") if p.suffix in (".pcap", ".pcapng")) if CAPTURES.is_dir() else []
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")
# The RDMA layers compared (RoCE/IB, iWARP) and the headers carrying them.
RDMA_LAYERS = ("infiniband", "iwarp_mpa", "iwarp_ddp_rdmap")
CARRIER_LAYERS = ("eth", "vlan", "ip", "ipv6", "udp")


def flatten(node: Any, out: dict[str, list[str]], heads: set[str] | None = None) -> None:
    """Every leaf of a layer: name -> its string values in order (subtrees and lists walked).

    ``heads`` collects the names that stand for a subtree's bytes (``infiniband.bth``)."""
    if isinstance(node, list):
        for item in node:
            flatten(item, out, heads)
        return
    for key, value in node.items():
        if heads is not None and key + "_tree" in node:
            heads.add(key)
        if isinstance(value, dict | list) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            if isinstance(value, list) and all(isinstance(v, dict) for v in value) or isinstance(value, dict):
                flatten(value, out, heads)
                continue
        values = value if isinstance(value, list) else [value]
        out.setdefault(key, []).extend(v for v in values if isinstance(v, str))


def layer_fields(obj: dict[str, Any], names: tuple[str, ...],
                 heads: set[str] | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    layers = obj["_source"]["layers"]
    for name in names:
        if name in layers:
            flatten(layers[name], out, heads)
    return out


def same(name: str, ours: list[str], theirs: list[str]) -> bool:
    """Equal text; for fields that are not columns (CM, MAD: rdmalab does not know the base
    Wireshark displays each in) equal values, whatever the notation."""
    if ours == theirs:
        return True
    if name in COLUMN_BY_NAME or len(ours) != len(theirs):
        return False
    return all(parse_ws_value(a) == parse_ws_value(b) for a, b in zip(ours, theirs, strict=True))


def run(argv: list[str], out: io.StringIO) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.func(args, out)
    return rc


def ours(path: Path) -> list[dict[str, Any]]:
    buf = io.StringIO()
    assert run(["decode", "-T", "json", str(path)], buf) == 0
    data: list[dict[str, Any]] = json.loads(buf.getvalue())
    return data


def tshark_json(path: Path) -> list[dict[str, Any]]:
    cmd = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), "-T", "json", "--no-duplicate-keys"]
    data: list[dict[str, Any]] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return data


def test_layout_is_tsharks() -> None:
    data = ours(CAPTURES / "rxe_send_bw_loss.pcap")
    assert isinstance(data, list) and len(data) == 154
    first = data[0]
    assert set(first) == {"_index", "_type", "_score", "_source"}
    assert first["_type"] == "doc" and first["_score"] is None and first["_index"].startswith("packets-")
    roce = next(o for o in data if "infiniband" in o["_source"]["layers"])
    layers = roce["_source"]["layers"]
    assert list(layers)[:5] == ["frame", "eth", "ip", "udp", "infiniband"]
    bth = layers["infiniband"]["infiniband.bth_tree"]
    assert all(isinstance(v, str) for v in bth.values())
    assert layers["infiniband"]["infiniband.bth"].count(":") == 11  # the 12 BTH bytes
    assert layers["frame"]["frame.time_epoch"].endswith("000") and layers["frame"]["frame.number"].isdigit()


def test_filter_and_count_apply_to_json() -> None:
    buf = io.StringIO()
    run(["decode", "-T", "json", "-c", "40", "-Y", "infiniband.aeth", str(CAPTURES / "rxe_send_bw_loss.pcap")], buf)
    data = json.loads(buf.getvalue())
    assert data and all("infiniband.aeth" in o["_source"]["layers"]["infiniband"] for o in data)
    assert all(int(o["_source"]["layers"]["frame"]["frame.number"]) <= 40 for o in data)
    buf = io.StringIO()
    run(["decode", "-T", "json", "-Y", "frame.len > 100000", str(CAPTURES / "rxe_send_bw_loss.pcap")], buf)
    assert json.loads(buf.getvalue()) == []


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_json_agrees_with_tshark(path: Path) -> None:
    mine, theirs = ours(path), tshark_json(path)
    frames = list(read(path))
    assert len(mine) == len(theirs) == len(frames)
    known = known_ws_names()
    diffs: list[str] = []
    compared = 0
    for cp, a, b in zip(frames, mine, theirs, strict=True):
        for key in ("frame.time_epoch", "frame.len", "frame.cap_len"):  # ERF: the ERF record's own, in both
            assert a["_source"]["layers"]["frame"][key] == b["_source"]["layers"]["frame"][key], key
        for group in (RDMA_LAYERS, CARRIER_LAYERS):
            heads: set[str] = set()
            got, want = layer_fields(a, group, heads), layer_fields(b, group)
            if group is CARRIER_LAYERS and not any(k in a["_source"]["layers"] for k in RDMA_LAYERS):
                continue
            for name in sorted((set(got) | (set(want) & known)) - heads):
                g, w = got.get(name, []), want.get(name, [])
                if name.startswith("rdmalab."):
                    continue
                # tshark repeats a field that is its subtree's only field (infiniband.immdt_tree)
                if len(w) == 2 * len(g) and w[::2] == w[1::2]:
                    w = w[::2]
                if same(name, g, w):
                    compared += 1
                    continue
                kind = "only_rdmalab" if not w else "only_wireshark" if not g else "value"
                if explain(cp, want, name, kind) is not None:
                    continue
                diffs.append(f"frame {cp.frame_number} {name}: rdmalab {g}, tshark {w}")
    assert compared > 0
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).resolve().parents[2] / "captures").glob("*.pcap")))
def test_the_fast_writer_writes_what_json_dumps_writes(name: str) -> None:
    """iter_json's own writer gives json.dumps(indent=2, ensure_ascii=False)'s bytes, indented by two."""
    import json

    from rdmalab.capture import read
    from rdmalab.capture.tsjson import _dump, _frame_text, packet_json

    path = Path(__file__).resolve().parents[2] / "captures" / name
    for cp in read(path):
        obj = packet_json(cp, first_ns=0, prev_ns=0, prev_displayed_ns=0)
        out: list[str] = []
        _dump(obj, "\n  ", out)
        want = json.dumps(obj, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        assert "".join(out) == want
        assert _frame_text(obj) == want  # the frame's outer keys from a template
    for odd in ({}, [], {"a": [], "b": {}, "c": None, "d": ["x", {"é\u2192\"\\": "\x01"}]}):
        out = []
        _dump(odd, "\n", out)
        assert "".join(out) == json.dumps(odd, indent=2, ensure_ascii=False)


def test_value_text_decided_once_a_name_writes_what_the_general_path_writes() -> None:
    """tsjson.value_text decides the text of an integer once per field name: for every value of every
    field of every capture (and a few made up) it is the general path's text."""
    from rdmalab.capture import frame_fields
    from rdmalab.capture.tsjson import _value_text_any, value_text

    seen = 0
    for path in sorted((Path(__file__).resolve().parents[2] / "captures").glob("*.pcap")):
        for cp in read(path):
            for raw in (False, True):
                for name, v in frame_fields(cp, raw=raw).items():
                    for x in v if isinstance(v, list) else [v]:
                        if type(x) is int:
                            for y in (x, 0, 1, 255, 2**32 - 1):
                                assert value_text(name, y) == _value_text_any(name, y), (name, y)
                                seen += 1
    assert seen > 10000


def test_layers_are_written_from_their_cached_text() -> None:
    """The protocol layers of a RoCE frame carry the JSON text written once for their headers (the
    test above holds that text to json.dumps'); a layer repeated in one frame (iWARP PDUs packed
    in one segment) sits one level deeper and is written from its fields."""
    import json

    from rdmalab.capture import read
    from rdmalab.capture.tsjson import _Rendered, iter_json, packet_json

    root = Path(__file__).resolve().parents[2] / "captures"
    cp = next(c for c in read(root / "rxe_write_bw_loss.pcap") if c.packet.encap == "rocev2")
    layers = packet_json(cp, first_ns=0, prev_ns=0, prev_displayed_ns=0)["_source"]["layers"]
    for name in ("frame", "eth", "ip", "udp", "infiniband"):
        assert type(layers[name]) is _Rendered, name
    repeated = 0
    for path in sorted(root.glob("*iwarp*.pcap")) + sorted(root.glob("siw_*.pcap")):
        packets = list(read(path))
        text = "".join(iter_json(packets))
        objs = json.loads(text)
        assert len(objs) == len(packets)
        for obj, c in zip(objs, packets, strict=True):
            want = packet_json(c, first_ns=0, prev_ns=0, prev_displayed_ns=0)["_source"]["layers"]
            got = obj["_source"]["layers"]
            repeated += sum(isinstance(v, list) for v in want.values())
            want.pop("frame")
            got.pop("frame")  # times differ: packet_json was given other reference times here
            assert got == json.loads(json.dumps(want))
    assert repeated > 0


def test_shared_subtrees_refuse_changes() -> None:
    """A header's subtree is shared by every frame with that header (the layer cache): changing it
    through one frame's object is refused rather than silently changing other frames' JSON."""
    from rdmalab.capture import read
    from rdmalab.capture.tsjson import packet_json

    cp = next(c for c in read(Path(__file__).resolve().parents[2] / "captures" / "rxe_write_bw_loss.pcap")
              if c.packet.encap == "rocev2")
    obj = packet_json(cp, first_ns=0, prev_ns=0, prev_displayed_ns=0)
    tree = obj["_source"]["layers"]["infiniband"]["infiniband.bth_tree"]
    with pytest.raises(TypeError, match="shared"):
        tree["infiniband.bth.psn"] = "0"
    mine = dict(tree)
    mine["infiniband.bth.psn"] = "0"  # a copy changes freely
    again = packet_json(cp, first_ns=0, prev_ns=0, prev_displayed_ns=0)
    assert again["_source"]["layers"]["infiniband"]["infiniband.bth_tree"] == tree != mine


@requires_tshark
@pytest.mark.parametrize("name", ["hw_ib_connectx_erf.pcap", "rxe_rping.pcap"])
def test_frame_protocols_of_infiniband_frames_as_tshark(name: str, capsys: Any) -> None:
    """IPoIB's EtherType step ("infiniband:ethertype:ip"), no "data" after a MAD (CM, SA) or an ICMPv6
    message tshark reads whole (neighbour discovery), "data" after an echo's bytes: each frame's
    frame.protocols as tshark's, on both paths (before stop 45: 19 of 43 frames of the ERF capture differed)."""
    from rdmalab.cli import main

    path = str(CAPTURES / name)
    want = subprocess.run(["tshark", "-n", "-r", path, "-T", "fields", "-e", "frame.protocols"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", path, "-T", "json", *args]) == 0
        got = [f["_source"]["layers"]["frame"]["frame.protocols"] for f in json.loads(capsys.readouterr().out)]
        assert got == want, args


#: frames whose frame.protocols rightly differ from tshark 4.0's: a capture begun mid-stream, whose MPA
#: negotiation tshark never saw (it shows the FPDUs rdmalab finds as TCP data), and opcodes tshark 4.0
#: has no payload for (XRC: 0xa0-0xbf; ATOMIC WRITE: 0x1d, 0xbd; it shows no data after their headers)
_PROTOCOLS_APART = {"siw_write_bw_midstream.pcap": "iwarp", "synthetic_all_opcodes_rocev1.pcap": "opcodes",
                    "synthetic_all_opcodes_rocev2.pcap": "opcodes", "synthetic_rocev2.pcap": "opcodes"}
_FILES = sorted(p.name for p in CAPTURES.glob("*.pcap"))


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", _FILES)
def test_frame_protocols_of_every_capture_as_tshark(name: str, capsys: Any) -> None:
    """``frame.protocols`` (in -T json, -T fields and a filter):
    TCP bytes of no protocol above it (perftest's and rping's own exchange) end in ``data``, as do an
    FPDU's bytes (a tagged FPDU's, or an untagged message's last: tshark holds the others to put the
    message together), not an MPA Request's private data; each FPDU of a segment names DDP/RDMAP again;
    each VLAN tag its protocol again.  Before: 30 of 70 frames of rxe_write_bw.pcap, 47 of 87 of
    siw_read_bw.pcap differed."""
    from rdmalab.cli import main

    path = str(CAPTURES / name)
    want = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", path, "-T", "fields",
                           "-e", "frame.protocols", "-e", "infiniband.bth.opcode"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    apart = _PROTOCOLS_APART.get(name)
    for args in ([], ["--no-columnar"]):
        assert main(["decode", "-r", path, "-T", "json", *args]) == 0
        got = [f["_source"]["layers"]["frame"]["frame.protocols"] for f in json.loads(capsys.readouterr().out)]
        assert len(got) == len(want)
        differ = [(i + 1, g, w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w.split("\t")[0]]
        if apart == "iwarp":  # FPDUs tshark shows as TCP data
            differ = [d for d in differ if not (d[2].startswith("eth:ethertype:ip:tcp:data") and "iwarp_mpa" in d[1])]
        elif apart == "opcodes":
            differ = [d for d in differ if not (d[1] == d[2].split("\t")[0] + ":data"
                                                and int(d[2].split("\t")[1]) in (0x1D, 0xBD, *range(0xA0, 0xC0)))]
        assert not differ, (args, differ[:5], len(differ))
        # -T fields -e frame.protocols and a filter on it say the same (the per-packet decoder's)
        assert main(["decode", "-r", path, "-T", "fields", "-e", "frame.protocols", *args]) == 0
        assert capsys.readouterr().out.splitlines() == got
        assert main(["decode", "-r", path, "-Y", 'frame.protocols contains ":data"', "-T", "fields", "-e",
                     "frame.number"]) == 0
        assert capsys.readouterr().out.split() == [str(i + 1) for i, g in enumerate(got) if ":data" in g]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", _FILES)
def test_data_fields_of_every_capture_as_tshark(name: str, capsys: Any) -> None:
    """``data.len``, ``data.data`` (an InfiniBand packet's pad included, as packet-infiniband.c hands it
    on) and ``tcp.payload`` in -T fields, as tshark prints them ("not a field" before).  Set apart, besides
    the captures of :data:`_PROTOCOLS_APART`: the last FPDU of a Send message of several, whose data tshark
    shows as the whole message it put together (rdmalab: that FPDU's)."""
    from rdmalab.cli import main

    path = str(CAPTURES / name)
    args = ["-T", "fields", "-e", "frame.number", "-e", "data.len", "-e", "data.data", "-e", "tcp.payload"]
    want = subprocess.run(["tshark", "-n", "--disable-protocol", "rpcordma", "-r", path, *args,
                           "-e", "infiniband.bth.opcode", "-e", "iwarp_ddp.last_flag"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert main(["decode", "-r", path, *args]) == 0
    got = capsys.readouterr().out.splitlines()
    assert len(got) == len(want)
    apart = _PROTOCOLS_APART.get(name)
    differ = []
    for g, w in zip(got, want, strict=True):
        cells = w.split("\t")
        if g == "\t".join(cells[:4]):
            continue
        if apart == "iwarp" or (apart == "opcodes" and cells[4] and int(cells[4]) in (0x1D, 0xBD, *range(0xA0, 0xC0))):
            continue
        if cells[4] and 0x40 <= int(cells[4]) <= 0x5F:  # RD: Wireshark 4.0 reads a 20-byte BTH (capture.defects)
            continue
        mine = g.split("\t")
        if cells[5] == "1" and mine[1] and cells[1] and int(cells[1]) > int(mine[1]):  # a message's last FPDU
            continue
        differ.append((g[:60], w[:60]))
    assert not differ, (len(differ), differ[:3])
