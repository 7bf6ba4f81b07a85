"""The tools over a soft iWARP device on the kernel's TCP (``links.use_interface`` of type siw,
rdmalab.fabric.tcpkernel), on loopback.

Two rdmalab processes talk iWARP (MPA, DDP, RDMAP) over a real TCP connection on 127.0.0.1: rping
both ways with its data checked, perftest ``-R`` write/read/send (send with iWARP's receive credits,
:class:`rdmalab.tools.perftest._Credits`), and what the options refuse.  The kernel siw side of the
same commands is tests/live/test_interop_iwarp.py.
"""

from __future__ import annotations

import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdmalab.cli import main

ROOT = Path(__file__).resolve().parents[2]
RDL = [sys.executable, "-m", "rdmalab"]


def _free_port() -> int:
    for _ in range(50):
        port = random.randrange(20000, 60000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def _wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the server ended early: {proc.communicate()}")
        # a listener in /proc/net/tcp (state 0A); connecting to see would be a client the server takes
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
        if any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == "0A" for r in rows):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout} s")


def _pair(server: list[str], client: list[str], port: int) -> tuple[subprocess.CompletedProcess[str], str]:
    srv = subprocess.Popen([*RDL, *server], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        _wait_listening(port, srv)
        cli = subprocess.run([*RDL, *client], capture_output=True, text=True, timeout=120, cwd=ROOT)
        out, _ = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
    # (the client's side too: a server left waiting says only that nothing came)
    assert srv.returncode == 0, f"{out}\n--- the client (status {cli.returncode}):\n{cli.stdout}{cli.stderr}"
    return cli, out


def test_rping_between_two_engines_over_kernel_tcp() -> None:
    port = _free_port()
    common = ["-v", "-S", "64", "-p", str(port), "--netdev", "lo", "--transport", "iwarp"]
    cli, srv = _pair(["rping", "-s", "-a", "127.0.0.1", *common], ["rping", "-c", "-a", "127.0.0.1", "-V", "-C", "4",
                                                                    "--mpa-crc", *common], port)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    pings = re.findall(r"^ping data: (rdma-ping-\d+: .*)$", cli.stdout, re.M)
    assert [p.split(":")[0] for p in pings] == [f"rdma-ping-{i}" for i in range(4)], cli.stdout
    assert re.findall(r"^server ping data: (.*)$", srv, re.M) == pings, srv


def test_rping_between_two_engines_on_a_siw_link(monkeypatch: pytest.MonkeyPatch) -> None:
    # no --netdev: both find the linked device siw0 (`rdmalab link add siw0 type siw netdev lo`, here for
    # the run by RDMALAB_LINKS) with get_device_list() and rdma_cm, as a pyverbs program would
    monkeypatch.setenv("RDMALAB_LINKS", "siw0=siw:lo")
    port = _free_port()
    common = ["-v", "-S", "64", "-p", str(port), "-a", "127.0.0.1"]
    cli, srv = _pair(["rping", "-s", *common], ["rping", "-c", "-V", "-C", "3", *common], port)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    pings = re.findall(r"^ping data: (rdma-ping-\d+: .*)$", cli.stdout, re.M)
    assert [p.split(":")[0] for p in pings] == [f"rdma-ping-{i}" for i in range(3)], cli.stdout
    assert re.findall(r"^server ping data: (.*)$", srv, re.M) == pings, srv


@pytest.mark.parametrize("verb", ["write", "read", "send"])
def test_perftest_rdma_cm_over_iwarp_between_two_engines(verb: str) -> None:
    port = _free_port()
    # -n 20: for send, rx_depth 20 and a credit every 6 receives; the sender may post SEND n only while
    # n + 1 - credit < 20, so its last one waits for a credit: it cannot finish without them
    opts = ["perftest", verb, "-R", "-n", "20", "-s", "4096", "-p", str(port), "-d", "lo", "--transport", "iwarp"]
    cli, srv = _pair(opts, [*opts, "127.0.0.1"], port)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    for text in (cli.stdout, srv):
        assert "Transport type : IW" in text and "GID index       : 0" in text, text
        assert re.search(r"^ 4096\s+20\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$", text, re.M), text
    if verb == "send":
        assert "RX depth        : 20" in srv, srv


def test_a_connect_where_nothing_listens_is_refused_in_words() -> None:
    port = _free_port()
    r = subprocess.run([*RDL, "rping", "-c", "-a", "127.0.0.1", "-p", str(port), "-C", "1", "--netdev", "lo",
                        "--transport", "iwarp"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1
    assert f"rejected by 127.0.0.1:{port}: ECONNREFUSED (Connection refused)" in r.stderr, r.stderr


@pytest.mark.parametrize(("argv", "words"), [
    (["perftest", "write", "--transport", "iwarp"], "--transport iwarp needs -R"),
    (["perftest", "atomic", "-R", "--transport", "iwarp"], "iWARP has no atomics"),
    (["perftest", "write", "-R", "--transport", "roce", "--mpa-crc"], "--mpa-crc is an iWARP option"),
    (["rping", "-c", "-a", "127.0.0.1", "--transport", "roce", "--mpa-crc"], "--mpa-crc is an iWARP option"),
    (["rping", "-c", "-a", "127.0.0.1", "--mpa-crc"], "--mpa-crc goes with the device it makes"),
    (["rping", "-c", "-a", "127.0.0.1", "--netdev", "nosuchif0", "--transport", "iwarp"],
     "a soft iWARP device on nosuchif0"),
])
def test_what_the_iwarp_options_refuse(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_unreachable_says_why_on_both_transports() -> None:
    # RoCE: the CM's retries; iWARP: the TCP connection that failed (no "? tries over 0.0 s")
    from rdmalab.verbs.cmid import unreachable_text
    assert unreachable_text({"message": "REQ", "tries": 16, "waited_ms": 98304}) == \
        "no answer to the REQ after 16 tries over 98.3 s"
    text = unreachable_text({"why": "connect to 10.0.0.9:7174: EHOSTUNREACH"})
    assert text == "no connection: connect to 10.0.0.9:7174: EHOSTUNREACH"
