"""The oracle: the stock OpenSM and infiniband-diags against ``ibsim -s NETFILE`` and against ``rdmalab ibsim
NETFILE`` print the same.

Per net, one module-scoped run of each simulator: OpenSM (``ibsim-run opensm -e -f LOG -s 0 -d2``; -d2 only
flushes its log) sweeps the fabric; once its log says SUBNET UP, ``sminfo`` says SMINFO_MASTER and the SM's
port counters stop moving (queried locally, which adds no traffic), the same commands run in the same order
against both: ``ibnetdiscover``, ``ibswitches``, ``perfquery -a`` of every switch (the traffic so far,
OpenSM's mostly, summed), ``perfquery -R`` and ``perfquery -x -R`` (both sets of counters cleared), ``ibroute`` and ``smpquery switchinfo`` of
every switch,
``smpquery nodeinfo``/``portinfo`` of every LID (16 of a big net), ``smpquery
nodedesc``/``pkeys``/``sl2vl``/``vlarb``/``guids`` of a switch and a CA, ``ibroute -M``, ``saquery`` from
another node (through the subnet to OpenSM's SA and back), then ``perfquery`` of those LIDs and
``perfquery -x`` of three CA ports (ibsim's ``-x -R`` leaves PortRcvPkts: see ``outputs``), ``perfquery -E``/``-D``/``--vloppackets``/``--vlxmitcounters`` of a switch port.  OpenSM's own traffic is compared as its sum: where parallel paths exist its
directed-route sweep picks one by its threads' timing, and two runs of stock ibsim on the 4-spine fat tree
split it differently between the spines (2082/895 and 2831/146 MADs sent on Spine1/Spine2 port 1); the
diags that follow are single-threaded, so after the reset their counters are compared port by port.
Skipped only when ibsim, opensm or the diags are absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdmalab.capture.reader import read
from rdmalab.wire.mad import MADHeader

NETS = Path("/usr/share/doc/ibsim-utils/net-examples")
HERE = Path(__file__).resolve().parent.parent / "data" / "ib"
TOOLS = ("ibsim", "ibsim-run", "opensm", "sminfo", "ibnetdiscover", "ibroute", "smpquery", "perfquery", "ibswitches")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")
ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "net.2sw2path4hca": (NETS / "net.2sw2path4hca", "Hca1", "Hca4"),
    "net.2sw2path4hca2port": (NETS / "net.2sw2path4hca2port", "Hca1", "Hca2"),
    "fattree_4x8": (HERE / "fattree_4x8.net", "H1", "H32"),
}


class Run:
    """One simulator (stock or ours) with OpenSM on it, and the diags' outputs."""

    def __init__(self, kind: str, net: Path, host: str, tmp: Path, last_ca: str) -> None:
        self.tmp = tmp
        self.last_ca = last_ca
        self.env = dict(os.environ, IBSIM_SOCKNAME=f"rdl{os.getpid()}{kind}{net.name}"[:40], SIM_HOST=host,
                        OSM_TMP_DIR=str(tmp), OSM_CACHE_DIR=str(tmp), PYTHONPATH=str(ROOT))
        self.env.pop("IBSIM_SERVER_NAME", None)
        self.procs: list[subprocess.Popen[bytes]] = []
        if kind == "stock":
            # ibsim reads its console on stdin and exits when it closes: a pipe kept open
            sim = subprocess.Popen(["ibsim", "-s", str(net)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=self.env)
        else:
            # -w: every MAD written to a capture as well (test_every_mad_is_captured_as_tshark_reads_it)
            self.capture = tmp / "mads.pcap"
            sim = subprocess.Popen([sys.executable, "-m", "rdmalab", "ibsim", "-w", str(self.capture), str(net)],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env)
            assert sim.stdout is not None
            line = sim.stdout.readline().decode()
            assert "ready" in line, line
        self.procs.append(sim)
        time.sleep(0.3)
        # -d2: OpenSM flushes its log after each message, so that "SUBNET UP" can be waited for
        osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(tmp / "osm.log"), "-s", "0", "-d2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        self.procs.append(osm)
        self.wait_up()

    def run(self, *cmd: str, host: str | None = None) -> str:
        env = self.env if host is None else dict(self.env, SIM_HOST=host)
        p = subprocess.run(["ibsim-run", *cmd], capture_output=True, env=env, timeout=30)
        out = p.stdout.decode() + p.stderr.decode()
        return re.sub(r"generated on .*", "generated on DATE", out)

    def wait_up(self) -> None:
        deadline = time.monotonic() + 30
        log = self.tmp / "osm.log"
        while "SUBNET UP" not in (log.read_text(errors="replace") if log.exists() else ""):
            assert time.monotonic() < deadline, "OpenSM never said SUBNET UP"
            time.sleep(0.2)
        while "SMINFO_MASTER" not in self.run("sminfo"):
            assert time.monotonic() < deadline, "OpenSM never became master"
            time.sleep(0.3)
        last, still = None, 0
        while True:  # the SM's own port, queried locally (no link crossed): settled when it stops moving
            now = self.run("perfquery")  # (for two readings in a row: on a loaded machine OpenSM's sweep
            still = still + 1 if now == last else 0  # may pause longer than one interval)
            if still >= 2:
                return
            assert time.monotonic() < deadline, "OpenSM's traffic never settled"
            last = now
            time.sleep(0.7)

    def outputs(self) -> dict[str, str]:
        out: dict[str, str] = {"ibnetdiscover": self.run("ibnetdiscover"), "ibswitches": self.run("ibswitches")}
        switch_lids = [int(m) for m in re.findall(r" lid (\d+) lmc", out["ibswitches"])]
        lids = sorted({int(m) for m in re.findall(r"\blid (\d+)", out["ibnetdiscover"])})
        assert switch_lids and lids, out
        # a CA port's LID -> its port number ("[2](10000b) ... # lid 7 lmc 0" in a Ca record); a switch: port 1
        port_of = {lid: 1 for lid in switch_lids}
        for num, lid in re.findall(r"^\[(\d+)\]\(\w+\).*?# lid (\d+) lmc", out["ibnetdiscover"], re.M):
            port_of[int(lid)] = int(num)
        ca_lids = [lid for lid in lids if lid not in switch_lids]
        assert set(port_of) == set(lids), (port_of, lids)
        # OpenSM's own traffic: where parallel paths exist, which one its directed-route sweep takes depends on
        # its threads' timing (two runs of stock ibsim split it differently between the spines), so its sum
        # over every switch port is compared; then every counter is cleared and what follows is compared
        # port by port
        total = [0, 0, 0, 0]
        # (every link here has a switch at one end at least, so the switches' ports see every MAD that crosses one)
        reads = [self.run("perfquery", "-a", str(lid)) for lid in switch_lids]
        for text in reads:
            for i, name in enumerate(("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")):
                m = re.search(rf"{name}:\.+(\d+)", text)
                assert m, text
                total[i] += int(m.group(1))
        out["OpenSM's traffic summed over all switch ports"] = str(total)
        if len(lids) > 16:  # a sample of the ports of a big net (the test's time)
            lids = lids[:8] + lids[-8:]
        # -R clears PortCounters only; -x -R clears PortCountersExtended, which would otherwise still hold the
        # sweep's traffic and with it the split between parallel paths (2,094 or 2,843 packets on a spine port)
        for reset in (("-R",), ("-x", "-R")):
            for lid in switch_lids:
                self.run("perfquery", *reset, "-a", str(lid))
            for lid in ca_lids:
                if lid in lids:
                    self.run("perfquery", *reset, str(lid), str(port_of[lid]))
        for lid in switch_lids:
            out[f"ibroute {lid}"] = self.run("ibroute", str(lid))
            out[f"smpquery switchinfo {lid}"] = self.run("smpquery", "switchinfo", str(lid))
        for lid in lids:
            out[f"smpquery nodeinfo {lid}"] = self.run("smpquery", "nodeinfo", str(lid))
            out[f"smpquery portinfo {lid} {port_of[lid]}"] = self.run("smpquery", "portinfo", str(lid), str(port_of[lid]))
        sw, ca = switch_lids[0], min(set(lids) - set(switch_lids))
        for attr in ("nodedesc", "pkeys", "sl2vl", "vlarb", "guids"):
            for lid in (sw, ca):
                out[f"smpquery {attr} {lid}"] = self.run("smpquery", attr, str(lid), "1")
        out[f"ibroute -M {sw}"] = self.run("ibroute", "-M", str(sw))
        # an SA query from another node: LID-routed to the SM's node, forwarded to OpenSM, answered back
        out["saquery (from the last CA)"] = self.run("saquery", host=self.last_ca)
        for lid in lids:
            out[f"perfquery {lid} {port_of[lid]}"] = self.run("perfquery", str(lid), str(port_of[lid]))
        # -x of three CA ports: stock ibsim's -x -R clears PortXmitPkts but not PortRcvPkts (measured: 814/815 on
        # a spine port before, 2/819 after), so a switch port's extended PortRcvPkts still holds the sweep's
        # traffic and its split between parallel paths (1322 or 2071 on Spine1 port 1 in two runs of the same
        # fat tree, its sum with Spine2's the same); a CA port receives the same SMPs whichever path they take
        for lid in [lid for lid in lids if lid in ca_lids][:3]:
            out[f"perfquery -x {lid} {port_of[lid]}"] = self.run("perfquery", "-x", str(lid), str(port_of[lid]))
        for opt in ("-E", "-D", "--vloppackets", "--vlxmitcounters"):  # detail and per-VL counters of a switch port
            out[f"perfquery {opt} {sw} 1"] = self.run("perfquery", opt, str(sw), "1")
        return out

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()


@pytest.fixture(scope="module", params=sorted(CASES))
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, str]]:
    net, host, last_ca = CASES[request.param]
    results = []
    for kind in ("stock", "ours"):
        run = Run(kind, net, host, tmp_path_factory.mktemp(f"{kind}-{request.param}"), last_ca)
        try:
            results.append(run.outputs())
        finally:
            run.close()
        if kind == "ours":
            CAPTURES[request.param] = run.capture
    return results[0], results[1]


