"""Notebooks 07 and 08: each student's own captures and scenarios (issue 35), and what the pages show (issue 36).

* the captures the engine makes (:mod:`rdmalab.lab.owncaptures`) are real pcaps: rdmalab and, where it is
  installed, tshark decode every frame; the same seed gives the same keys in another process; the damaged
  FPDUs fail their CRC32c while their TCP checksums hold;
* the five exercises read off a scenario give three students three different right answers, each passing
  for its own student and failing for the other two; the two conceptual ones are the same for all;
* the feedback says where a wrong value comes from (another buffer's key, the kernel capture's key, the
  walk-through's frame) without giving the answer;
* the ICRC walk-through of a native IB packet does not speak of an Ethernet header, and the hex dump of a
  TCP segment with options colours the options as TCP's.
"""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from rdmalab import capture, lab, viz
from rdmalab.capture.crosscheck import crosscheck, tshark_path
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers.captures import my_rping
from rdmalab.lab.checkers.wires import CAPTURED_DESTQP, bth_task, crc_capture, icrc_frame
from rdmalab.lab.owncaptures import damaged_iwarp_capture, rping_capture
from rdmalab.lab.samples import one_write
from rdmalab.lab.variant import as_student
from rdmalab.wire.crc import crc32c, icrc_rocev2
from rdmalab.wire.ib import RETH
from rdmalab.wire.net import TCP, IPv4, internet_checksum

STUDENTS = ("alice", "bob", "carol")
CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def _rkey_of(cps: list[Any]) -> int:
    """Frame 4's descriptor: bytes 8-11 of the client's first SEND (read here, not by the checker's code)."""
    return int.from_bytes(cps[3].packet.payload[8:12], "big")


def _first_write_stag(cps: list[Any]) -> int:
    write = next(p for cp in cps for p in cp.pdus if (p.info or "").startswith("RDMA Write"))
    return int(next(s.value for s in write.spans() if s.field == "stag"))


def _bad_fpdus(path: Path) -> tuple[list[int], int]:
    fpdus = [p for cp in capture.read(path) for p in cp.pdus if p.crc_kind == "crc32c"]
    bad = [i for i, p in enumerate(fpdus) if crc32c(p.data[:p.crc_offset])
           != int.from_bytes(p.data[p.crc_offset:p.crc_offset + 4], "little")]
    return bad, len(fpdus)


def _answers(tmp: Path) -> dict[str, Any]:
    """The right answers of the five varying exercises for the current student, worked out as a learner would."""
    t = bth_task()
    bth = (bytes([t.opcode, t.se << 7 | t.padcnt << 4]) + t.p_key.to_bytes(2, "big") + b"\0"
           + t.destqp.to_bytes(3, "big") + bytes([t.ackreq << 7]) + t.psn.to_bytes(3, "big"))
    b = bytearray(icrc_frame()[14:-4])
    b[1] = b[8] = b[32] = 0xFF
    b[10:12] = b[26:28] = b"\xff\xff"
    return {"wires.bth": bth, "wires.icrc": zlib.crc32(b"\xff" * 8 + bytes(b)).to_bytes(4, "little"),
            "wires.crc32c": _bad_fpdus(crc_capture(tmp / "crc").path)[0],
            "captures.rkey": _rkey_of(my_rping("roce", tmp / "roce").packets),
            "captures.stag": _first_write_stag(my_rping("iwarp", tmp / "iwarp").packets)}


def test_each_student_has_own_answers_and_a_classmates_fail(tmp_path: Path) -> None:
    answers = {}
    for who in STUDENTS:
        with as_student(who):
            answers[who] = _answers(tmp_path / who)
    for ex in answers[STUDENTS[0]]:
        assert len({repr(answers[w][ex]) for w in STUDENTS}) == len(STUDENTS), (ex, answers)
        assert lab.exercises().items and next(x for x in lab.exercises().items if x.id == ex).varies
        for who in STUDENTS:
            for whose in STUDENTS:
                with as_student(who):
                    r = lab.check(ex, answers[whose][ex])
                assert (r.status == PASS) == (who == whose), (ex, who, whose, r)
    for ex in ("wires.which", "wires.iwarp_overhead"):  # the same for everyone
        assert not next(x for x in lab.exercises().items if x.id == ex).varies


