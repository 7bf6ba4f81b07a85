"""Parity with Wireshark: every packet of every capture in captures/, field by field.

Parametrised over the files present, so new captures are picked up automatically.  Every field
both tools decode must agree, except where a known Wireshark 4.0 defect explains the
difference (:data:`rdmalab.capture.defects.WIRESHARK_DEFECTS`, the same table the cross-check
reports use).  Every ICRC and MPA CRC32c must verify, except the frames the manifest (or the
vectors README) says are deliberately bad.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rdmalab.capture import read
from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.defects import DEFECTS_BY_ID, WIRESHARK_DEFECTS

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(p for p in CAPTURES.glob("*") if p.suffix in (".pcap", ".pcapng")) if CAPTURES.is_dir() else []

# Deliberately bad frames, when the manifest does not (yet) list them (vectors/README.md).
KNOWN_BAD: dict[str, set[int]] = {"synthetic_iwarp_mpa_crc.pcap": {16}}

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")


def deliberately_bad() -> dict[str, set[int]]:
    """Frames captures/MANIFEST.md marks as deliberately bad: a table column whose header says
    'bad frames' (e.g. '16' or '3, 7'), in any section of the manifest."""
    out = {k: set(v) for k, v in KNOWN_BAD.items()}
    manifest = CAPTURES / "MANIFEST.md"
    if not manifest.exists():
        return out
    col: int | None = None
    for line in manifest.read_text().splitlines():
        if not line.startswith("|"):
            col = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if col is None:
            col = next((i for i, c in enumerate(cells) if "bad frames" in c.lower()), -1)
            continue
        if col < 0 or col >= len(cells) or set(cells[0]) <= set("-: "):
            continue
        name = re.search(r"[\w.\-]+\.pcap(?:ng)?", cells[0])
        if name:
            out.setdefault(name.group(0), set()).update(int(n) for n in re.findall(r"\d+", cells[col].split("(")[0]))
    return out


def test_there_are_captures() -> None:
    assert FILES, f"no captures in {CAPTURES}"


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fields_agree_with_wireshark(path: Path) -> None:
    report = crosscheck(path)
    assert report.packets == report.wireshark_packets, (
        f"rdmalab read {report.packets} packets, tshark {report.wireshark_packets}")
    assert report.fields_compared > 0
    unexplained = report.unexplained
    assert not unexplained, "\n" + report.text()
    for r in report.explained:
        assert r.defect is None or r.defect in WIRESHARK_DEFECTS


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_crc_verifies(path: Path) -> None:
    bad_expected = deliberately_bad().get(path.name, set())
    bad_seen: set[int] = set()
    for cp in read(path):
        for pkt in [cp.packet, *cp.pdus]:
            if pkt.encap in ("rocev1", "rocev2", "ib"):
                # every IB-transport packet carries an ICRC, and it was checked
                assert pkt.crc_status is not None, f"frame {cp.frame_number}: ICRC not checked"
            if pkt.crc_status == "bad" or pkt.vcrc_status == "bad":
                bad_seen.add(cp.frame_number)
    assert bad_seen == bad_expected, f"frames with a bad CRC: {sorted(bad_seen)}, expected {sorted(bad_expected)}"


def test_defect_table_is_well_formed() -> None:
    assert len(DEFECTS_BY_ID) == len(WIRESHARK_DEFECTS)
    for d in WIRESHARK_DEFECTS:
        assert d.condition and d.reason and d.spec and d.reference and d.fields
    # the twelve Wireshark 4.0 limitations this project knows of are all in the table
    for did in ("cnp-0x81", "xrc-not-parsed", "rd-as-dc", "fecn-becn", "immdt-ieth-twice", "atomiceth-reth-names",
                "icrc-not-validated", "rpcordma-false-positive", "mpa-v2", "iwarp-mid-stream", "rfc7306-opcodes",
                "flush-atomic-write"):
        assert did in DEFECTS_BY_ID


@requires_tshark
@pytest.mark.tshark
def test_known_defects_are_recognised() -> None:
    """The synthetic vectors exercise CNP 0x81, XRC and the doubled ImmDt/IETH: each difference is
    attributed to its defect, not silently ignored."""
    path = CAPTURES / "synthetic_rocev2.pcap"
    if not path.exists():
        pytest.skip("synthetic_rocev2.pcap not in captures/")
    report = crosscheck(path)
    ids = {r.defect.id for r in report.explained if r.defect}
    assert {"cnp-0x81", "xrc-not-parsed", "immdt-ieth-twice"} <= ids
    assert report.per_key["infiniband.bth.psn"] == 20
    assert report.per_key["infiniband.invariant.crc"] >= 18  # all but CNP and XRC


@requires_tshark
@pytest.mark.tshark
def test_crosscheck_catches_a_wrong_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong rdmalab value shows up as an unexplained difference."""
    from rdmalab.capture import fields as fields_mod

    path = CAPTURES / "synthetic_rocev2.pcap"
    if not path.exists():
        pytest.skip("synthetic_rocev2.pcap not in captures/")
    real = fields_mod.frame_fields

    def wrong(cp, *, raw=False):  # type: ignore[no-untyped-def]
        out = real(cp, raw=raw)
        if "infiniband.bth.psn" in out:
            out["infiniband.bth.psn"] = out["infiniband.bth.psn"] + 1
        return out

    import rdmalab.capture.crosscheck as cc
    monkeypatch.setattr(cc, "frame_fields", wrong)
    report = crosscheck(path)
    assert len([r for r in report.unexplained if r.key == "infiniband.bth.psn"]) == 20
