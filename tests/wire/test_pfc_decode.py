"""PFC frames in the packet decoder and `rdmalab decode`, against tshark's MAC Control dissector."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rdmalab.capture import frame_fields, read
from rdmalab.capture.reader import write_pcap
from rdmalab.cli import main
from rdmalab.wire.frame import decode_ethernet
from rdmalab.wire.pfc import PFC, encode_pfc_frame


def test_decoder_gives_the_pfc_layer_and_a_summary() -> None:
    pkt = decode_ethernet(encode_pfc_frame({3: 0xFFFF, 5: 0}))
    pfc = pkt.get(PFC)
    assert pfc is not None and pfc.paused() == {3: 0xFFFF, 5: 0}
    assert pkt.encap == "pfc"
    assert pkt.summary() == "PFC(p3=65535, p5=XON)"


def test_reserved_high_octet_of_the_enable_vector_is_reported() -> None:
    frame = bytearray(encode_pfc_frame({0: 1}))
    frame[16] = 0x01  # high octet of the class-enable vector
    pkt = decode_ethernet(bytes(frame), lenient=True)
    assert any("enable" in str(p) and "reserved" in str(p) for p in pkt.problems)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_pfc_fields_agree_with_tshark(tmp_path, capsys) -> None:
    frames = [encode_pfc_frame({3: 0xFFFF}), encode_pfc_frame({0: 7, 7: 0}), encode_pfc_frame({3: 0})]
    path = tmp_path / "pfc.pcap"
    write_pcap(path, [(i * 1e-6, f) for i, f in enumerate(frames)])
    names = ["frame.number", "macc.opcode", "macc.cbfc.enbv"] + [f"macc.cbfc.pause_time.c{i}" for i in range(8)]
    shark = subprocess.run(["tshark", "-r", str(path), "-T", "fields", *sum((["-e", n] for n in names), [])],
                           capture_output=True, text=True, check=True).stdout
    assert main(["decode", "-r", str(path), "-T", "fields", *sum((["-e", n] for n in names), [])]) == 0
    ours = capsys.readouterr().out
    assert ours == shark
    assert main(["decode", "-r", str(path), "-Y", "macc.cbfc.pause_time.c3 == 65535"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "MAC CTRL" in lines[0] and "PFC(p3=65535)" in lines[0]
    fields = frame_fields(next(iter(read(path))))
    assert fields["macc.cbfc.pause_time.c3"] == 0xFFFF