#: per net, the capture `rdmalab ibsim -w` wrote of OpenSM's sweep and the diags' queries
CAPTURES: dict[str, Path] = {}


def test_discovery_routes_attributes_and_sa_equal(both: tuple[dict[str, str], dict[str, str]]) -> None:
    stock, ours = both
    assert "SMINFO" not in stock["ibnetdiscover"] and "Switch" in stock["ibnetdiscover"]
    assert "NodeRecord dump" in stock["saquery (from the last CA)"]
    keys = [k for k in stock if not k.startswith(("perfquery", "OpenSM's"))]
    assert [k for k in ours if not k.startswith(("perfquery", "OpenSM's"))] == keys
    for k in keys:
        assert ours[k] == stock[k], k


def test_smpquery_equal(both: tuple[dict[str, str], dict[str, str]]) -> None:
    stock, ours = both
    portinfo = [k for k in stock if k.startswith("smpquery portinfo")]
    assert portinfo and all("LinkState:" in stock[k] and "Active" in stock[k] for k in portinfo)
    for k in portinfo:
        assert ours[k] == stock[k], k


def test_opensm_traffic_total_equal(both: tuple[dict[str, str], dict[str, str]]) -> None:
    stock, ours = both
    key = "OpenSM's traffic summed over all switch ports"
    xmit_data, rcv_data, xmit_pkts, rcv_pkts = json.loads(stock[key])
    # (read port after port while the reads add traffic: not a snapshot, so transmitted and received differ)
    assert xmit_pkts > 100 and xmit_data == 72 * xmit_pkts and rcv_data == 72 * rcv_pkts
    assert ours[key] == stock[key]


