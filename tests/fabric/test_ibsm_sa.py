"""The SM's SA (PathRecord) and its capture: answered in-process, as MADs, to the stock saquery and
sminfo; every SMP and SA MAD written to a capture that tshark decodes as InfiniBand, 0 malformed."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import threading
from pathlib import Path

import pytest
from ibsm_util import ibsim, net_file, netdiscover_ports, requires_diags, requires_ibsim, requires_opensm, wait_master
from tshark_util import requires_tshark

from rdmalab.capture.crosscheck import crosscheck
from rdmalab.capture.reader import read
from rdmalab.fabric.ibsim_client import IBSimClient
from rdmalab.fabric.ibsm import SubnetManager
from rdmalab.fabric.ibsm_sa import SAError, SubnetAdministrator, serve
from rdmalab.wire.mad import METHOD_GET, METHOD_GET_TABLE, MADHeader
from rdmalab.wire.sa import (
    ATTR_PATH_RECORD,
    PR_DLID,
    PR_SLID,
    SA_STATUS_NO_RECORDS,
    STATUS_UNSUPPORTED_ATTR,
    PathRecord,
    SAMad,
    sa_request,
)
from rdmalab.wire.smp import ATTR_NODE_INFO, ATTR_PORT_INFO, SMP, NodeInfo, PortInfo

pytestmark = [requires_ibsim]


def _saquery_fields(text: str) -> dict[str, str]:
    """The first record ``saquery -p`` prints: field name -> value text."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s*(\w+)\.{2,}(\S+)", text, re.M)}