def test_rping_captures_are_rping_and_the_same_in_another_process(tmp_path: Path) -> None:
    roce = rping_capture(11, transport="roce", size=72, count=2, registered_before=40, directory=tmp_path / "a")
    cps = roce.packets
    names = [cp.packet.summary().split(" QP=")[0] for cp in cps[3:15]]
    assert names == ["RC SEND Only", "RC Acknowledge", "RC RDMA READ Request", "RC RDMA READ Response Only",
                     "RC SEND Only", "RC Acknowledge", "RC SEND Only", "RC Acknowledge", "RC RDMA WRITE Only",
                     "RC Acknowledge", "RC SEND Only", "RC Acknowledge"], names
    assert "ConnectRequest" in cps[0].packet.summary() and all(cp.packet.ok for cp in cps)
    rkey = _rkey_of(cps)
    assert rkey == roce.facts["start"][1] and rkey >> 8 == 40 + 4  # 40 MRs before, then rping's recv, send, rdma, start
    assert cps[5].packet[RETH].r_key == rkey and cps[5].packet[RETH].dma_length == 72
    assert sum(1 for cp in cps if "RDMA WRITE" in cp.packet.summary()) == 2  # -C 2
    iw = rping_capture(11, transport="iwarp", size=72, count=2, registered_before=40, directory=tmp_path / "b")
    assert _first_write_stag(iw.packets) == iw.facts["sink"][1]
    assert [p.info.split(" ")[0] for p in iw.packets[3].pdus + iw.packets[4].pdus] == ["MPA", "MPA"]
    # another process, the same seed: the same keys (the checker's process is another process)
    code = ("import sys, tempfile\nfrom rdmalab.lab.owncaptures import rping_capture\n"
            "for t in ('roce', 'iwarp'):\n"
            "    c = rping_capture(11, transport=t, size=72, count=2, registered_before=40, directory=tempfile.mkdtemp())\n"
            "    print(c.facts['start'][1], c.facts['sink'][1])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [roce.facts["start"][1], roce.facts["sink"][1], iw.facts["start"][1],
                                     iw.facts["sink"][1]]


@pytest.mark.skipif(tshark_path() is None, reason="tshark is not installed")
def test_tshark_reads_the_engines_captures_as_rdmalab_does(tmp_path: Path) -> None:
    for transport in ("roce", "iwarp"):
        c = rping_capture(5, transport=transport, directory=tmp_path / transport)
        report = crosscheck(c.path)
        assert report.fields_compared > 500 and not report.unexplained, report.text()
    out = subprocess.run([str(tshark_path()), "-r", str(tmp_path / "iwarp" / "rping-iwarp.pcap"), "-Y",
                          "iwarp_rdma.opcode == 0", "-T", "fields", "-e", "iwarp_ddp.stag"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0], 16) == c.facts["sink"][1]  # Wireshark reads the first RDMA Write's STag as rdmalab does


def test_damaged_fpdus_fail_their_crc_and_keep_their_tcp_checksum(tmp_path: Path) -> None:
    c = damaged_iwarp_capture(3, send=500, write=6000, read_back=3000, directory=tmp_path)
    bad, total = _bad_fpdus(c.path)
    assert bad == c.facts["damaged"] and 2 <= len(bad) <= 3 and total >= 8
    assert not (tmp_path / "iwarp-crc.pcap.clean").exists()
    for cp in capture.read(c.path):
        ip, tcp = cp.packet.get(IPv4), cp.packet.get(TCP)
        assert ip is not None and tcp is not None
        seg = bytes(cp.packet.data[14 + ip.header_len:14 + ip.total_length])
        pseudo = ip.src.to_bytes(4, "big") + ip.dst.to_bytes(4, "big") + bytes([0, 6]) + len(seg).to_bytes(2, "big")
        assert internet_checksum(pseudo + seg) == 0, cp.frame_number  # a good TCP checksum sums to zero
    again = damaged_iwarp_capture(3, send=500, write=6000, read_back=3000, directory=tmp_path / "again")
    assert again.facts == c.facts
    assert damaged_iwarp_capture(4, send=500, write=6000, read_back=3000, directory=tmp_path / "4").facts != c.facts


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="transport 'ib'"):
        rping_capture(1, transport="ib", directory=tmp_path)
    with pytest.raises(ValueError, match="size 10"):
        rping_capture(1, size=10, directory=tmp_path)
    with pytest.raises(ValueError, match="write 2"):
        damaged_iwarp_capture(1, write=2, directory=tmp_path)
    with pytest.raises(ValueError, match="'roce' or 'iwarp'"):
        my_rping("tcp")


