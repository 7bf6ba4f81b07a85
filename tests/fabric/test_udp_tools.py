"""``rdmalab pingpong`` and ``rdmalab perftest`` against each other, across a veth pair between two
network namespaces on this machine (no kernel rxe needed; the kernel one is the VM matrix,
``tests/live/test_interop.py``), and their refusals of options they do not support.

The namespace tests need root (``ip netns``, raw sockets); they skip, saying so, elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_util import veth_namespaces

from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, words", [
    (["pingpong", "rc", "-o"], "-o/--odp (on-demand paging) is not supported"),
    (["pingpong", "uc", "-t", "10.0.0.1"], "-t/--ts (completion timestamps) is not supported"),
    (["pingpong", "rc", "-q", "4"], "-q/--num-qp is an option of srq only"),
    (["perftest", "write", "-b"], "-b (bidirectional traffic) is not supported"),
    (["perftest", "read", "-z"], "-z (RDMA CM exchange) is not supported"),
    (["perftest", "send", "-q", "2"], "-q 2: the soft engine's perftest runs one QP"),
    (["perftest", "atomic", "-a"], "-a (all sizes) is supported for write and read, not atomic"),
    (["perftest", "atomic", "-A", "SWAP"], "-A SWAP: the atomic type is CMP_AND_SWAP or FETCH_AND_ADD"),
    (["perftest", "write", "-D", "1", "-n", "5"], "-D and -n exclude each other"),
    (["perftest", "write", "-n", "3"], "between 5 and 100000000"),
])
def test_unsupported_options_get_a_message(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_unknown_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pingpong", "xrc"])
    assert exc.value.code == 2
    assert "invalid choice: 'xrc'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def two_namespaces() -> Iterator[tuple[str, str]]:
    with veth_namespaces("rdl", "10.98.0") as pair:
        yield pair


def _pair(ns: tuple[str, str], args: list[str], port: int) -> tuple[str, str]:
    a, b = ns
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "rdmalab", *args, "-p", str(port)]
    srv = subprocess.Popen(["ip", "netns", "exec", a, *base], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env)
    time.sleep(0.3)
    cli = subprocess.run(["ip", "netns", "exec", b, *base, "10.98.0.1"], capture_output=True, text=True,
                         timeout=120, env=env)
    s_out, _ = srv.communicate(timeout=120)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + "\n---\n" + s_out
    return s_out, cli.stdout


@pytest.mark.parametrize("kind", ["rc", "uc", "ud", "srq"])
def test_pingpong_between_two_engines(two_namespaces: tuple[str, str], kind: str) -> None:
    port = 18515 + ["rc", "uc", "ud", "srq"].index(kind)
    srv, cli = _pair(two_namespaces, ["pingpong", kind, "-g", "1", "-n", "30", "-c"], port)
    size = 1024 if kind == "ud" else 4096
    for out in (srv, cli):
        assert f"{size * 30 * 2} bytes in " in out and "30 iters in " in out, out
        m = re.search(r"rdmalab: (\d+) messages received, (\d+) differ", out)
        assert m is not None and int(m.group(1)) >= 30 and m.group(2) == "0", out
        assert "invalid data" not in out


@pytest.mark.parametrize("verb", ["write", "read", "send", "atomic"])
def test_perftest_between_two_engines(two_namespaces: tuple[str, str], verb: str) -> None:
    port = 18600 + ["write", "read", "send", "atomic"].index(verb)
    opts = ["-n", "50"] if verb == "atomic" else ["-s", "8192", "-n", "50"]
    srv, cli = _pair(two_namespaces, ["perftest", verb, "-x", "1", *opts], port)
    size = 8 if verb == "atomic" else 8192
    line = re.compile(rf"^ {size}\s+50\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$", re.M)
    assert line.search(cli), cli
    assert line.search(srv), srv  # the client's figures, via perftest's report exchange (send: its own)
    assert "Waiting for client to connect" in srv


def test_perftest_send_by_duration_between_two_engines(two_namespaces: tuple[str, str]) -> None:
    # -D: the client sends for the duration, the server receives for the duration from its first
    # receive and keeps its queue full, so the client's last SENDs complete; perftest prints no peak
    srv, cli = _pair(two_namespaces, ["perftest", "send", "-x", "1", "-D", "1", "-s", "4096"], 18610)
    row = re.compile(r"^ 4096\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s*$", re.M)
    for out in (srv, cli):
        rows = row.findall(out)
        assert len(rows) == 1 and int(rows[0][0]) > 0 and rows[0][1] == "0.00" and float(rows[0][2]) > 0, out


def test_perftest_duration_report_follows_perftests_sample_window() -> None:
    from rdmalab.tools.perftest import compute_report, duration_report, sample_window

    assert sample_window(2) == (0.0, 2.0) and sample_window(5) == (1.0, 4.0) and sample_window(8) == (2.0, 6.0)
    r = duration_report(4096, 300, 3.0, False)
    assert (r.iters, r.bw_peak) == (300, 0.0) and abs(r.bw_avg - 4096 * 300 / 3.0 / 0x100000) < 1e-9
    # noPeak: the average from the first post to the last completion, the peak printed as 0
    r = compute_report(4096, [10.0], [12.0], 1, False, peak=False, count=100)
    assert r.bw_peak == 0.0 and abs(r.msg_rate - 100 / 2.0 / 1e6) < 1e-12


# ---------------------------------------------------------------------- perftest -R (rdma_cm mode)
RXE_CM = ROOT / "captures" / "rxe_write_bw_cm.pcap"  # ib_write_bw -R between two kernel rxe devices


def _control_sends(pcap: Path, client_ip: str) -> list[tuple[bool, int]]:
    """Every RC SEND Only in the capture: (sent by the client, UDP payload length less BTH and ICRC)."""
    import struct

    from rdmalab.capture.reader import records

    last = int(client_ip.rsplit(".", 1)[1])
    out = []
    for rec in records(pcap):
        d = bytes(rec.data)
        if len(d) > 42 and d[23] == 17 and d[42] == 0x04:  # UDP, BTH opcode RC SEND Only
            out.append((d[29] == last, struct.unpack(">H", d[38:40])[0] - 8 - 12 - 4))
    return out


def test_the_binary_key_record_reads_and_writes_as_rxes_perftest_does() -> None:
    from rdmalab.capture.reader import records
    from rdmalab.tools.perftest import DEST, decode_dest, encode_dest

    # frame 31: the client's record after the data connection (ib_write_bw -R on rxe, 10.0.0.2)
    raw = bytes(list(records(RXE_CM))[30].data)[54:54 + DEST.size]
    d = decode_dest(raw)
    assert (d.lid, d.out_reads, d.qpn, d.psn, d.rkey) == (0, 1, 0x23, 0x35A3B6, 0x16B7)
    assert d.vaddr == 0x5614F4403000 and d.gid == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2])
    assert encode_dest(d) == raw  # srqn 0, gid_index 1, the padding zero here


def _pair_cm(ns: tuple[str, str], args: list[str], port: int, pcap: Path) -> tuple[str, str]:
    a, b = ns
    tag = a[:-1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "rdmalab", "perftest", *args, "-R", "-p", str(port)]
    srv = subprocess.Popen(["ip", "netns", "exec", a, *base, "-d", f"{tag}x"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(1.0)
    cli = subprocess.run(["ip", "netns", "exec", b, *base, "-d", f"{tag}y", "--pcap", str(pcap), "10.98.0.1"],
                         capture_output=True, text=True, timeout=120, env=env)
    s_out, _ = srv.communicate(timeout=120)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + "\n---\n" + s_out
    return s_out, cli.stdout


@pytest.mark.parametrize("verb", ["write", "read", "send", "atomic"])
def test_perftest_rdma_cm_between_two_engines(two_namespaces: tuple[str, str], verb: str, tmp_path: Path) -> None:
    port = 18620 + ["write", "read", "send", "atomic"].index(verb)
    opts = ["-n", "20"] if verb == "atomic" else ["-s", "4096", "-n", "20"]
    srv, cli = _pair_cm(two_namespaces, [verb, *opts], port, tmp_path / "cli.pcap")
    size = 8 if verb == "atomic" else 4096
    line = re.compile(rf"^ {size}\s+20\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$", re.M)
    for out in (srv, cli):
        assert line.search(out) and " rdma_cm QPs\t : ON" in out and "Data ex. method : rdma_cm" in out, out
    assert "Waiting for client rdma_cm QP to connect" in srv
    if verb == "write":
        # the control QP's SENDs, in order and size, are those of ib_write_bw -R between two rxe devices
        assert _control_sends(tmp_path / "cli.pcap", "10.98.0.2") == _control_sends(RXE_CM, "10.0.0.2")


def test_perftest_rdma_cm_to_a_port_where_nothing_listens_says_so(two_namespaces: tuple[str, str]) -> None:
    # an engine server on 18698; the client asks for 18699, where nothing listens: the REJ, in words
    a, b = two_namespaces
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "rdmalab", "perftest", "write", "-R"]
    srv = subprocess.Popen(["ip", "netns", "exec", a, *base, "-d", f"{a[:-1]}x", "-p", "18698", "--timeout", "20"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        time.sleep(1.0)
        r = subprocess.run(["ip", "netns", "exec", b, *base, "-d", f"{a[:-1]}y", "-p", "18699", "10.98.0.1"],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        srv.kill()
        srv.communicate()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rejected by 10.98.0.1:18699: reason 8 (Invalid Service ID)" in r.stderr, r.stderr


def test_perftest_rdma_cm_without_a_linked_device_says_what_to_do(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (the raw socket the UDP carrier checks for first)")
    monkeypatch.setenv("RDMALAB_LINKS", "")
    monkeypatch.setenv("RDMALAB_LINK_FILE", "/nonexistent/links.json")
    assert main(["perftest", "write", "-R", "-n", "5", "10.98.0.1"]) == 1
    err = capsys.readouterr().err
    assert "-R needs a soft device on a network interface: give -d NETDEV" in err and "Traceback" not in err
