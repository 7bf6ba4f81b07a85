"""Wireshark's fields that stand for two (``ip.addr``, ``ipv6.addr``, ``eth.addr``, ``tcp.port``,
``udp.port``), Wireshark 4.0's comparison operators over several values (``!=`` all differ, ``===``
all equal, ``!==``/``~=`` any differs) and the IPv4 flag bits (``ip.flags.df`` ...): in display
filters and ``-T fields``, on the columns' path and the per-packet path, against tshark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark
from tshark_cli import tshark as _tshark

from rdmalab.capture.filter import EITHER_FIELDS, FilterError, compile_filter, known_fields

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: RoCEv2 with rdma_cm, iWARP over TCP with ARP and ICMPv6 around it, RoCEv2 perftest traffic, the ICMP
#: errors that quote RoCEv2 datagrams (each of those frames has two IPv4 headers: four addresses)
FILES = ["rxe_rping.pcap", "siw_rping.pcap", "rxe_write_bw.pcap", "siw_crc_send_bw.pcap", "lo_icmp_unreachable.pcap"]

FILTERS = [
    "ip.addr == 10.0.0.1", "ip.addr != 10.0.0.1", "not ip.addr == 10.0.0.1", "ip.addr == 10.0.0.0/24",
    "ip.addr", "ip.addr > 10.0.0.1", "ip.addr in {10.0.0.9, 10.0.0.2}", "ip.addr === 10.0.0.2",
    "ip.addr !== 10.0.0.2", "ip.addr ~= 10.0.0.2", "ip.addr all_eq 10.0.0.2", "ip.addr any_ne 10.0.0.2",
    "eth.addr == 52:54:00:00:01:01", "eth.addr != 52:54:00:00:01:01", "eth.addr",
    "tcp.port == 18515", "tcp.port != 18515", "tcp.port in {18515, 4791}", "tcp.port >= 40000",
    "udp.port == 4791", "udp.port != 4791", "ipv6.addr == ff02::/16", "ipv6.addr != ff02::2",
    "tcp.port == 18515 && ip.addr == 10.0.0.1", "udp.port == 4791 || tcp.port == 18515 || arp",
    "ip.src === 10.0.0.2", "ip.src !== 10.0.0.2",
    "ip.flags.df == 1", "ip.flags.df == 0", "ip.flags.mf", "!ip.flags.rb", "ip.flags.rb == 0 && udp",
]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
def test_filters_pick_the_frames_tshark_picks(name: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    for expr in FILTERS:
        want = _tshark("-r", path, "-Y", expr, "-T", "fields", "-e", "frame.number").split()
        for path_opt in ([], ["--no-columnar"]):
            got = _ours(capsys, *path_opt, "-r", path, "-Y", expr, "-T", "fields", "-e", "frame.number").split()
            assert got == want, (name, expr, path_opt, len(got), len(want))
    # and the summary lines' path (its own columns, then the per-packet decoder for TCP)
    for expr in ("ip.addr != 10.0.0.1", "tcp.port == 18515 || udp.port == 4791", "ip.flags.df == 1"):
        want = _tshark("-r", path, "-Y", expr, "-T", "fields", "-e", "frame.number").split()
        lines = _ours(capsys, "-r", path, "-Y", expr).splitlines()
        assert [line.split()[0] for line in lines] == want, (name, expr)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("opts", [[], ["-E", "quote=d"], ["-E", "occurrence=f"], ["-E", "occurrence=l"],
                                  ["-E", "aggregator=/s", "-E", "separator=,"]])
def test_fields_print_both_values_as_tshark_does(name: str, opts: list[str], capsys: Any) -> None:
    """``-e ip.addr`` is the source then the destination, ``-e eth.addr`` the destination then the
    source (the order each dissector adds them), joined by the aggregator."""
    path = str(CAPTURES / name)
    fields = ["frame.number", *EITHER_FIELDS, "ip.flags", "ip.flags.rb", "ip.flags.df", "ip.flags.mf"]
    args = [a for f in fields for a in ("-e", f)]
    want = _tshark("-r", path, "-T", "fields", *args, *opts)
    assert want.strip()
    for path_opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *path_opt, "-r", path, "-T", "fields", *args, *opts) == want, (name, path_opt)
    flt = ["-Y", "ip.addr == 10.0.0.2 and not arp"]
    want = _tshark("-r", path, "-T", "fields", *args, *opts, *flt)
    for path_opt in ([], ["--no-columnar"]):
        assert _ours(capsys, *path_opt, "-r", path, "-T", "fields", *args, *opts, *flt) == want, (name, path_opt)


def test_either_field_is_a_test_of_its_two() -> None:
    f = {"ip.src": "10.0.0.1", "ip.dst": "10.0.0.2"}
    assert compile_filter("ip.addr == 10.0.0.2")(f)
    assert compile_filter("ip.addr == 10.0.0.1")(f)
    assert not compile_filter("ip.addr == 10.0.0.3")(f)
    assert not compile_filter("ip.addr != 10.0.0.2")(f)  # all differ: one does not
    assert compile_filter("ip.addr != 10.0.0.3")(f)
    assert compile_filter("ip.addr ~= 10.0.0.2")(f)  # any differs
    assert not compile_filter("ip.addr === 10.0.0.2")(f)
    assert compile_filter("ip.addr === 10.0.0.0/8")(f)
    assert not compile_filter("ip.addr != 10.0.0.1")({"eth.src": "52:54:00:00:01:01"})  # no IP: no comparison holds
    assert compile_filter("ip.addr")(f) and not compile_filter("ip.addr")({"eth.type": 0x806})
    flt = compile_filter("tcp.port == 4791")
    assert flt.fields == {"tcp.srcport", "tcp.dstport"}  # (the columns it reads)
    assert all(name in known_fields() for name in EITHER_FIELDS)


@pytest.mark.parametrize("expr,want", [
    ("iwarp_ddp.qn === 0 || iwarp_ddp.qn === 1", False), ("iwarp_ddp.qn in {0..1}", True),
    ("iwarp_ddp.qn == 1", True), ("iwarp_ddp.qn != 1", False), ("iwarp_ddp.qn != 2", True),
    ("iwarp_ddp.qn === 1", False), ("iwarp_ddp.qn === 0", False), ("iwarp_ddp.qn ~= 1", True),
    ("iwarp_ddp.qn !== 0", True), ("iwarp_ddp.qn any_ne 0", True), ("iwarp_ddp.qn all_ne 0", False),
    ("iwarp_ddp.qn > 0", True), ("iwarp_ddp.qn > 1", False), ("infiniband.bth.psn != 1", False),
])
def test_operators_over_several_values_as_wireshark_4(expr: str, want: bool) -> None:
    """A frame of two FPDUs (QN 0 and 1): ``!=`` holds only when every value differs (it held when
    any did), ``===`` when all are equal, ``!==``/``~=`` when any differs; an absent field matches
    no comparison, ``!=`` included."""
    assert compile_filter(expr)({"iwarp_ddp.qn": [0, 1]}) is want


@pytest.mark.parametrize("expr,needle", [
    ("ip.addr == 52:54:00:00:01:01", "ip.addr is an IPv4 address"),
    ("tcp.port == 10.0.0.1", "tcp.port is a number"),
    ("eth.addr == 10.0.0.1", "eth.addr is a MAC address"),
    ("ip.addrs == 10.0.0.1", "did you mean ip.addr"),
    ("infiniband.bth.psn != 1..5", "a range (a..b) is a member of a set"),  # it matched 1 to 5
    ("infiniband.bth.psn < 1..5", "a range (a..b) is a member of a set"),
])
def test_values_that_cannot_be_compared_are_refused(expr: str, needle: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert needle in str(err.value)