@requires_diags
def test_path_records_in_process_as_mads_and_to_the_stock_saquery(tmp_path: Path) -> None:
    with ibsim(net_file("fattree-2x4.net"), tmp_path) as sim, \
            IBSimClient("Hca1", sockname=sim.sockname, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
        sa = SubnetAdministrator(sm)
        cas = [p for p in sm.lids.values() if not sm.nodes[p.node_guid].is_switch]
        # in-process: every CA pair has a path whose hops are those of the SM's tables
        for s in cas:
            for d in cas:
                if s is not d:
                    path = sa.path(s.lid, d.lid)
                    assert (path.record.slid, path.record.dlid) == (s.lid, d.lid)
                    assert path.hops == sm.hops(s, d) and path.hops in (2, 4)  # same leaf / across spines
                    assert path.record.sgid & (2**64 - 1) == s.guid and path.record.dgid & (2**64 - 1) == d.guid
        with pytest.raises(SAError, match="no port has LID 999"):
            sa.path(cas[0].lid, 999)

        # as MADs: Get and GetTable with SLID/DLID; an unknown DLID, an unsupported attribute
        src, dst = cas[0], cas[-1]
        query = PathRecord(slid=src.lid, dlid=dst.lid).encode()
        got = SAMad.decode(sa.answer(sa_request(METHOD_GET_TABLE, ATTR_PATH_RECORD, query, PR_SLID | PR_DLID, tid=9)))
        assert (got.mad.method, got.mad.status, got.mad.tid) == (0x92, 0, 9)
        records = [PathRecord.decode(r) for r in got.records()]
        assert records == [sa.path(src.lid, dst.lid).record]
        one = SAMad.decode(sa.answer(sa_request(METHOD_GET, ATTR_PATH_RECORD, query, PR_SLID | PR_DLID)))
        assert one.mad.method == 0x81 and PathRecord.decode(one.data[:64]) == records[0]
        none = SAMad.decode(sa.answer(sa_request(METHOD_GET_TABLE, ATTR_PATH_RECORD,
                                                 PathRecord(slid=src.lid, dlid=999).encode(), PR_SLID | PR_DLID)))
        assert none.mad.status == SA_STATUS_NO_RECORDS
        other = SAMad.decode(sa.answer(sa_request(METHOD_GET, 0x0011, b"", 0)))
        assert other.mad.status == STATUS_UNSUPPORTED_ATTR

        # the stock saquery, on another node, asks our SA through ibsim and prints our record
        stop = threading.Event()
        server = threading.Thread(target=serve, args=(sm, client, stop))
        server.start()
        try:
            text = sim.run("Hca5", "saquery", "-p", "--src-to-dst", f"{src.lid}:{dst.lid}")
        finally:
            stop.set()
            server.join()
        assert text.count("PathRecord dump") == 1, text
        shown = _saquery_fields(text)
        want = records[0]
        assert int(shown["dlid"]) == want.dlid and int(shown["slid"]) == want.slid
        assert int(ipaddress.IPv6Address(shown["dgid"])) == want.dgid
        assert int(ipaddress.IPv6Address(shown["sgid"])) == want.sgid
        assert int(shown["mtu"], 16) == 0x80 | want.mtu  # selector 2 ("exactly") in the top bits
        assert int(shown["rate"], 16) == 0x80 | want.rate
        assert int(shown["pkey"], 16) == 0xFFFF


@requires_diags
@requires_tshark
@pytest.mark.tshark
def test_every_smp_and_sa_mad_decodes_in_tshark(tmp_path: Path) -> None:
    with ibsim(net_file("net.2sw2path4hca"), tmp_path) as sim, \
            IBSimClient("Hca1", sockname=sim.sockname, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
        stop = threading.Event()
        server = threading.Thread(target=serve, args=(sm, client, stop))
        server.start()
        try:
            sim.run("Hca2", "sminfo")
            sim.run("Hca2", "saquery", "-p", "--src-to-dst", "1:6")
        finally:
            stop.set()
            server.join()
    cap = tmp_path / "sm.pcap"
    n = sm.write_capture(cap)
    classes = [MADHeader.decode(e.mad).mgmt_class for e in sm.events]
    assert n == len(sm.events) and {0x81, 0x01, 0x03} <= set(classes)  # DR SMPs, LID-routed SMInfo, SA

    fields = ["infiniband.lrh.vl", "infiniband.lrh.dlid", "infiniband.bth.destqp", "infiniband.mad.mgmtclass",
              "infiniband.mad.method", "infiniband.mad.attributeid", "infiniband.pathrecord.dlid",
              "infiniband.nodeinfo.nodeguid", "infiniband.portinfo.lid", "_ws.malformed"]
    out = subprocess.run(["tshark", "-n", "-r", str(cap), "-T", "fields", *[a for f in fields for a in ("-e", f)]],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    rows = [line.split("\t") for line in out]
    assert len(rows) == n
    assert [r[-1] for r in rows if r[-1]] == []  # 0 malformed
    for e, (vl, dlid, qp, mclass, method, attr, pr_dlid, guid, lid, _) in zip(sm.events, rows, strict=True):
        hdr = MADHeader.decode(e.mad)
        assert (int(mclass, 16), int(method, 16), int(attr, 16)) == (hdr.mgmt_class, hdr.method, hdr.attr_id)
        assert int(vl, 0) == (0 if hdr.mgmt_class == 0x03 else 15)
        assert int(qp, 16) == (1 if hdr.mgmt_class == 0x03 else 0)
        if hdr.mgmt_class == 0x81:
            assert int(dlid, 0) == 0xFFFF  # directed route: the permissive LID
        if hdr.mgmt_class == 0x81 and hdr.attr_id == ATTR_NODE_INFO:
            assert int(guid, 0) == NodeInfo.decode(SMP.decode(e.mad).data).node_guid
        if hdr.mgmt_class == 0x81 and hdr.attr_id == ATTR_PORT_INFO:
            assert int(lid, 0) == PortInfo.decode(SMP.decode(e.mad).data).lid
        if hdr.mgmt_class == 0x03 and hdr.method == 0x92:
            assert int(pr_dlid, 0) == 6  # tshark reads the PathRecord we answered
    # rdmalab's own reader finds the same packets whole: MAD headers, ICRC and VCRC good
    got = list(read(cap))
    assert len(got) == n
    assert [cp.packet.problems for cp in got] == [[]] * n
    assert {cp.packet.crc_status for cp in got} == {cp.packet.vcrc_status for cp in got} == {"good"}
    assert [cp.packet[MADHeader].tid for cp in got] == [MADHeader.decode(e.mad).tid for e in sm.events]
    # it decodes the SMP fields, attributes and PathRecords as tshark does, field by field and byte by byte
    layers = {type(layer.header).__name__ for cp in got for layer in cp.packet.layers}
    assert {"SMPDirectedFields", "SMPLIDFields", "SMPPaths", "NodeInfo", "SwitchInfo", "PortInfo", "SMInfo",
            "SAHeader", "PathRecord"} <= layers
    report = crosscheck(cap)
    assert report.packets == report.wireshark_packets == n and report.fields_compared > 50 * n
    assert not report.unexplained and not report.explained, report.text()


@requires_diags
@requires_opensm
def test_our_path_records_are_opensms(tmp_path: Path) -> None:
    """The stock saquery asks our SA, then OpenSM's SA on the same net (in a fresh ibsim), for the
    same pairs of ports (by GUID): every field of the records it prints is the same, LIDs mapped."""
    net = net_file("fattree-2x4.net")
    pairs = [(0x100001, 0x100003), (0x100001, 0x10000D), (0x10000F, 0x100007)]  # same leaf; across spines
    with ibsim(net, tmp_path) as sim, IBSimClient("Hca1", sockname=sim.sockname, issm=True) as client:
        sm = SubnetManager(client)
        sm.run()
        lids = {p.guid: lid for lid, p in sm.lids.items()}
        stop = threading.Event()
        server = threading.Thread(target=serve, args=(sm, client, stop))
        server.start()
        try:
            ours = [_saquery_fields(sim.run("Hca5", "saquery", "-p", "--src-to-dst", f"{lids[s]}:{lids[d]}"))
                    for s, d in pairs]
        finally:
            stop.set()
            server.join()
    with ibsim(net, tmp_path) as sim:
        osm = subprocess.Popen(["ibsim-run", "opensm", "-e", "-f", str(tmp_path / "osm.log"), "-s", "0"],
                               env=sim.env("Hca1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_master(sim, "Hca2")
            _, olids, _ = netdiscover_ports(sim.run("Hca2", "ibnetdiscover", "-p"))
            theirs = [_saquery_fields(sim.run("Hca5", "saquery", "-p", "--src-to-dst", f"{olids[s]}:{olids[d]}"))
                      for s, d in pairs]
        finally:
            osm.terminate()
            osm.wait(timeout=10)
    for (s, d), mine, osm_record in zip(pairs, ours, theirs, strict=True):
        assert len(mine) >= 15 and set(mine) == set(osm_record)
        assert (int(mine["slid"]), int(mine["dlid"])) == (lids[s], lids[d])
        assert (int(osm_record["slid"]), int(osm_record["dlid"])) == (olids[s], olids[d])
        same = {k: v for k, v in mine.items() if k not in ("slid", "dlid")}
        assert same == {k: v for k, v in osm_record.items() if k not in ("slid", "dlid")}, (hex(s), hex(d))
