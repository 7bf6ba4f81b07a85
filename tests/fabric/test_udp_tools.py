"""``rdmalab pingpong`` and ``rdmalab perftest`` against each other, across a veth pair between two
network namespaces on this machine (no kernel rxe needed; the kernel one is the VM matrix,
``tests/live/test_interop.py``), and their refusals of options they do not support.

The namespace tests need root (``ip netns``, raw sockets); they skip, saying so, elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (two network namespaces joined by a veth pair)")
    tag = f"rdl{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        ip("netns", "add", a)
        ip("netns", "add", b)
        ip("link", "add", f"{tag}x", "type", "veth", "peer", "name", f"{tag}y")
        ip("link", "set", f"{tag}x", "netns", a)
        ip("link", "set", f"{tag}y", "netns", b)
        ip("-n", a, "addr", "add", "10.98.0.1/24", "dev", f"{tag}x")
        ip("-n", b, "addr", "add", "10.98.0.2/24", "dev", f"{tag}y")
        for ns, dev in ((a, f"{tag}x"), (b, f"{tag}y")):
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)
        pytest.skip(f"cannot set up network namespaces here: {exc.stderr.decode().strip()}")
    yield a, b
    subprocess.run(["ip", "netns", "del", a], capture_output=True)
    subprocess.run(["ip", "netns", "del", b], capture_output=True)


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
    from rdmalab.live.perftest import compute_report, duration_report, sample_window

    assert sample_window(2) == (0.0, 2.0) and sample_window(5) == (1.0, 4.0) and sample_window(8) == (2.0, 6.0)
    r = duration_report(4096, 300, 3.0, False)
    assert (r.iters, r.bw_peak) == (300, 0.0) and abs(r.bw_avg - 4096 * 300 / 3.0 / 0x100000) < 1e-9
    # noPeak: the average from the first post to the last completion, the peak printed as 0
    r = compute_report(4096, [10.0], [12.0], 1, False, peak=False, count=100)
    assert r.bw_peak == 0.0 and abs(r.msg_rate - 100 / 2.0 / 1e6) < 1e-12