def test_feedback_names_where_a_wrong_key_comes_from(tmp_path: Path) -> None:
    with as_student("alice"):
        roce = my_rping("roce", tmp_path / "r")
        sink = roce.facts["sink"][1]
        r = lab.check("captures.rkey", sink)
        assert r.status == FAIL and "second SEND" in r.message and hex(_rkey_of(roce.packets)) not in repr(r)
        r = lab.check("captures.rkey", 0x142A)  # the kernel's, in captures/rxe_rping.pcap
        assert r.status == FAIL and "rxe_rping.pcap" in r.message
        r = lab.check("captures.stag", 0x6F092200)  # the kernel's, in captures/siw_rping.pcap
        assert r.status == FAIL and "siw_rping.pcap" in r.message
        walked = icrc_rocev2(icrc_frame(CAPTURED_DESTQP)[14:-4])
        r = lab.check("wires.icrc", walked)
        assert r.status == FAIL and "walk-through" in r.message
        bad, total = _bad_fpdus(crc_capture(tmp_path / "c").path)
        r = lab.check("wires.crc32c", list(range(total)))
        assert r.status == FAIL and "little-endian" in " ".join(r.details)
        r = lab.check("wires.crc32c", [])
        assert r.status == FAIL and "empty" in " ".join(r.details)
        r = lab.check("wires.crc32c", bad[:1])  # one found, others missing: how many, not which
        assert r.status == FAIL and "missing" in " ".join(r.details) and str(bad[1:]) not in repr(r)
    with as_student("bob"):
        bob = bth_task()
    with as_student("alice"):
        r = lab.check("wires.bth", bob.encode())
        if sum(getattr(bob, f) != getattr(bth_task(), f) for f in ("opcode", "se", "padcnt", "p_key", "destqp",
                                                                   "ackreq", "psn")) >= 4:
            assert "yours alone" in " ".join(r.details)
        assert r.status == FAIL


def test_native_ib_icrc_walk_through_has_no_ethernet_header() -> None:
    ib, _, v2, _ = one_write()
    text = viz.icrc_steps(ib.packet)._repr_html_()
    step1 = text[text.index("Step 1."):text.index("</p>")]
    assert "Ethernet header is not covered" not in step1 and "no Ethernet header" in step1 and "VCRC" in step1
    step1 = viz.icrc_steps(v2.packet)._repr_html_()
    assert "the Ethernet header is not covered" in step1 and "VCRC" not in step1[:step1.index("</p>")]


def test_hexdump_colours_tcp_options_as_tcp() -> None:
    siw = list(capture.read(CAPTURES / "siw_rping.pcap"))
    frame = next(cp for cp in siw if any((p.info or "").startswith("RDMA Read Request") for p in cp.pdus))
    dump = viz.hexdump(frame)
    options = [s for s in dump.spans if s.field == "options"]
    assert [(s.layer, s.start, s.end) for s in options] == [("TCP", 54, 66)]
    assert all(dump.byte_fields()[i] for i in range(len(dump.data)))  # every byte belongs to a header
    assert ("TCP", 34, 66) in dump._layers()
    plain = viz.hexdump(one_write()[3].outer)  # the engine's iWARP frame: a 20-byte TCP header, no options span
    assert any(s.layer == "TCP" for s in plain.spans) and not [s for s in plain.spans if s.field == "options"]


def test_agree_is_asked_of_each_students_own_long_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """captures.agree: the cross-check counts of the learner's own long rping capture (made again by the checker,
    cross-checked with tshark); a classmate's counts, the first capture's and the kernel's fail, each saying so;
    without tshark the check is an error, never a pass."""
    from rdmalab.capture.crosscheck import crosscheck, tshark_path
    from rdmalab.lab.checkers import captures as cap

    if tshark_path() is None:
        pytest.skip("tshark is not installed: this check needs it (CI installs it)")
    counts = {}
    for who in ("alice", "bob", "carol"):
        with as_student(who):
            s = lab.scenario("captures.agree")
            counts[who] = cap._agreement(s.engine_seed, s.rping_size, s.rping_cycles)
    assert len(set(counts.values())) == 3, counts
    with as_student("alice"):
        own = cap.my_long_rping()
        r = crosscheck(own.path)
        assert counts["alice"] == (r.fields_compared, r.fields_compared - r.agreements)
        assert lab.check("captures.agree", list(counts["alice"])).status == PASS
        assert lab.check("captures.agree", list(counts["bob"])).status == "fail"
        first = lab.scenario("captures.rkey")
        short = cap._agreement(first.engine_seed, first.rping_size, first.rping_cycles)
        r = lab.check("captures.agree", list(short))
        assert r.status == "fail" and "first capture" in r.message, r
        kernel = crosscheck(lab.capture_path("rxe_rping.pcap"))
        r = lab.check("captures.agree", [kernel.fields_compared, kernel.fields_compared - kernel.agreements])
        assert r.status == "fail" and "rxe_rping.pcap" in r.message, r
        r = lab.check("captures.agree", [counts["alice"][0], counts["alice"][0] - counts["alice"][1]])
        assert r.status == "fail" and "that is the number that agree" in r.message, r
        monkeypatch.setattr(cap, "tshark_path", lambda: None)
        r = lab.check("captures.agree", list(counts["alice"]))
        assert r.status == "error" and "tshark" in r.message, r
