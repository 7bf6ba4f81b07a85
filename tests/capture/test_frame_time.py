"""tshark's ``frame.time``, the frame's date and time in local time (``Nov 21, 2026 06:21:08.901798000 UTC``):
``-T fields -e frame.time`` on both paths, ``-T json``'s ``frame.time``, ``_index`` and ``icmp.data_time``
(local too: they said UTC in any zone), and display filters that compare it with a date and time as
tshark reads them (``frame.time >= "Nov 21, 2026 06:21:09"``, ISO 8601, a zone or not) or refuse the same
texts, against tshark in three time zones.  Before: "not a field rdmalab knows"."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode as _ours
from tshark_cli import requires_tshark, shown_frames

from rdmalab.capture.filter import FilterError, absolute_time_ns, compile_filter
from rdmalab.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
ZONES = {"UTC": 0, "Asia/Kolkata": -19800, "America/Los_Angeles": 28800}
NAMES = ["rxe_rping.pcap", "siw_read_bw.pcap", "hw_ib_connectx_erf.pcap", "synthetic_native_ib_erf.pcap"]


def _tshark(tz: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, env={"TZ": tz, "PATH": "/usr/bin:/bin"})


@pytest.fixture(params=list(ZONES))
def zone(request: Any, monkeypatch: Any) -> Any:
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    # the zone must be one the machine knows (tzdata, scripts/test.sh), or both sides would fall back to UTC
    assert time.timezone == ZONES[request.param], (request.param, time.timezone)
    yield request.param
    monkeypatch.delenv("TZ")
    time.tzset()


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", NAMES)
def test_fields_and_json_as_tshark(name: str, zone: str, capsys: Any) -> None:
    path = str(CAPTURES / name)
    args = ["-T", "fields", "-e", "frame.number", "-e", "frame.time", "-e", "frame.time_epoch"]
    want = _tshark(zone, "-r", path, *args).stdout
    assert want.strip()
    for how in ([], ["--no-columnar"], ["-E", "quote=d"]):
        theirs = want if how[:1] != ["-E"] else _tshark(zone, "-r", path, *args, *how).stdout
        assert _ours(capsys, *how, "-r", path, *args) == theirs, how

    def times(text: str) -> list[Any]:
        out = []
        for p in json.loads(text):
            layers = p["_source"]["layers"]
            icmp = layers.get("icmp", {})
            out.append((p["_index"], layers["frame"]["frame.time"], icmp.get("icmp.data_time")))
        return out

    assert times(_ours(capsys, "-r", path, "-T", "json")) == times(_tshark(zone, "-r", path, "-T", "json").stdout)


#: texts tshark 4.0 takes after frame.time (a written month, ISO 8601; local time unless a zone is given;
#: a fraction to the nanosecond; fields past their range carried over) and some it refuses
TAKEN = ["Nov 21, 2026 06:21:09", "nov 21, 2026 06:21:08.95", "Nov 21, 2026 06:21:08.95UTC", "Nov 21, 2026 6:21:09 UTC",
         "Nov  21, 2026 06:21:08.963013", "Nov 21, 2026 06:21:08.963013000", "2026-11-21", "2026-11-21 06:21",
         "2026-11-21 06:21:09", "2026-11-21T06:21:08.95Z", "2026-11-21T07:21:08.95+01:00", "2026-11-21T06:21:09+0100",
         "2026-11-21T06:21:08,95Z", "2026-11-21 06:21:08.950000000 UTC", "Nov 21, 2026 06:21:60", "Nov 21, 2026 06:21:61", "2026-11-21 23:59:61",
         "Feb 31, 2026 06:21:09", "2026-02-31"]
REFUSED = ["Nov 21, 2026", "Nov 21, 2026 06:21", "21 Nov 2026 06:21:09", "November 21, 2026 06:21:08",
           "Nov 21 2026 06:21:08", "Nov 21, 2026 06:21:08.9500000001", "Nov 21, 2026 06:21:08.95 utc",
           "Nov 21, 2026 06:21:08.", "Nov 21, 2026 06:21:08.95Z", "Nov 21, 2026 06:21:08.9 IST", "2026-11-21t06:21:08.95z",
           "2026-11-21 06:21:08.95 +01:00", "20261121T062109", "yesterday", "Nov 20, 2026 30:21:09", "Nov 21, 2026 06:21:62",
           "Nov 21, 2026 06:60:00", "Nov 32, 2026 06:21:09", "Nov 0, 2026 06:21:09", "2026-11-21 24:00:00", "2026-02-32",
           "2026-13-01", "2026-11-00"]


@requires_tshark
@pytest.mark.tshark
def test_filters_as_tshark(zone: str, capsys: Any) -> None:
    path = str(CAPTURES / "rxe_rping.pcap")
    seen = set()
    for text in TAKEN:
        for op in (">=", "<", "=="):
            flt = f'frame.time {op} "{text}"'
            got = _tshark(zone, "-r", path, "-Y", flt, "-T", "fields", "-e", "frame.number")
            assert got.returncode == 0, (flt, got.stderr)
            want = got.stdout.split()
            seen.add(len(want))
            for mode in ([], ["-T", "fields", "-e", "frame.number"], ["--no-columnar"], ["-T", "json"]):
                assert shown_frames(_ours(capsys, "-r", path, "-Y", flt, *mode), mode) == want, (flt, mode)
    assert len(seen) > 3  # (the texts cut the capture in different places)
    exact = f'frame.time == "{_tshark(zone, "-r", path, "-c", "2", "-T", "fields", "-e", "frame.time").stdout.split(chr(10))[1][:-4]}"'
    assert shown_frames(_ours(capsys, "-r", path, "-Y", exact), []) == ["2"]
    for text in REFUSED:
        flt = f'frame.time >= "{text}"'
        if zone == "UTC":  # whether tshark takes a text does not depend on the zone: asked once, not thrice
            assert _tshark(zone, "-r", path, "-Y", flt).returncode != 0, flt
        with pytest.raises(FilterError, match="frame.time"):
            compile_filter(flt)
        assert main(["decode", "-r", path, "-Y", flt]) != 0
        capsys.readouterr()
    for flt, why in (("frame.time > 1795242069", "not a valid absolute time"),
                     ('frame.time contains "Nov"', "a date and time")):
        assert _tshark(zone, "-r", path, "-Y", flt).returncode != 0, flt
        with pytest.raises(FilterError, match=why):
            compile_filter(flt)


def test_local_unless_a_zone_is_said(zone: str) -> None:
    utc = 1_795_242_069_000_000_000
    assert absolute_time_ns("2026-11-21T06:21:09Z") == utc
    assert absolute_time_ns("Nov 21, 2026 06:21:09 UTC") == utc
    assert absolute_time_ns("2026-11-21 07:21:09.5+01:00") == utc + 500_000_000
    assert absolute_time_ns("Nov 21, 2026 06:21:09") == utc + ZONES[zone] * 1_000_000_000
    assert absolute_time_ns("Feb 30, 2026 00:00:00 UTC") == absolute_time_ns("2026-03-02Z")
