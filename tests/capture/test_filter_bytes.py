"""``frame contains`` and ``matches``: a display filter on the frame's bytes (a quoted string's octets,
hex pairs) and regular expressions (any case, as Wireshark's), against tshark on every output.  Before,
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
FILTERS = ['frame contains "MPA ID"', "frame contains 4d:50:41", "frame contains 4d-50-41", "frame contains 4d5041",
           "frame contains 0a", 'frame contains "\\xff"',
           'frame contains "MPA" && tcp.port == 7174', 'frame matches "mpa id (req|rep)"', 'frame matches "^\\x52\\x54"',
           "frame contains ff:ff:ff:ff", "frame contains 00:00:01", 'not frame contains "MPA"',
           'frame matches "\\x00{8}" and infiniband', 'eth.src contains 54:00', "eth.dst contains 0101",
           'eth.addr contains 00:01:02', 'eth.src matches "52"', 'eth.src matches "\\x52\\x54"',
           'eth.dst matches "\\x01$"']


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
    ('tcp contains "MPA"', "'contains' on the bytes of tcp: rdmalab reads only the frame's (frame contains ...)"),
    ('udp matches "x"', "'matches' on the bytes of udp"),
    ("frame contains 4d:5", "'4d:5' is not bytes"),
    ("frame matches MPA", "'matches' takes a quoted regular expression"),
    ('frame matches "(unclosed"', "is not a regular expression"),
])
def test_what_cannot_be_answered_as_tshark_is_refused(expr: str, needle: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert needle in str(err.value)
