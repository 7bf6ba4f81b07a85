"""Display filters: Wireshark's grammar, known fields only, the same answer per packet and per column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rdmalab.capture import frame_fields, read
from rdmalab.capture.columnar import read_columns
from rdmalab.capture.filter import FilterError, compile_filter, known_fields

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def test_terms_and_precedence() -> None:
    f = compile_filter("infiniband.bth.psn >= 7 && infiniband.reth || rdmalab.cnp")
    assert f({"infiniband.bth.psn": 7, "infiniband.reth.va": 1, "infiniband.reth.dmalen": 4})
    assert not f({"infiniband.bth.psn": 6, "infiniband.reth.va": 1, "infiniband.reth.dmalen": 4})
    # an AtomicETH's address is named infiniband.reth.va (as Wireshark does): that is not a RETH
    assert not f({"infiniband.bth.psn": 7, "infiniband.reth.va": 1, "infiniband.atomiceth.swapdt": 1})
    assert f({"rdmalab.cnp": 1})
    assert compile_filter("!infiniband")({"eth.type": 1})
    assert not compile_filter("not infiniband")({"infiniband.bth.psn": 1})


@pytest.mark.parametrize("expr,fields,want", [
    ("infiniband.bth.opcode == 0x11", {"infiniband.bth.opcode": 17}, True),
    ("infiniband.bth.opcode eq 17", {"infiniband.bth.opcode": 17}, True),
    ("infiniband.bth.opcode ne 17", {"infiniband.bth.opcode": 17}, False),
    ("infiniband.bth.psn lt 5 or infiniband.bth.psn gt 9", {"infiniband.bth.psn": 10}, True),
    ("infiniband.bth.psn le 5", {"infiniband.bth.psn": 5}, True),
    ("infiniband.bth.opcode in {16, 17, 18}", {"infiniband.bth.opcode": 17}, True),
    ("infiniband.bth.opcode in {16, 18}", {"infiniband.bth.opcode": 17}, False),
    ("infiniband.bth.psn in {10..20}", {"infiniband.bth.psn": 15}, True),
    ("ip.src == 10.0.0.0/24", {"ip.src": "10.0.0.2"}, True),
    ("ip.src == 10.0.1.0/24", {"ip.src": "10.0.0.2"}, False),
    ("ip.src != 10.0.0.2", {"ip.src": "10.0.0.2"}, False),
    ("ipv6.src == fe80::/10", {"ipv6.src": "fe80::1"}, True),
    ("eth.src == 52:54:00:00:01:02", {"eth.src": "52:54:00:00:01:02"}, True),
    ('rdmalab.icrc.status == "bad"', {"rdmalab.icrc.status": "bad"}, True),
    ('rdmalab.opcode contains "READ"', {"rdmalab.opcode": "RC RDMA READ Request"}, True),
    ('rdmalab.opcode contains "WRITE"', {"rdmalab.opcode": "RC RDMA READ Request"}, False),
    ("(infiniband.aeth && !(infiniband.aeth.syndrome < 0x60)) || udp.dstport == 1",
     {"infiniband.aeth.syndrome": 0x60, "infiniband.aeth.msn": 1}, True),
    ("iwarp_ddp.qn == 1", {"iwarp_ddp.qn": [0, 1]}, True),  # several PDUs: any value matches
])
def test_expressions(expr: str, fields: dict[str, object], want: bool) -> None:
    assert compile_filter(expr)(fields) is want


@pytest.mark.parametrize("expr,needle", [
    ("infiniband.bth.psnx == 1", "'infiniband.bth.psnx' is not a field"),
    ("frobnicate", "'frobnicate' is not a field"),
    ("ip.src ==", "ends too early"),
    ("(ip.src", "not closed"),
    ("ip.src 10.0.0.1", "expected an operator"),
    ("ip.src matches \"x\"", "'matches' on ip.src, an IPv4 address"),
    ("infiniband.bth.opcode in {}", "empty"),
    ("", "is empty"),
])
def test_errors_name_the_problem(expr: str, needle: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert needle in str(err.value)


# a set's members are separated by commas (Wireshark 4.0 no longer takes spaces alone): the bad sets are
# in MISMATCHED below (each an error at its place, and refused by tshark too); these both take
GOOD_SETS = ["udp.port in {4791,1}", "udp.port in {4791 , 1}", "udp.port in {4791, 1..5}",
             "infiniband.bth.psn in {1..0x10, 20}"]


@pytest.mark.skipif(__import__("shutil").which("tshark") is None, reason="tshark (Wireshark) is not installed")
@pytest.mark.parametrize("expr", GOOD_SETS)
def test_sets_with_commas_are_taken_by_both(expr: str) -> None:
    import subprocess

    compile_filter(expr)
    got = subprocess.run(["tshark", "-n", "-r", str(CAPTURES / "rxe_send_bw.pcap"), "-c", "1", "-Y", expr],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


def test_known_fields_come_from_the_declarations() -> None:
    names = known_fields()
    for n in ("infiniband.bth.psn", "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "iwarp_ddp.stag",
              "iwarp_mpa.crc_check", "ip.dsfield.ecn", "udp.srcport", "tcp.flags", "rdmalab.icrc.status",
              "frame.time_epoch", "infiniband", "iwarp_rdma", "ip"):
        assert n in names, n
    assert "infiniband.bth.nonsense" not in names


@pytest.mark.parametrize("name", ["rxe_send_bw_loss.pcap", "rxe_atomic_fadd.pcap", "synthetic_rocev2.pcap",
                                  "rxe_rping.pcap"])
@pytest.mark.parametrize("expr", [
    "infiniband.aeth.syndrome >= 0x60",
    "infiniband.bth.opcode in {0, 1, 2} and infiniband.bth.a",
    "ip.src == 10.0.0.0/31 && !infiniband.reth",
    "udp && not infiniband.bth.psn in {100..20000000}",
    "infiniband.reth.va > 0 or infiniband.deth",
    'rdmalab.icrc.status == "good"',
    "tcp.flags == 0x002",
])
def test_columns_and_packets_agree(name: str, expr: str) -> None:
    path = CAPTURES / name
    flt = compile_filter(expr)
    per_packet = [cp.frame_number for cp in read(path) if flt(frame_fields(cp))]
    cols = read_columns(path)
    mask = flt.mask(cols, cols.present, cols.n)
    assert cols["frame.number"][mask].tolist() == per_packet
    assert isinstance(mask, np.ndarray)


@pytest.mark.parametrize("expr", ["ip.src == 10.0.0.0/33", "ipv6.src == fe80::/129", "ip.dst in {10.0.0.0/8, 10.1.0.0/40}"])
def test_a_network_with_an_impossible_prefix_is_an_error_not_an_empty_result(expr: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert "is not a network" in str(err.value)


def test_a_valid_network_still_matches() -> None:
    assert compile_filter("ip.src == 10.0.0.0/8")({"ip.src": "10.0.0.2"})
    assert not compile_filter("ip.src == 10.0.0.0/24")({"ip.src": "10.0.1.2"})


# a value that cannot be one of the field's: an error naming both, as tshark's ("... is not a valid
# hostname or IPv4 address", "... cannot be converted from a string"), never a filter that quietly
# matches nothing (or, as it was, something different on the columnar and per-packet paths)
MISMATCHED = [
    ('infiniband.rdeth.eecnxt < "abc"', "is a number: 'abc' is not a number", 27),
    ("ip.src > 4791", "ip.src is an IPv4 address: 4791 is not an IPv4 address or network", 10),
    ("ip.src != -1", "-1 is not an IPv4 address", 11),
    ("ip.src == fe80::1", "the IPv6 address fe80::1 is not an IPv4 address", 11),
    ("infiniband.bth.psn == 1.5", "infiniband.bth.psn is a number: 1.5 is not a whole number", 23),
    ("infiniband.bth.psn == 10.0.0.1", "the IPv4 address 10.0.0.1 is not a number", 23),
    ("eth.src == 10.0.0.1", "eth.src is a MAC address: the IPv4 address 10.0.0.1 is not a MAC address", 12),
    ("ipv6.src == 10.0.0.0/8", "the IPv4 address 10.0.0.0/8 is not an IPv6 address", 13),
    ("infiniband.bth.opcode in {4, 5, 1.5}", "1.5 is not a whole number", 33),
    ("infiniband.bth.psn in {1..abc}", "'abc' is not a number", 24),
    ("tcp.flags.syn == yes", "'yes' is not a number", 18),
    ("udp.port in {4791 1}", "separated by commas", 19),
    ("udp.port in {4791,,1}", "expected a member of the set, found ','", 19),
    ("udp.port in {4791,}", "expected a member of the set, found '}'", 19),
    ("udp.port in {,4791}", "expected a member of the set, found ','", 14),
    ("udp.port in {4791, 1", "'}' is missing", 21),
]


@pytest.mark.parametrize(("expr", "why", "at"), MISMATCHED)
def test_a_value_of_the_wrong_kind_is_an_error(expr: str, why: str, at: int) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert why in str(err.value) and f"(at character {at})" in str(err.value)


@pytest.mark.skipif(__import__("shutil").which("tshark") is None, reason="tshark (Wireshark) is not installed")
@pytest.mark.parametrize(("expr", "why", "at"), MISMATCHED)
def test_tshark_refuses_them_too(expr: str, why: str, at: int) -> None:
    import subprocess

    got = subprocess.run(["tshark", "-n", "-r", str(CAPTURES / "rxe_send_bw.pcap"), "-Y", expr],
                         capture_output=True, text=True)
    assert got.returncode != 0 and not got.stdout, (expr, got.stderr)


@pytest.mark.parametrize("expr", [
    "ip.src == 10.0.0.1", "ip.dst == 10.0.0.0/24", "ip.src in {10.0.0.1, 10.0.0.2}", "eth.src == 52:54:00:00:00:01",
    "ipv6.src == fe80::/10", "infiniband.grh.sgid == ::ffff:10.0.0.1", "infiniband.bth.psn in {1..0x10, 20}",
    "tcp.flags.syn == true", "frame.time_epoch > 1.5", "frame.len >= 0x40", 'rdmalab.encap == "rocev2"',
    'rdmalab.icrc.status == "bad"', "infiniband", "ip.src",
])
def test_values_of_the_right_kind_compile(expr: str) -> None:
    compile_filter(expr)


@pytest.mark.parametrize("name", ["siw_read_bw.pcap", "siw_crc_read_bw.pcap", "siw_send_bw.pcap"])
@pytest.mark.parametrize("expr", ["iwarp_ddp_rdmap", "!iwarp_ddp_rdmap && tcp", "iwarp_ddp_rdmap || iwarp_mpa"])
def test_wiresharks_name_of_the_ddp_and_rdmap_protocol(name: str, expr: str) -> None:
    """``iwarp_ddp_rdmap`` (the protocol of Wireshark's DDP/RDMAP dissector) is present where
    ``iwarp_ddp`` is, on both paths, and picks the frames tshark picks ("not a field" before)."""
    import shutil
    import subprocess

    path = CAPTURES / name
    same = compile_filter(expr.replace("iwarp_ddp_rdmap", "iwarp_ddp"))
    flt = compile_filter(expr)
    packets = [cp.frame_number for cp in read(path) if flt(frame_fields(cp))]
    assert packets == [cp.frame_number for cp in read(path) if same(frame_fields(cp))] and packets
    cols = read_columns(path)
    assert np.flatnonzero(flt.mask(cols, cols.present, cols.n)).tolist() == [n - 1 for n in packets]
    if shutil.which("tshark"):
        got = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert [int(x) for x in got] == packets
