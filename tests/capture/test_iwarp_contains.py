"""``contains`` and ``matches`` on iWARP's protocols, as tshark reads them: ``iwarp_mpa`` is the MPA
frame as sent (length, markers, pad and CRC included; a Request or Reply with its private data),
``iwarp_ddp_rdmap`` the ULPDU (DDP and RDMAP headers and payload, without markers, pad or CRC), each
once for every MPA frame a TCP segment completes.  Before, both were an error ("rdmalab reads the
frame's and those of eth, ...").  The byte strings searched for are cut from the captures' own PDUs at
the places where the two protocols differ (their first bytes, the ULPDU's end against the CRC, a
marker), and tshark decides which frames match."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark

from rdmalab.capture import read
from rdmalab.capture.filter import FilterError, compile_filter
from rdmalab.wire.mpa import MPA

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
#: (not siw_write_bw_midstream.pcap: Wireshark decodes no iWARP in a stream whose MPA Request it did not see)
NAMES = ["siw_crc_read_bw.pcap", "siw_write_bw.pcap", "siw_send_bw.pcap", "synthetic_iwarp_mpa_markers.pcap",
         "synthetic_iwarp_mpa_crc.pcap", "siw_crc_rping.pcap"]


def _hex(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _filters(path: Path) -> list[str]:
    """Byte strings from the capture's PDUs where iwarp_mpa and iwarp_ddp_rdmap differ, as filters."""
    out: list[str] = []
    fpdus = 0
    for cp in read(path):
        for pdu in cp.pdus:
            mpa = pdu.get(MPA)
            if mpa is None:  # a Request or Reply: its key and its private data's last bytes
                if len(out) < 2:
                    out += [f'iwarp_mpa contains "{bytes(pdu.data[:10]).decode()}"', f"iwarp_mpa contains {_hex(pdu.data[-6:])}"]
                continue
            fpdus += 1
            if fpdus not in (1, 2, 9, 40):
                continue
            ulpdu_end = 2 + mpa.ulpdu_length
            for lo, hi in ((0, 4), (2, 8), (ulpdu_end - 3, ulpdu_end + 1), (len(pdu.data) - 4, len(pdu.data))):
                out += [f"iwarp_mpa contains {_hex(pdu.data[lo:hi])}", f"iwarp_ddp_rdmap contains {_hex(pdu.data[lo:hi])}"]
            for at, _marker in pdu.markers or ():  # (a marker's place in the FPDU as sent: 0 at its start)
                cut = _hex(bytes(pdu.wire or b"")[max(at - 2, 0):at + 6])
                out += [f"iwarp_mpa contains {cut}", f"iwarp_ddp_rdmap contains {cut}"]
    out += [r'iwarp_ddp_rdmap matches "^\x41\x43"', r'iwarp_mpa matches "^\x00"', r'iwarp_ddp_rdmap matches "\x00$"']
    return list(dict.fromkeys(out))


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", NAMES)
def test_iwarp_bytes_as_tshark(name: str, capsys: Any) -> None:
    path = CAPTURES / name
    filters = _filters(path)
    assert len(filters) >= 8
    found = 0
    for flt in filters:
        want = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout
        assert _ours(capsys, "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number") == want, flt
        found += bool(want)
    assert found >= 4  # (not a comparison of empty results)


def test_the_labels_have_no_bytes() -> None:
    """As in tshark ("iwarp_ddp (type=Label) cannot participate in contains comparison")."""
    for label in ("iwarp_ddp", "iwarp_rdma"):
        with pytest.raises(FilterError, match="a label without bytes"):
            compile_filter(f"{label} contains 41:43")
    assert compile_filter("iwarp_ddp_rdmap contains 41:43").byte_protocols == {"iwarp_ddp_rdmap"}
    assert compile_filter("iwarp_ddp_rdmap").byte_protocols == frozenset()
