"""``rdmalab capture`` end to end (marked ``live``): regenerate one rxe and one siw_crc capture in the
lab VM into a temporary directory and check them as tests/capture/test_parity.py checks the
committed ones (field by field against tshark, every ICRC / MPA CRC32c verified), with the
counters dumped next to them.  The VM is the session's ``lab_vm``; ``make`` switches it to siw_crc
and back to rxe, so the other live tests find rxe1/rxe2 as agent.sh set them up.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rdmalab.capture import read
from rdmalab.live.captures import CAPTURES, check_capture, make
from rdmalab.live.siw import siw_module
from rdmalab.live.vm import VM, VMError
from rdmalab.wire.net import IPv4

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]


def test_regenerated_captures_match_tshark_and_counters(lab_vm: VM, tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark (Wireshark) is not installed; CI installs it")
    try:   # build prerequisites of siw (kernel sources, headers, gcc): the error names what to install
        siw_module(lab_vm.kernel or "", crc=True)
    except VMError as err:
        pytest.skip(f"cannot build siw_crc.ko here: {err}")
    names = ["rxe_write_bw", "siw_crc_rping"]
    made = make(names, tmp_path, vm=lab_vm, repo=ROOT, say=print, manifest=tmp_path / "MANIFEST.md")
    assert [p.name for p in made] == [f"{n}.pcap" for n in names]
    for path in made:
        c = check_capture(path)
        print(c.line())
        assert c.packets == c.tshark_packets and c.fields_compared > 0
        assert c.unexplained == 0, c.report
        assert c.ok, c.line()
    # rxe: every RoCEv2 packet's ICRC verified good; the WRITEs are there
    rxe = check_capture(made[0])
    assert rxe.crc is not None and set(rxe.crc) == {"good"} and rxe.crc["good"] >= 20
    ops = {p.packet.bth.opcode for p in read(made[0]) if p.packet.bth is not None}
    assert {0x06, 0x07, 0x08, 0x11} <= ops   # RC WRITE First/Middle/Last, ACK
    # siw_crc: the patched module negotiated MPA CRC, so every FPDU carries a good CRC32c
    siw = check_capture(made[1])
    assert siw.crc and siw.crc.get("good", 0) > 10 and not siw.crc.get("bad")
    # counters: both devices, before and after; rxe's sent/received packets moved with the run
    ctr = json.loads((tmp_path / "rxe_write_bw.counters.json").read_text())
    hw = {w: ctr[w]["hw_counters"] for w in ("before", "after")}
    assert set(hw["after"]) == {"rxe1", "rxe2"}
    client = 0x0A000102   # 10.0.1.2
    roce_to_server = sum(1 for p in read(made[0]) if p.packet.bth is not None
                         and (ip := p.packet.get(IPv4)) is not None and ip.src == client)
    assert hw["after"]["rxe1"]["rcvd_pkts"] - hw["before"]["rxe1"]["rcvd_pkts"] == roce_to_server
    text = (tmp_path / "MANIFEST.md").read_text()
    assert "`rxe_write_bw.pcap`" in text and "| siw_crc |" in text
    # the VM is back on rxe for the next live test
    r = lab_vm.run_job("rdma link show", capture=False)
    assert "rxe1" in r.stdout and "siw0" not in r.stdout
    assert CAPTURES["siw_crc_rping"].driver == "siw_crc"