def test_perfquery_equal(both: tuple[dict[str, str], dict[str, str]]) -> None:
    stock, ours = both
    perf = [k for k in stock if k.startswith("perfquery")]
    assert perf and any(re.search(r"PortXmitPkts:\.+[1-9]", stock[k]) for k in perf)
    assert not any("iberror" in stock[k] for k in perf)
    for k in perf:
        assert ours[k] == stock[k], k


def test_remote_mode_udp_equal() -> None:
    """Remote mode (UDP, IBSIM_SERVER_NAME/IBSIM_SERVER_PORT): ``ibsim -r -l PORT`` and ``rdmalab ibsim --port
    PORT`` answer a directed-route NodeInfo and PortInfo the same (no SM: the DR path works without LIDs)."""
    net = HERE / "fattree2.net"
    outs = []
    base = 20000 + os.getpid() % 1000 * 24  # each server takes its port and the 10 after it
    for kind, port in (("stock", base), ("ours", base + 12)):
        env = dict(os.environ, IBSIM_SERVER_NAME="127.0.0.1", IBSIM_SERVER_PORT=str(port), SIM_HOST="H1",
                   PYTHONPATH=str(ROOT))
        if kind == "stock":
            sim = subprocess.Popen(["ibsim", "-r", "-l", str(port), "-s", str(net)], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            time.sleep(0.5)
        else:
            sim = subprocess.Popen([sys.executable, "-m", "rdmalab", "ibsim", "--remote", str(net)],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            assert sim.stdout is not None and "udp port" in sim.stdout.readline().decode()
        try:
            got = []
            for cmd in (["smpquery", "-D", "nodeinfo", "0,1"], ["smpquery", "-D", "portinfo", "0,1,7", "0"]):
                p = subprocess.run(["ibsim-run", *cmd], capture_output=True, env=env, timeout=30)
                got.append(p.stdout.decode())
            outs.append(got)
        finally:
            sim.terminate()
            sim.wait(5)
            for f in (sim.stdin, sim.stdout):
                if f is not None:
                    f.close()
    assert "Guid:....." in outs[0][0] and "0x0000000000200002" in outs[0][0]
    assert outs[1] == outs[0]


def test_every_mad_is_captured_as_tshark_reads_it(both: tuple[dict[str, str], dict[str, str]],
                                                   request: pytest.FixtureRequest) -> None:
    """``rdmalab ibsim -w FILE``: every MAD of OpenSM's sweep and of the diags, in both directions, as a native
    IB packet in an ERF record; tshark reads as many packets, none malformed, SMPs (directed route and LID
    routed), SA and PerfMgt MADs among them, and rdmalab's fields agree with tshark's (crosscheck)."""
    cap = CAPTURES[request.node.callspec.params["both"]]
    mads = [cp for cp in read(cap)]
    classes = {cp.packet.get(MADHeader).mgmt_class for cp in mads}
    assert len(mads) > 200 and {0x81, 0x01, 0x03, 0x04} <= classes, (len(mads), classes)
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    lines = subprocess.run(["tshark", "-r", str(cap), "-T", "fields", "-e", "frame.number", "-e", "_ws.malformed"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) == len(mads) and not [ln for ln in lines if ln.split("\t")[1:] != [""]]
    out = subprocess.run([sys.executable, "-m", "rdmalab", "crosscheck", str(cap)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300).stdout
    assert f"{len(mads)} packets (tshark: {len(mads)})" in out and " 0 unexplained" in out, out[:2000]

