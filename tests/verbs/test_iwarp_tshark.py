"""The engine's iWARP on the wire, read by tshark: every field tshark shows for the MPA, DDP and RDMAP
layers of the engine's own capture equals what ``rdmalab decode`` (rdmalab.capture.reader) reads,
frame by frame.  tshark 4.0 finds iWARP on TCP by its heuristics only: ``-d tcp.port==7174,iwarp_mpa``
is refused ("Protocol iwarp_mpa isn't valid for layer type tcp.port"), so nothing needs it.  The
RPC-over-RDMA heuristic is disabled, as in tests/wire/test_iwarp.py: it claims Send payloads of
arbitrary bytes and reports them as malformed RPC.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tshark_util import requires_tshark, tshark_path

from rdmalab.capture.reader import read
from rdmalab.fabric import reset_default_fabric
from rdmalab.fabric.iwpair import IwPair
from rdmalab.verbs import enums as e
from rdmalab.verbs.mr import MR

pytestmark = [requires_tshark, pytest.mark.tshark]
PORT = 7174


@pytest.fixture(autouse=True)
def _default_fabric() -> Iterator[None]:
    yield
    reset_default_fabric()


def _capture(path: Path, crc: bool) -> None:
    """Send, Send with SE, Send with Invalidate, a 3-segment Write, a Read, then a Send that finds no receive."""
    pair = IwPair(capture=str(path), crc=crc, recvs=3, port=PORT)
    a, b = pair.a, pair.b
    a.mr.write(bytes(range(256)) * 16, 4096, 0)
    a.post(e.IBV_WR_SEND, 0, 33, wr_id=1)
    a.post(e.IBV_WR_SEND, 0, 7, wr_id=2, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED)
    victim = MR(b.cmid.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    a.post(e.IBV_WR_SEND_WITH_INV, 0, 5, wr_id=3, invalidate=victim.rkey)
    a.post(e.IBV_WR_RDMA_WRITE, 0, 4000, wr_id=4, remote=b.mr.buf + 100, rkey=b.mr.rkey)
    a.post(e.IBV_WR_RDMA_READ, 8192, 3001, wr_id=5, remote=b.mr.buf + 100, rkey=b.mr.rkey)
    assert len(pair.wait(a, 5)) == 5
    a.post(e.IBV_WR_SEND, 0, 9, wr_id=6)  # no receive left on b: Terminate (DDP, untagged, no buffer)
    pair.wait(a)
    pair.run()
    pair.close()
    assert b.engine.terminate_sent is not None


def _tshark(path: Path, *extra: str) -> list[dict[str, Any]]:
    exe = tshark_path()
    assert exe is not None
    out = subprocess.run([exe, "-r", str(path), "-T", "json", "--no-duplicate-keys", "--disable-protocol", "rpcordma",
                          *extra],
                         capture_output=True, check=True, timeout=120).stdout
    return list(json.loads(out))


def _flatten(obj: Any, into: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and not (isinstance(v, list) and v and isinstance(v[0], str)):
                _flatten(v, into)
            else:
                into[k] = v
    elif isinstance(obj, list):
        for x in obj:
            _flatten(x, into)


def _ws_int(value: str) -> int:
    if ":" in value or (len(value) == 2 and not value.isdigit() and not value.startswith("0x")):
        return int(value.replace(":", ""), 16)
    if value.startswith("0x"):
        return int(value, 16)
    return int(value)


# tshark leaves checked separately (CRC, pad, private data) or not header fields
_SEPARATE = {"iwarp_mpa.crc_check", "iwarp_mpa.crc", "iwarp_mpa.pad", "iwarp_mpa.privatedata"}


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_tshark_agrees_with_rdmalab_decode_field_by_field(tmp_path: Path, crc: bool) -> None:
    path = tmp_path / "engine-iwarp.pcap"
    _capture(path, crc)
    frames = _tshark(path)
    ours = {cp.frame_number: cp for cp in read(path)}
    assert len(ours) == len(frames)
    compared = 0
    kinds: set[str] = set()
    for n, cp in ours.items():
        layers = frames[n - 1]["_source"]["layers"]
        ws: dict[str, Any] = {}
        _flatten({k: v for k, v in layers.items() if k.startswith("iwarp")}, ws)
        if not cp.pdus:
            assert not ws, f"frame {n}: tshark sees iWARP ({sorted(ws)[:3]}) where rdmalab sees none"
            continue
        assert len(cp.pdus) == 1, f"frame {n}: one PDU per segment expected"
        pkt = cp.pdus[0]
        kinds.add(pkt.info.split(" STag")[0].split(" QN")[0])
        mine: dict[str, int] = {}
        for layer in pkt.layers:
            mine.update(layer.header.ws_fields())
        assert ws, f"frame {n}: rdmalab decodes {pkt.info!r}, tshark shows no iWARP"
        for name, value in ws.items():
            if name in _SEPARATE or not isinstance(value, str):
                continue
            assert name in mine, f"frame {n} ({pkt.info}): tshark has {name}={value}, rdmalab does not"
            assert mine[name] == _ws_int(value), f"frame {n}: {name}: tshark {value}, rdmalab {mine[name]:#x}"
            compared += 1
        if "iwarp_mpa.crc_check" in ws:  # tshark shows the CRC field's bytes read big-endian
            assert _ws_int(ws["iwarp_mpa.crc_check"]) == int.from_bytes(pkt.crc.to_bytes(4, "little"), "big")
            assert pkt.crc_status == ("good" if crc else "not checked") or (not crc and pkt.crc == 0)
        if "iwarp_mpa.privatedata" in ws:
            assert bytes.fromhex(ws["iwarp_mpa.privatedata"].replace(":", "")) == pkt.private_data
        if "data" in layers and "data.data" in layers["data"]:
            assert bytes.fromhex(layers["data"]["data.data"].replace(":", "")) == pkt.payload
    assert {"MPA Request Rev 2", "MPA Reply Rev 2", "Send", "Send with Solicited Event", "Send with Invalidate", "RDMA Write",
            "RDMA Read Request", "RDMA Read Response", "Terminate"} <= {k.split(" IRD")[0].split(" [")[0]
                                                                      for k in kinds}, kinds
    assert compared > 150


@pytest.mark.parametrize("crc", [False, True], ids=["crc-off", "crc-on"])
def test_tshark_finds_no_bad_crc_and_no_malformed_frame(tmp_path: Path, crc: bool) -> None:
    path = tmp_path / "engine-iwarp.pcap"
    _capture(path, crc)
    exe = tshark_path()
    assert exe is not None
    out = subprocess.run([exe, "-r", str(path), "--disable-protocol", "rpcordma", "-Y",
                          "_ws.malformed || _ws.expert.severity >= error"],
                         capture_output=True, check=True, timeout=120, text=True).stdout
    assert out.strip() == ""


def test_tshark_checks_every_crc32c_of_the_engine_as_good(tmp_path: Path) -> None:
    path = tmp_path / "engine-iwarp.pcap"
    _capture(path, True)
    exe = tshark_path()
    assert exe is not None
    text = subprocess.run([exe, "-r", str(path), "--disable-protocol", "rpcordma", "-V"], capture_output=True,
                          check=True, timeout=120, text=True).stdout
    fpdus = sum(1 for cp in read(path) for p in cp.pdus if p.crc_kind == "crc32c" and p.crc_expected is not None)
    assert fpdus > 10
    assert text.count("(Good CRC32)") == fpdus and "Bad CRC" not in text
