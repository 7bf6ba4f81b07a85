"""rdmalab.capture.top (the live view's core): the same numbers as analyze, in bounded memory."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rdmalab.capture.analysis import analyze
from rdmalab.capture.pcapio import record_blocks
from rdmalab.capture.pcapwriter import seconds_to_ns, write_capture
from rdmalab.capture.reader import records
from rdmalab.capture.top import HOLES_MAX, PENDING_MAX, LiveConn, LiveTop
from rdmalab.capture.top_source import replay
from rdmalab.cli.top import render
from rdmalab.wire import AETH, BTH, RETH, encode_rocev2
from rdmalab.wire.ib import CNPPad

CAPTURES = sorted((Path(__file__).parents[2] / "captures").glob("*.pcap"))
#: finding kinds whose counts the live view promises to equal analyze's
KINDS = ("nak_seq_err", "nak_rnr", "nak_other", "retransmission", "cnp", "bad_icrc", "psn_gap", "bad_crc32c",
         "terminate", "opcode_sequence")


def _live(path: Path, one_by_one: bool = False, **kw: Any) -> LiveTop:
    top = LiveTop(idle_s=None, **kw)
    if one_by_one:
        for rec in records(path):
            top.feed(round(rec.timestamp * 1e9), rec.data, rec.linktype, rec.wire_length)
    else:
        for blk in record_blocks(path, 1 << 15):
            top.feed_block(blk)
    top.tick()
    return top


def _same_as_analyze(path: Path, top: LiveTop) -> None:
    a = analyze(path)
    mine = [(c.requester, c.responder, c.responder_qpn, c.requester_qpn, c.transport, c.packets, c.request_bytes,
             c.retransmitted_bytes, dict(c.messages)) for c in top.connections]
    theirs = [(c.requester, c.responder, c.responder_qpn, c.requester_qpn, c.transport, c.packets, c.request_bytes,
               c.retransmitted_bytes, c.summary.get("messages", {})) for c in a.connections]
    assert mine == theirs
    tot = top.totals()
    assert tot["connections"] == len(a.connections)
    assert sum(tot["messages"].values()) == len(a.messages)
    assert tot["request_bytes"] == sum(c.request_bytes for c in a.connections)
    ev = a.all_events()
    assert {k: top.kinds.get(k, 0) for k in KINDS} == {k: ev.get(k, 0) for k in KINDS}
    for trigger in ("nak", "rnr"):
        assert top.kinds.get(f"retransmission_{trigger}", 0) == a.events_where("retransmission", trigger=trigger)
    if not ev.get("implied_nak"):  # analyze's implied-NAK trigger needs the READ windows: timeout here
        assert top.kinds.get("timeout", 0) == ev.get("timeout", 0)
    # per connection too
    for c, lc in zip(a.connections, top.connections, strict=True):
        for kind in ("nak_seq_err", "nak_rnr", "nak_other", "retransmission", "cnp"):
            assert lc.kinds.get(kind, 0) == a.events_where(kind, {c.id}), (kind, c.id)


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_same_numbers_as_analyze(path: Path) -> None:
    _same_as_analyze(path, _live(path))


@pytest.mark.parametrize("name", ["rxe_send_bw_loss.pcap", "rxe_write_bw_loss.pcap", "rxe_read_bw.pcap",
                                  "synthetic_iwarp_mpa_crc.pcap"])
def test_frame_by_frame_in_small_batches_is_the_same(name: str) -> None:
    path = CAPTURES[0].parent / name
    top = _live(path, one_by_one=True, batch=7)
    _same_as_analyze(path, top)
    assert top.frames == sum(1 for _ in records(path))


def test_the_loss_captures_have_what_is_compared() -> None:
    """The equality above is not about zeros: the lossy captures have NAKs and retransmissions."""
    for name, naks, retx in (("rxe_send_bw_loss.pcap", 6, 7), ("rxe_write_bw_loss.pcap", 8, 12)):
        top = _live(CAPTURES[0].parent / name)
        assert top.kinds["nak_seq_err"] == naks and top.kinds["retransmission"] == retx
        assert top.kinds["retransmission_nak"] == naks
        (row,) = top.rows()
        assert row["nak_seq_err"] == naks and row["retransmissions"] == retx and row["retransmitted_bytes"] > 0
        assert any(f.kind == "nak_seq_err" for f in top.findings)


def _cnp_capture(tmp_path: Path) -> Path:
    frames = []
    t = 100.0
    for k in range(4):
        frames.append((t + k * 1e-6, encode_rocev2(BTH(opcode=0x06 if k == 0 else 0x07 if k < 3 else 0x08,
                                                       destqp=0x22, psn=k, ackreq=int(k == 3)),
                                                   [RETH(0x1000, 7, 4096)] if k == 0 else [], b"x" * 1024,
                                                   ecn=3 if k == 1 else 2)))
    frames.append((t + 5e-6, encode_rocev2(BTH(opcode=0x81, destqp=0x11, becn=1), [CNPPad()], b"",
                                           src_ip="10.0.0.2", dst_ip="10.0.0.1")))
    frames.append((t + 5.5e-6, encode_rocev2(BTH(opcode=0x11, destqp=0x11, psn=2), [AETH.rnr_nak(3, 5)], b"",
                                             src_ip="10.0.0.2", dst_ip="10.0.0.1")))
    ack = bytearray(encode_rocev2(BTH(opcode=0x11, destqp=0x11, psn=3), [AETH.ack(1)], b"",
                                  src_ip="10.0.0.2", dst_ip="10.0.0.1"))
    ack[-1] ^= 0xFF  # damage the ICRC
    frames.append((t + 6e-6, bytes(ack)))
    path = tmp_path / "ce.pcap"
    write_capture(path, [(seconds_to_ns(ts), fr) for ts, fr in frames])
    return path


def test_cnp_rnr_and_bad_icrc_like_analyze(tmp_path: Path) -> None:
    path = _cnp_capture(tmp_path)
    top = _live(path)
    _same_as_analyze(path, top)
    (row,) = top.rows()
    assert (row["cnps"], row["nak_rnr"], row["bad_icrc"]) == (1, 1, 1)


def test_nak_for_requests_lost_before_the_capture_point(tmp_path: Path) -> None:
    """The first request is lost before the capture point (netem on the requester's side, as in the live
    test): the responder's NAK names a PSN before every request the capture holds.  analyze gives it to
    the connection; the live view must count it too, and call the retransmission it causes NAK-triggered."""
    def req(k: int, t: float, op: int) -> tuple[float, bytes]:
        return t, encode_rocev2(BTH(opcode=op, destqp=0x22, psn=k, ackreq=int(op == 0x08)),
                                [RETH(0x1000, 7, 4096)] if op == 0x06 else [], b"x" * 1024)

    def resp(k: int, t: float, aeth: AETH) -> tuple[float, bytes]:
        return t, encode_rocev2(BTH(opcode=0x11, destqp=0x11, psn=k), [aeth], b"", src_ip="10.0.0.2",
                                dst_ip="10.0.0.1")

    t = 100.0
    frames = [req(1, t + 1e-6, 0x07), req(2, t + 2e-6, 0x07), req(3, t + 3e-6, 0x08), resp(0, t + 4e-6, AETH.nak(0, 0)),
              req(0, t + 5e-6, 0x06), req(1, t + 6e-6, 0x07), req(2, t + 7e-6, 0x07), req(3, t + 8e-6, 0x08),
              resp(3, t + 9e-6, AETH.ack(1))]
    path = tmp_path / "lost_first.pcap"
    write_capture(path, [(seconds_to_ns(ts), fr) for ts, fr in frames])
    for top in (_live(path), _live(path, one_by_one=True, batch=1)):
        _same_as_analyze(path, top)
        (row,) = top.rows()
        assert (row["packets"], row["nak_seq_err"], row["retransmissions"], row["requester_qpn"]) == (9, 1, 1, 0x11)
        assert top.kinds["retransmission_nak"] == 1
        # the WRITE whose First the capture saw only when it was sent again is a message all the same
        # (the live test's perftest run once counted 19 of its 20 WRITEs so)
        assert row["messages"] == {"WRITE": 1}


def _pfc(prio_mask: int, quanta: int) -> bytes:
    body = (0x0101).to_bytes(2, "big") + prio_mask.to_bytes(2, "big") + quanta.to_bytes(2, "big") * 8
    return bytes.fromhex("0180c2000001" "020000000001") + (0x8808).to_bytes(2, "big") + body.ljust(46, b"\0")


def test_pfc_and_pause_frames_counted(tmp_path: Path) -> None:
    pfc = _pfc(0b1000, 0xFFFF)
    tagged = pfc[:12] + bytes.fromhex("8100" "6005") + _pfc(0b100000, 7)[12:]  # 802.1Q, priority 3, VLAN 5
    frames = [pfc, _pfc(0b1000, 0),  # a resume (quanta 0): a PFC frame, pausing nothing
              bytes.fromhex("0180c2000001" "020000000001" "8808" "0001" "ffff").ljust(60, b"\0"), tagged]
    top = LiveTop()
    for k, fr in enumerate(frames):
        top.feed(k, fr)
    top.flush()
    t = top.totals()
    assert (t["pfc_frames"], t["pause_frames"], t["pfc_by_priority"]) == (3, 1, [0, 0, 0, 1, 0, 1, 0, 0])
    assert t["frames"] == 4 and t["connections"] == 0
    path = tmp_path / "pfc.pcap"  # the same frames replayed block by block
    write_capture(path, [(k, fr) for k, fr in enumerate(frames)])
    top2 = LiveTop()
    for blk in record_blocks(path):
        top2.feed_block(blk)
    assert top2.totals() == t


# ---------------------------------------------------------------- bounded memory


def _stream(n_conns: int, per_conn: int, gap_every: int = 7) -> list[tuple[int, bytes]]:
    """RC SEND Only requests on ``n_conns`` connections (one after the other), every ``gap_every``-th
    PSN skipped (a hole each time) and a NAK (PSN sequence error) after the next request."""
    out = []
    t = 0
    for c in range(n_conns):
        src, dst = f"10.1.{c // 250}.{c % 250 + 1}", "10.2.0.1"
        qp = 0x100 + c
        for k in range(per_conn):
            t += 1000
            if k % gap_every == 3:
                continue
            out.append((t, encode_rocev2(BTH(opcode=0x04, destqp=qp, psn=k), [], b"y" * 64, src_ip=src, dst_ip=dst)))
            if k % gap_every == 4:
                out.append((t + 1, encode_rocev2(BTH(opcode=0x11, destqp=0x900 + c, psn=3 + (k // gap_every) * gap_every),
                                                 [AETH.nak(k, 0)], b"", src_ip=dst, dst_ip=src)))
    return out


def test_findings_and_connections_stay_bounded() -> None:
    frames = _stream(60, 400)
    top = LiveTop(max_conns=8, max_findings=50, idle_s=None, batch=256)
    for t, fr in frames:
        top.feed(t, fr)
    top.tick()
    assert len(top.findings) == 50
    assert len(top.connections) == 8 and top.retired["connections"] == 52
    tot = top.totals()
    assert tot["connections"] == 60  # the totals keep the retired ones
    assert tot["kinds"]["psn_gap"] == 60 * len(range(3, 400, 7))
    assert tot["kinds"]["nak_seq_err"] == 60 * len(range(4, 400, 7))
    assert len(top._by_req) == 8 and len(top._by_resp) <= 8 and len(top._pending) <= PENDING_MAX
    for c in top.connections:
        assert len(c.holes) <= HOLES_MAX  # 57 holes a connection, never filled: at most HOLES_MAX kept


def test_memory_does_not_grow_with_the_run() -> None:
    """The same stream fed twice as long: what the view holds after it is no larger."""
    frames = _stream(40, 300)
    top = LiveTop(max_conns=4, max_findings=20, idle_s=None, batch=512)
    tracemalloc.start()
    try:
        for t, fr in frames[: len(frames) // 2]:
            top.feed(t, fr)
        top.tick()
        half = tracemalloc.get_traced_memory()[0]
        for t, fr in frames[len(frames) // 2:]:
            top.feed(t, fr)
        top.tick()
        full = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert full < half + 200_000, (half, full)


def test_idle_connections_retire_into_the_totals() -> None:
    top = LiveTop(idle_s=0.001)
    for t, fr in _stream(3, 20):
        top.feed(t * 100, fr)  # 100 us apart; connection k ends 2 ms before k+1 starts
        top.tick(t * 100)
    assert [c.id for c in top.connections] == [2]
    assert top.totals()["connections"] == 3 and top.retired["connections"] == 2


def test_holes_fill_and_forget() -> None:
    c = LiveConn(0, "RC", "a", "b", 1)
    assert c.seen_add(10) and c.seen_add(14) and c.holes == [[11, 14]]
    assert c.seen_add(12) and c.holes == [[11, 12], [13, 14]]
    assert c.seen_add(11) and c.seen_add(13) and c.holes == []
    assert not c.seen_add(12) and c.seen_add(5) and c.holes == [[6, 10]]
    for k in range(HOLES_MAX + 10):
        c.seen_add(20 + 2 * k)
    assert len(c.holes) == HOLES_MAX


def test_replay_paces_and_yields_while_waiting() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    path = CAPTURES[0].parent / "rxe_send_bw_loss.pcap"
    got = list(replay(path, 2.0, clock=lambda: now[0], sleep=sleep, wait_max=0.1))
    frames = [f for f in got if f is not None]
    assert len(frames) == sum(1 for _ in records(path))
    span = (frames[-1][0] - frames[0][0]) / 1e9
    assert now[0] == pytest.approx(span / 2, abs=1e-6)
    assert max(slept) <= 0.1 + 1e-9
    # a None between two frames exactly when the wait between them was longer than wait_max
    last_ts, nones, checked = None, 0, 0
    for f in got:
        if f is None:
            nones += 1
            continue
        if last_ts is not None:
            wait = (f[0] - last_ts) / 1e9 / 2
            assert (nones > 0) == (wait > 0.1 + 1e-6) or 0.1 - 1e-6 < wait < 0.1 + 1e-6, (wait, nones)
            checked += wait > 0.2
        last_ts, nones = f[0], 0
    assert checked >= 1


def test_rich_rendering_has_the_rows() -> None:
    top = _live(CAPTURES[0].parent / "rxe_write_bw_loss.pcap")
    con = Console(file=io.StringIO(), width=200, record=True)
    con.print(render(top))
    text = con.export_text()
    row = top.rows()[0]
    assert "10.0.1.2 QP 0x11 -> 10.0.1.1 QP 0x11 (RC)" in text.replace("\n", " ") or row["name"].split(" (")[0] in text
    assert f"{row['packets']}" in text and "nak_seq_err" in text and "20 WRITE" in text


def _packet_socket_queue(pid: int, iface: str = "lo") -> int | None:
    """The bytes waiting in process ``pid``'s AF_PACKET socket bound to ``iface`` and running
    (/proc/net/packet's Iface, R and Rmem), or None while it has none."""
    try:
        ifindex = Path(f"/sys/class/net/{iface}/ifindex").read_text().strip()
        rows = [ln.split() for ln in Path("/proc/net/packet").read_text().splitlines()[1:]]
        fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return None
    rmem = {r[-1]: int(r[6]) for r in rows if r[4] == ifindex and r[5] == "1"}
    mine = [rmem[f[8:-1]] for f in fds if f.startswith("socket:[") and f[8:-1] in rmem]
    return sum(mine) if mine else None


def test_live_on_loopback_like_analyze(tmp_path: Path) -> None:
    """``rdmalab top -i lo``: the frames of a lossy capture sent onto the loopback interface give
    analyze's numbers for that capture (each frame once: the outgoing copy is skipped); SIGTERM
    stops it with the final table."""
    if not hasattr(socket, "AF_PACKET") or os.geteuid() != 0:
        pytest.skip("needs Linux and root (an AF_PACKET socket on lo)")
    path = CAPTURES[0].parent / "rxe_send_bw_loss.pcap"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "top", "-i", "lo", "--once", "-T", "json",
                             "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while _packet_socket_queue(proc.pid) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "rdmalab top -i lo did not open its socket in 60 s"
            time.sleep(0.05)
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind(("lo", 0))
            for rec in records(path):
                s.send(rec.data)
        while _packet_socket_queue(proc.pid):  # until it has read them all (a busy machine is slow)
            assert time.monotonic() < deadline + 60, "rdmalab top -i lo did not read its frames in 60 s"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    a = analyze(path)
    (c,) = a.connections
    mine = [r for r in doc["connections"] if r["name"] == c.name]  # (other programs may use lo meanwhile)
    assert len(mine) == 1, json.dumps(doc["totals"]) + err
    (row,) = mine
    assert doc["totals"]["dropped"] == 0, doc["totals"]
    assert (row["packets"], row["request_bytes"], row["retransmitted_bytes"], row["messages"]) == \
        (c.packets, c.request_bytes, c.retransmitted_bytes, c.summary["messages"]), doc
    assert (row["nak_seq_err"], row["retransmissions"], row["psn_gaps"]) == \
        (a.events("nak_seq_err"), a.events("retransmission"), a.events("psn_gap")), doc


def test_a_capture_cut_short_shows_what_was_read_and_says_where_it_stops(tmp_path: Path) -> None:
    """``top -r`` on a capture cut in the middle of a record: the frames before the cut counted (the same
    numbers as analyze's of that file), a ``capture_damaged`` finding and a warning naming the file and the
    byte, exit 0; a file that is no capture at all: one sentence, exit 1, no table."""
    src = CAPTURES[0].parent / "rxe_send_bw_loss.pcap"
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src.read_bytes()[:src.stat().st_size // 2])
    run = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(cut), "--once", "-T", "json",
                          "--speed", "max"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    a = analyze(cut)
    (damage,) = a.of_kind("capture_damaged")
    got = json.loads(run.stdout)
    frames = damage.detail["frames_read"]
    assert got["totals"]["frames"] == frames > 0
    assert got["totals"]["connections"] == len(a.connections) == 1
    assert got["connections"][0]["packets"] == a.connections[0].packets
    (finding,) = [f for f in got["findings"] if f["kind"] == "capture_damaged"]
    assert "truncated mid-record" in finding["text"] and f"the {frames} frames before it" in finding["text"]
    assert run.stderr.startswith(f"rdmalab: warning: {cut}: the capture is truncated mid-record: record {frames + 1}")
    text = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(cut), "--once", "--speed", "max"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "10.0.0.2 QP 0x25 -> 10.0.0.1 QP 0x25" in text.stdout, text.stdout + text.stderr
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"hello, not a capture\n" * 4)
    bad = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(junk), "--once"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 1 and bad.stdout == ""
    assert "is not a pcap or pcapng file" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_empty_records_are_counted_not_a_crash(tmp_path: Path) -> None:
    """Records with no octets captured (a damaged capture), alone or among RoCE frames: counted as frames, as
    analyze counts them (the ICRC was read at a negative place in a batch of fewer than 4 octets: IndexError)."""
    from hostile import frames_of, write  # tests/hostile.py

    real = frames_of(CAPTURES[0].parent / "rxe_send_bw.pcap")[:40]
    for name, frames in (("empty", [(1_700_000_000_000_000_000, b"", 60)]),
                         ("mixed", [f if i % 7 else (f[0], b"", f[2]) for i, f in enumerate(real)])):
        path = tmp_path / f"{name}.pcap"
        write(path, frames)
        run = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(path), "--once", "-T", "json",
                              "--speed", "max"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        a = analyze(path)
        got = json.loads(run.stdout)
        assert got["totals"]["frames"] == len(frames)
        assert got["totals"]["rdma_packets"] == a.rdma_packets, (got["totals"], a.rdma_packets)


def test_a_replay_skips_a_pause_longer_than_max_gap(tmp_path: Path) -> None:
    """``top -r`` paces frames by their times; a pause longer than ``max_gap`` (a frame stamped decades ahead
    stalled the replay for decades) comes at once, and the pace goes on from there; shorter pauses are waited."""
    from hostile import write  # tests/hostile.py

    from rdmalab.capture.top_source import replay

    t0 = 1_700_000_000_000_000_000
    times = [t0, t0 + 2 * 10**9, t0 + 80 * 365 * 86400 * 10**9, t0 + 80 * 365 * 86400 * 10**9 + 3 * 10**9, t0 + 10**9]
    path = tmp_path / "gap.pcap"
    write(path, [(t, bytes(60), 60) for t in times])
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    got = [f for f in replay(path, 1.0, clock=lambda: now[0], sleep=sleep, wait_max=10.0) if f is not None]
    assert [f[0] for f in got] == times
    assert now[0] == pytest.approx(2 + 3)  # 2 s waited, the 80 years skipped, 3 s waited, a frame in the past at once
    now[0] = 0.0
    gen = replay(path, 1.0, clock=lambda: now[0], sleep=sleep, wait_max=10.0, max_gap=None)
    assert [next(gen) for _ in range(3)][1][0] == times[1] and now[0] >= 12  # (waited through: no end in sight)
    run = subprocess.run([sys.executable, "-m", "rdmalab", "top", "-r", str(path), "--once", "-T", "json",
                          "--max-gap", "1"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and json.loads(run.stdout)["totals"]["frames"] == 5, run.stderr
