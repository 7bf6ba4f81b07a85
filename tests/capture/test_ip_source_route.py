"""An IPv4 datagram whose options hold a loose or strict source route (RFC 791 3.1, options 131 and 137) with
addresses left: its header's destination is only the next hop, which tshark shows as ``ip.cur_rt``, and its
``ip.dst`` (and ``ip.addr``, the summary line's destination, the conversation) is the route's last address
(packet-ip.c ``get_dst_offset``); a route used up (its pointer past its length), a bogus pointer or an option
list that goes wrong before it leaves the header's destination.  rdmalab showed the header's destination
everywhere.  The columns leave such frames to the per-packet decoder (``columnar.source_routes``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture.pcapwriter import write_capture

_ROUTE = bytes([10, 1, 1, 1, 10, 2, 2, 2])


def _route(kind: int, pointer: int, addresses: bytes = _ROUTE) -> bytes:
    return bytes([kind, 3 + len(addresses), pointer]) + addresses


def _capture(path: Path) -> Path:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether

    def ip(options: bytes, **kw: Any) -> IP:
        return IP(src="10.0.0.1", dst="10.0.0.2", options=options + bytes(-len(options) % 4), **kw)

    options = [
        _route(131, 4),  # (loose, at its first address)
        _route(137, 4),  # (strict)
        _route(131, 8),  # (at its last address)
        _route(131, 12),  # (used up: the header's destination)
        _route(131, 5),  # (a pointer that is no address's)
        _route(131, 3),
        b"\x01\x01" + _route(137, 4),  # (after two no-operations)
        bytes([7, 11, 4]) + _ROUTE,  # (record route)
        bytes([68, 4, 5, 0x83]) + _route(131, 4),  # (a timestamp option before it, 0x83 among its octets)
        b"\x00\x00" + _route(131, 4),  # (after the end of the list: none)
        bytes([130, 1]) + _route(131, 4),  # (an option length under 2 before it: none)
        _route(131, 4, bytes([10, 3, 3, 3])),  # (one address)
        _route(137, 4, bytes([10, 1, 1, 1, 10, 2, 2, 2, 10, 4, 4, 4])),  # (three)
    ]
    frames: list[bytes] = []
    for i, opts in enumerate(options):
        frames.append(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip(opts)
                            / UDP(sport=4000 + i % 3, dport=4001) / b"abc"))
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames += [  # a TCP connection to the route's end, answered without options, and a fragment
        bytes(eth / ip(_route(131, 4)) / TCP(sport=5000, dport=5001, flags="S", seq=10)),
        bytes(eth / IP(src="10.2.2.2", dst="10.0.0.1") / TCP(sport=5001, dport=5000, flags="SA", seq=70, ack=11)),
        bytes(eth / ip(_route(131, 4)) / TCP(sport=5000, dport=5001, flags="A", seq=11, ack=71) / b"hello"),
        bytes(eth / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=5000, dport=5001, flags="A", seq=11, ack=71)),
        bytes(eth / ip(_route(137, 4), flags="MF") / UDP(sport=6000, dport=6001) / (b"f" * 16)),
    ]
    write_capture(path, [(1_700_000_000_000_000_000 + i * 1000, f) for i, f in enumerate(frames)])
    return path


def _inner(tree: Any, name: str) -> Any:
    """The first value named ``name`` in a JSON layer's subtrees."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            got = v if k == name else _inner(v, name)
            if got is not None:
                return got
    return None


_FIELDS = ("frame.number", "ip.src", "ip.dst", "ip.addr", "ip.cur_rt", "ip.hdr_len", "udp.stream", "tcp.stream",
           "tcp.seq", "tcp.ack", "tcp.nxtseq")


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path_args", [[], ["--no-columnar"]])
def test_the_destination_as_tshark(path_args: list[str], tmp_path: Path, capsys: Any) -> None:
    path = str(_capture(tmp_path / "routes.pcap"))
    fields = ["-T", "fields", *(a for f in _FIELDS for a in ("-e", f))]
    assert decode(capsys, *path_args, "-r", path, *fields) == tshark("-r", path, *fields)
    # (frame.protocols of the TCP frames: rdmalab's ends at udp where tshark's goes on to data)
    protocols = ["-Y", "tcp", "-T", "fields", "-e", "frame.protocols"]
    assert decode(capsys, *path_args, "-r", path, *protocols) == tshark("-r", path, *protocols)
    for flt in ("ip.dst == 10.2.2.2", "ip.addr == 10.0.0.2", "ip.cur_rt == 10.0.0.2", "ip.dst == 10.0.0.2",
                "ip.addr == 10.4.4.4", "tcp.stream == 0", "ip.cur_rt"):
        want = tshark("-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
        assert decode(capsys, *path_args, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt


@requires_tshark
@pytest.mark.tshark
def test_lines_and_json(tmp_path: Path, capsys: Any) -> None:
    import json

    path = str(_capture(tmp_path / "routes.pcap"))
    want = [line.split()[2:5] for line in tshark("-r", path).splitlines()]  # (source, arrow, destination)
    lines = decode(capsys, "-r", path)
    assert lines == decode(capsys, "--no-columnar", "-r", path)
    assert [line.split()[2:5] for line in lines.splitlines()] == want
    tree = [p["_source"]["layers"]["ip"] for p in json.loads(tshark("-r", path, "-T", "json"))]
    for path_args in ([], ["--no-columnar"]):
        got = [p["_source"]["layers"]["ip"] for p in json.loads(decode(capsys, *path_args, "-r", path, "-T", "json"))]
        for g, t in zip(got, tree, strict=True):
            dst = t.get("ip.dst") or _inner(t, "ip.dst")  # (tshark: in the option's subtree)
            assert (g.get("ip.dst"), g.get("ip.cur_rt")) == (dst, t.get("ip.cur_rt"))
    assert decode(capsys, "-V", "-r", path) == decode(capsys, "--no-columnar", "-V", "-r", path)
