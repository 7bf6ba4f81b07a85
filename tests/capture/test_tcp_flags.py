"""Each TCP flag bit as its own field (``tcp.flags.syn``, ``tcp.flags.reset`` ...), as Wireshark names
them: in ``-T fields`` and display filters, on the columnar and the per-packet paths, against tshark."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import dpkt
import pytest

from rdmalab.cli import main
from rdmalab.wire.net import TCP

ROOT = Path(__file__).resolve().parents[2]
CAPS = ROOT / "captures"
FLAGS = [name for name, _bit in TCP.FLAG_FIELDS]
FILTERS = ["tcp.flags.syn == 1", "tcp.flags.reset == 1 || tcp.flags.fin == 1", "tcp.flags.push && tcp.flags.ack == 1",
           "!tcp.flags.ack", "tcp.flags.ece == 1 or tcp.flags.cwr == 1", "tcp.flags.urg == 1", "tcp.flags.ae == 1"]

requires_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                     reason="tshark (Wireshark) is not installed; CI installs it")


def _every_flag(tmp_path: Path) -> Path:
    """One segment a flag bit (the nine of TCP's flags field, AE the ninth), then all of them."""
    out = tmp_path / "flags.pcap"
    with out.open("wb") as f:
        w = dpkt.pcap.Writer(f)
        for i, bits in enumerate([1 << k for k in range(9)] + [0x1FF, 0]):
            tcp = dpkt.tcp.TCP(sport=40000 + i, dport=80, seq=1000, ack=7 if bits & 0x10 else 0, data=b"x" * i)
            tcp._off_flags = 5 << 12 | bits  # data offset 5 words; the ninth bit beside it (AE)
            ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), p=dpkt.ip.IP_PROTO_TCP, data=tcp)
            ip.len = 20 + len(bytes(tcp))
            eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
            w.writepkt(bytes(eth), ts=1.0 + i)
    return out


def _ours(args: list[str], capsys: Any) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def _tshark(args: list[str]) -> str:
    return subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True).stdout


def _captures(tmp_path: Path) -> list[Path]:
    return [_every_flag(tmp_path), CAPS / "siw_write_bw.pcap", CAPS / "siw_crc_rping.pcap", CAPS / "rxe_rc_pingpong.pcap"]


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", ["", "--no-columnar"])
def test_flag_fields_as_tshark(path: str, tmp_path: Path, capsys: Any) -> None:
    fields = [x for name in ["frame.number", "tcp.flags", *FLAGS] for x in ("-e", name)]
    for cap in _captures(tmp_path):
        ours = _ours(["decode", "-r", str(cap), "-T", "fields", *fields, *([path] if path else [])], capsys)
        assert ours == _tshark(["-r", str(cap), "-T", "fields", *fields]), cap.name
        assert ours.count("\t1") > 0


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("path", ["", "--no-columnar"])
def test_flag_filters_as_tshark(path: str, tmp_path: Path, capsys: Any) -> None:
    for cap in _captures(tmp_path):
        for flt in FILTERS:
            ours = _ours(["decode", "-r", str(cap), "-Y", flt, "-T", "fields", "-e", "frame.number",
                          *([path] if path else [])], capsys)
            assert ours == _tshark(["-r", str(cap), "-Y", flt, "-T", "fields", "-e", "frame.number"]), (cap.name, flt)
    crafted = _ours(["decode", "-r", str(_every_flag(tmp_path)), "-Y", "tcp.flags.ae == 1", "-T", "fields", "-e",
                     "frame.number"], capsys)
    assert crafted.split() == ["9", "10"]  # the case is one: the ninth bit alone, then every bit
