"""``frame contains`` and ``matches``: a display filter on the frame's bytes (a quoted string's octets,
hex pairs), on a protocol's (``tcp contains "MPA"``: from its header to the end of what carries it) and
regular expressions (any case, as Wireshark's), against tshark on every output.  Before,
``frame contains "MPA ID"`` matched nothing where tshark finds the MPA Request and Reply (a silent empty
result), ``matches`` was refused, and ``ip.src contains 10`` answered something else than tshark."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, shown_frames

from rdmalab.capture.filter import FRAME_BYTES, FilterError, compile_filter

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: (not "frame contains ff": tshark 4.0 reads ff as its FOUNDATION Fieldbus protocol, absent, not as a byte)
FILTERS = ['frame contains "MPA ID"', 'frame matches "MPA\\\\sID"', 'frame matches "\\\\x4dPA"', 'frame matches "M.A"',
           "frame contains 4d:50:41", "frame contains 4d-50-41", "frame contains 4d5041",
           "frame contains 0a", 'frame contains "\\xff"',
           'frame contains "MPA" && tcp.port == 7174', 'frame matches "mpa id (req|rep)"', 'frame matches "^\\x52\\x54"',
           "frame contains ff:ff:ff:ff", "frame contains 00:00:01", 'not frame contains "MPA"',
           'frame matches "\\x00{8}" and infiniband', 'eth.src contains 54:00', "eth.dst contains 0101",
           'eth.addr contains 00:01:02', 'eth.src matches "52"', 'eth.src matches "\\x52\\x54"',
           'eth.dst matches "\\x01$"',
           # the bytes of a protocol: from its header to the end of what carries it (its payload too)
           "eth contains ff:ff:0a:00:00:02", "ip contains ff:ff:0a:00:00:02", "udp contains ff:ff:0a:00:00:02",
           "infiniband contains ff:ff:0a:00:00:02", 'tcp contains "MPA ID"', 'ip contains "MPA"', "udp contains 12:b7",
           'tcp matches "^\\x00"', 'infiniband matches "\\xff\\xff"', "icmpv6 contains 52:54", "arp contains 0a:00",
           "infiniband contains 00:00:00:00"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["siw_rping.pcap", "rxe_rping.pcap", "hw_ib_connectx_erf.pcap",
                                  "synthetic_iwarp_mpa_markers.pcap"])
def test_frame_bytes_as_tshark_on_every_output(name: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    for flt in FILTERS:
        want = subprocess.run(["tshark", "-n", "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()
        for mode in ([], ["-V"], ["-T", "json"], ["-T", "fields", "-e", "frame.number"]):
            assert shown_frames(decode(capsys, "-r", path, "-Y", flt, *mode), mode) == want, (flt, mode)
        assert decode(capsys, "-r", path, "-Y", flt, "-x").count("\n\n") == len(want), flt  # (a dump a frame)


def test_text_fields_and_case() -> None:
    f = {"rdmalab.opcode": "RC SEND Only", FRAME_BYTES: b"\x00MPA ID Req Frame"}
    assert compile_filter('rdmalab.opcode matches "send.*only"')(f)  # any case, as Wireshark
    assert not compile_filter('rdmalab.opcode matches "^only"')(f)
    assert compile_filter('rdmalab.opcode contains "SEND"')(f) and not compile_filter('rdmalab.opcode contains "send"')(f)
    assert compile_filter('frame matches "mpa id req"')(f) and compile_filter("frame contains 00:4d")(f)
    flt = compile_filter('frame contains "MPA"')
    assert flt.needs_frame and not compile_filter('rdmalab.opcode contains "SEND"').needs_frame
    with pytest.raises(KeyError, match="FRAME_BYTES"):  # a caller that forgot the bytes is told, not answered
        flt({"rdmalab.opcode": "x"})


@pytest.mark.parametrize("expr,needle", [
    ("ip.src contains 10", "'contains' on ip.src, an IPv4 address"),
    ("infiniband.bth.psn contains 1", "'contains' on infiniband.bth.psn, a number"),
    ('iwarp_ddp contains "MPA"', "'contains' on iwarp_ddp, a label without bytes in Wireshark"),
    ('iwarp_rdma matches "x"', "'matches' on iwarp_rdma, a label without bytes in Wireshark"),
    ('infiniband.bth matches "x"', "'matches' on the bytes of infiniband.bth"),
    ("frame contains 4d:5", "'4d:5' is not bytes"),
    ("frame matches MPA", "'matches' takes a quoted regular expression"),
    ('frame matches "(unclosed"', "is not a regular expression"),
    ('frame matches "MPA\\sID"', "\\s is not a character escape Wireshark reads"),  # (tshark: not valid)
    ('frame contains "a\\qb"', "\\q is not a character escape Wireshark reads"),
])
def test_what_cannot_be_answered_as_tshark_is_refused(expr: str, needle: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert needle in str(err.value)


@requires_tshark
@pytest.mark.tshark
def test_a_protocols_bytes_end_where_what_carries_it_ends(tmp_path: Path, capsys: Any) -> None:
    """Behind an IP datagram an Ethernet trailer (here 4 bytes, as a frame check sequence would be) is the
    frame's and Ethernet's bytes, not IP's, UDP's or InfiniBand's: as tshark."""
    from rdmalab.capture import records
    from rdmalab.capture.pcapwriter import CaptureWriter

    path = tmp_path / "trailer.pcap"
    with CaptureWriter(path) as w:
        for r in records(CAPTURES / "rxe_rping.pcap"):
            w.write(bytes(r.data) + b"\xde\xad\xbe\xef", r.ns or 0)
    for proto in ("frame", "eth", "ip", "udp", "infiniband", "tcp"):
        for flt in (f"{proto} contains de:ad:be:ef", f'{proto} matches "\\\\xde\\\\xad\\\\xbe\\\\xef$"'):
            want = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                                  capture_output=True, text=True, check=True).stdout.split()
            assert shown_frames(decode(capsys, "-r", str(path), "-Y", flt), []) == want, flt
