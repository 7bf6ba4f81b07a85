"""Helpers for the subnet manager tests: a stock ibsim per test, the stock diags, their output parsed.

Every simulator gets its own IBSIM_SOCKNAME, so that tests (and other runs on the machine) do not
share one; its stdin stays open (ibsim exits when stdin closes) until the test ends.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rdmalab.fabric.ibsim_client import IBSimClient, IBSimNotRunning

NET_EXAMPLES = Path("/usr/share/doc/ibsim-utils/net-examples")
DATA = Path(__file__).resolve().parent.parent / "data" / "ibsm"
_names = itertools.count()

requires_ibsim = pytest.mark.skipif(shutil.which("ibsim") is None or shutil.which("ibsim-run") is None,
                                    reason="ibsim (Debian: ibsim-utils) is not installed")
requires_diags = pytest.mark.skipif(shutil.which("ibnetdiscover") is None,
                                    reason="infiniband-diags is not installed")
requires_opensm = pytest.mark.skipif(shutil.which("opensm") is None, reason="opensm is not installed")


def net_file(name: str) -> Path:
    """A net file: ibsim's example of that name, or one of ours in tests/data/ibsm."""
    for where in (NET_EXAMPLES / name, DATA / name):
        if where.exists():
            return where
    pytest.skip(f"net file {name} is not installed (ibsim-utils' examples)")


class Sim:
    """A running ``ibsim -s NET``: its socket base name, and the stock tools run against it."""

    def __init__(self, net: Path, proc: subprocess.Popen[bytes], sockname: str, tmp: Path) -> None:
        self.net, self.proc, self.sockname, self.tmp = net, proc, sockname, tmp

    def env(self, node: str) -> dict[str, str]:
        return dict(os.environ, IBSIM_SOCKNAME=self.sockname, SIM_HOST=node, OSM_TMP_DIR=str(self.tmp),
                    OSM_CACHE_DIR=str(self.tmp))

    def run(self, node: str, *cmd: str, timeout: float = 20) -> str:
        """A stock tool under ibsim-run on ``node``; its output (a failure raises with its stderr)."""
        got = subprocess.run(["ibsim-run", *cmd], env=self.env(node), capture_output=True, text=True,
                             timeout=timeout)
        if got.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} on {node} exited {got.returncode}: {got.stderr.strip()}")
        return got.stdout


@contextmanager
def ibsim(net: Path, tmp: Path, *, udp_port: int | None = None) -> Iterator[Sim]:
    """``ibsim -s NET`` with a fresh socket name (or, with ``udp_port``, in remote mode: ``ibsim -r -l
    PORT``), up when entered (its control socket answers)."""
    sockname = f"rdmalab-ibsm-{os.getpid()}-{next(_names)}"
    env = dict(os.environ, IBSIM_SOCKNAME=sockname)
    log = open(tmp / f"{sockname}.log", "wb")  # noqa: SIM115
    remote = ["-r", "-l", str(udp_port)] if udp_port else []
    proc = subprocess.Popen(["ibsim", *remote, "-s", str(net)], stdin=subprocess.PIPE, stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                where = {"server": "127.0.0.1", "port": udp_port} if udp_port else {"sockname": sockname}
                IBSimClient(None, timeout=1.0, **where).close()  # type: ignore[arg-type]
                break
            except IBSimNotRunning:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"ibsim -s {net} did not start: "
                                         f"{(tmp / f'{sockname}.log').read_text()[-500:]}") from None
                time.sleep(0.05)
        yield Sim(net, proc, sockname, tmp)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.terminate()  # (ibsim does not notice its stdin closing while it waits on its sockets)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# ---------------------------------------------------------------------- the diags' output
_PORT = r"(SW|CA)\s+(\d+)\s+(\d+)\s+(0x[0-9a-f]+)"
_LINK = re.compile(rf"^{_PORT}\s+\S+\s+\S+\s+-\s+{_PORT}", re.M)
_ALONE = re.compile(rf"^{_PORT}\s", re.M)


def netdiscover_ports(text: str) -> tuple[dict[tuple[int, int], tuple[int, int]], dict[int, int], set[int]]:
    """``ibnetdiscover -p`` parsed: links ((GUID, port) -> (GUID, port), both ways; the GUID is the
    switch's, or the CA port's), port GUID -> LID, and the switch GUIDs."""
    links: dict[tuple[int, int], tuple[int, int]] = {}
    lids: dict[int, int] = {}
    switches: set[int] = set()
    for m in _ALONE.finditer(text):
        kind, lid, _port, guid = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4), 16)
        lids[guid] = lid
        if kind == "SW":
            switches.add(guid)
    for m in _LINK.finditer(text):
        a = (int(m.group(4), 16), int(m.group(3)))
        b = (int(m.group(8), 16), int(m.group(7)))
        links[a] = b
        links[b] = a
    return links, lids, switches


_ROUTE = re.compile(r"^0x([0-9a-f]+)\s+(\d+)\s+:\s+\((?:Channel Adapter|Switch) portguid 0x([0-9a-f]+)", re.M)


def ibroute_table(text: str) -> dict[int, tuple[int, int]]:
    """``ibroute`` parsed: LID -> (output port, destination port GUID)."""
    return {int(m.group(1), 16): (int(m.group(2)), int(m.group(3), 16)) for m in _ROUTE.finditer(text)}


def wait_master(sim: Sim, node: str, timeout: float = 20) -> str:
    """Poll ``sminfo`` until an SM answers as master; its line."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        got = subprocess.run(["ibsim-run", "sminfo"], env=sim.env(node), capture_output=True, text=True, timeout=10)
        last = got.stdout + got.stderr
        if "SMINFO_MASTER" in got.stdout:
            return got.stdout
        time.sleep(0.2)
    raise AssertionError(f"no master SM within {timeout} s: {last.strip()}")


@contextmanager
def rdmalab_ibsim(net: Path, tmp: Path) -> Iterator[Sim]:
    """``rdmalab ibsim NET`` (the lab's own simulator) with a fresh socket name, up when entered."""
    sockname = f"rdmalab-ibsm-rdm-{os.getpid()}-{next(_names)}"
    log = open(tmp / f"{sockname}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "ibsim", "--sockname", sockname, str(net)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                IBSimClient(None, sockname=sockname, timeout=1.0).close()
                break
            except IBSimNotRunning:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"rdmalab ibsim {net} did not start: "
                                         f"{(tmp / f'{sockname}.log').read_text()[-500:]}") from None
                time.sleep(0.05)
        yield Sim(net, proc, sockname, tmp)  # type: ignore[arg-type]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
