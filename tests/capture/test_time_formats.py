"""The summary line's time as tshark's ``-t`` shows it (absolute with the date, time of day, UTC, since the
frame before, since the frame shown before, since the epoch), and tshark's ``-n``, accepted (rdmalab never
resolves names).  Against tshark on captures of microsecond and nanosecond times (rdmalab's summary
times are to the microsecond: tshark's nanoseconds are rounded there), in two time zones.  Before:
"unrecognized arguments: -t" (and "-n")."""

from __future__ import annotations

import re
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from rdmalab.capture.render import TIME_FORMATS, TimeColumn
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")
#: a line's number and time: the time with a date ("2026-11-21 06:21:08.901798") or without
_LINE = re.compile(r"^\s*(\d+)\s+((?:\d{4}-\d\d-\d\d )?[\d:.]+)\s")


def _times(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        assert m, line
        out.append((m.group(1), m.group(2)))
    return out


def _same(ours: str, theirs: str, within: str = "0.0000005") -> bool:
    """Our microsecond time is tshark's: the same text, or (a nanosecond capture, which tshark writes to
    nine digits) the same time to within the rounding to six (``within``)."""
    if ours == theirs:
        return True
    head, _dot, frac = theirs.rpartition(".")
    our_head, _d, our_frac = ours.rpartition(".")
    if len(frac) != 9 or head != our_head:
        return False
    return abs(Decimal("0." + frac) - Decimal("0." + our_frac)) <= Decimal(within)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
@pytest.mark.parametrize("name", ["rxe_rping.pcap", "siw_read_bw.pcap", "hw_ib_connectx_erf.pcap"])
def test_time_formats_as_tshark(name: str, tz: str, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TZ", tz)
    import time

    time.tzset()
    # the zone must be one the machine knows (tzdata, scripts/test.sh), or both sides would fall back to UTC
    assert time.timezone == {"UTC": 0, "Asia/Kolkata": -19800}[tz], (tz, time.timezone)
    try:
        path = str(CAPTURES / name)
        flt = "frame.number > 2 && !(frame.number in {5..9}) && frame.number < 60"
        for fmt in TIME_FORMATS:
            want = subprocess.run(["tshark", "-n", "-t", fmt, "-r", path, "-Y", flt], capture_output=True, text=True,
                                  check=True, env={"TZ": tz, "PATH": "/usr/bin:/bin"}).stdout
            assert main(["decode", "-n", "-t", fmt, "-r", path, "-Y", flt]) == 0
            got = capsys.readouterr().out
            ours, theirs = _times(got), _times(want)
            assert [n for n, _t in ours] == [n for n, _t in theirs] and ours, fmt
            # (-t r, the default column, counts in float seconds: on a nanosecond capture its last digit
            # may be one off the exact rounding; the other formats count in exact nanoseconds)
            within = "0.000001" if fmt == "r" else "0.0000005"
            assert all(_same(a, b, within) for (_n, a), (_m, b) in zip(ours, theirs, strict=True)), (fmt, ours, theirs)
            # the rest of each line is -t r's
            assert main(["decode", "-r", path, "-Y", flt]) == 0
            plain = capsys.readouterr().out.splitlines()
            for line, before in zip(got.splitlines(), plain, strict=True):
                m = _LINE.match(line)
                assert m is not None
                assert line[6 + max(11, len(m.group(2))):] == before[17:]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_formats_count_every_frame_in_order() -> None:
    col = TimeColumn("d")
    texts = []
    for ns, shown in ((10**18, True), (10**18 + 1_500_000, False), (10**18 + 2_000_000, True)):
        col.seen(ns)
        if shown:
            texts.append(col.text())
    assert texts == ["0.000000", "0.000500"]  # since the frame before, shown or not
    col = TimeColumn("dd")
    for ns in (10**18, 10**18 + 1_500_000, 10**18 + 2_000_000):
        col.seen(ns)
    assert col.text() == "0.000000"  # the first shown
    col.seen(10**18 + 3_000_000)
    assert col.text() == "0.001000"
    with pytest.raises(ValueError, match="-t x: not a time format"):
        TimeColumn("x")
