"""Display filters on a protocol's name (``-Y udp``, ``ip && !tcp``, ``infiniband``), answered from the
columns (rdmalab.capture.columnar_schema.FILTER_PROTOCOLS) rather than frame by frame: the frames each keeps,
in every output, are the per-packet path's (``--no-columnar``), an ICMP error's quote included (tshark's
``udp`` and ``infiniband`` match an error that quotes a RoCEv2 datagram), and the frames tshark keeps.

``ip`` is IPv4's: Wireshark's IPv6 dissector adds a hidden ``ip.version`` (``ip.version == 6`` matches an IPv6
packet), but tshark's ``ip`` does not; the per-packet filter took that hidden field for an IPv4 header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_icmp_quotes import _built
from test_vlan_tags import _tagged
from tshark_cli import decode, requires_tshark, shown_frames, tshark

from rdmalab.capture.pcapwriter import CaptureWriter
from rdmalab.capture.reader import records

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
EXPRESSIONS = ["udp", "tcp", "ip", "ipv6", "eth", "vlan", "infiniband", "udp && !infiniband", "tcp || ipv6", "!ip",
               "ip && !udp", "infiniband && frame.len > 100", "sll"]
NAMES = ["lo_icmp_unreachable.pcap", "synthetic_all_opcodes_rocev2.pcap", "synthetic_all_opcodes_rocev1.pcap",
         "rxe_write_bw_loss.pcap", "siw_crc_rping.pcap", "rxe_ud_pingpong.pcap", "hw_ib_connectx_erf.pcap",
         "synthetic_rocev2_cm_req.pcap"]


def _mixed(tmp_path: Path) -> Path:
    """Routers' quotes (TCP quoted too, test_icmp_quotes), and real RoCEv2, iWARP and IPv6 frames, every
    other one with an 802.1Q tag."""
    path = tmp_path / "mixed.pcap"
    with CaptureWriter(path) as w:
        for r in records(_built(tmp_path)):
            w.write(bytes(r.data), r.ns or 0)
        for k, name in enumerate(("lo_icmp_unreachable.pcap", "siw_crc_rping.pcap", "rxe_send_bw_loss.pcap")):
            for i, r in enumerate(records(CAPTURES / name)):
                data = bytes(r.data)
                w.write(_tagged(data, [(0x8100, 5 + k)]) if i % 2 else data, r.ns or 0)
    return path


def _paths(tmp_path: Path) -> list[Path]:
    return [CAPTURES / n for n in NAMES if (CAPTURES / n).exists()] + [_mixed(tmp_path)]


@pytest.mark.parametrize("mode", [[], ["-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "udp.srcport"],
                                  ["-T", "json"], ["-V"]], ids=["summaries", "fields", "json", "trees"])
def test_protocol_filters_are_answered_from_the_columns_as_frame_by_frame(
        mode: list[str], tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    from rdmalab.cli import decode as cli

    columnar: list[str] = []
    for name in ("_fields_columnar", "_json_shown", "_trees_shown"):
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, lambda *a, _real=real, _name=name: columnar.append(_name) or _real(*a))
    real_answer = cli._columns_answer
    monkeypatch.setattr(cli, "_columns_answer",
                        lambda flt: bool(real_answer(flt)) and (columnar.append(flt.expr) or True))
    kept = 0
    for path in _paths(tmp_path):
        for expr in EXPRESSIONS:
            columnar.clear()
            got = decode(capsys, "-r", str(path), "-Y", expr, *mode)
            assert got == decode(capsys, "--no-columnar", "-r", str(path), "-Y", expr, *mode), (path.name, expr)
            kept += len(shown_frames(got, mode))
            if path.suffix == ".pcap" and "hw_ib" not in path.name:  # (ERF: the per-packet path either way)
                assert columnar, (path.name, expr, "not answered from the columns")
    assert kept > 1000


@requires_tshark
@pytest.mark.tshark
def test_protocol_filters_keep_the_frames_tshark_keeps(tmp_path: Path, capsys: Any) -> None:
    for path in _paths(tmp_path):
        for expr in EXPRESSIONS:
            ours = shown_frames(decode(capsys, "-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number"),
                                ["-T", "fields"])
            theirs = tshark("-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number").split()
            assert ours == theirs, (path.name, expr)


def test_ip_is_ipv4_not_the_hidden_ip_version_of_ipv6(capsys: Any) -> None:
    """An IPv6 packet has ip.version == 6 (hidden, as Wireshark's) but is not ``ip``; an ICMPv6 error's quote
    neither; IPv4 is."""
    path = str(CAPTURES / "lo_icmp_unreachable.pcap")
    for extra in ([], ["--no-columnar"]):
        six = decode(capsys, *extra, "-r", path, "-Y", "ipv6", "-T", "fields", "-e", "frame.number").split()
        four = decode(capsys, *extra, "-r", path, "-Y", "ip", "-T", "fields", "-e", "frame.number").split()
        hidden = decode(capsys, *extra, "-r", path, "-Y", "ip.version == 6", "-T", "fields", "-e", "frame.number").split()
        assert six and four and not set(six) & set(four), (extra, six, four)
        assert hidden == six
