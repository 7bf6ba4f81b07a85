"""Damaged frames of the link types the columns read besides Ethernet (Linux cooked v1 and v2, ERF
Ethernet records) and of Ethernet itself: random octets changed, some records cut (never below the
link header), and the columns' summary lines and fields must be the per-packet decoder's."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from test_cooked_columns import cooked_copy
from test_erf_columns import erf_copy
from tshark_cli import decode

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ["frame.number", "frame.len", "frame.cap_len", "sll.pkttype", "sll.etype", "ip.src", "ip.proto", "udp.length",
          "tcp.seq", "tcp.len", "infiniband.bth.psn", "infiniband.bth.opcode", "rdmalab.encap", "rdmalab.icrc.status",
          "tcp.window_size", "udp.stream", "tcp.stream", "iwarp_ddp.stag", "rdmalab.payload.len"]
SOURCES = ["rxe_write_bw_loss.pcap", "siw_crc_write_bw.pcap", "rxe_rping.pcap", "lo_icmp_unreachable.pcap",
           "synthetic_all_opcodes_rocev1.pcap"]
HEADER = {"eth": 14, "sll1": 16, "sll2": 20, "erf": 32}  # (ERF: its 16 octets, the pad octets, Ethernet's 14)


def _damaged(src: Path, dest: Path, rng: random.Random, keep: int) -> Path:
    data = src.read_bytes()
    out = bytearray(data[:24])
    pos = 24
    while pos + 16 <= len(data):
        cap = struct.unpack_from("<I", data, pos + 8)[0]
        body = bytearray(data[pos + 16:pos + 16 + cap])
        for _ in range(rng.choice((0, 0, 1, 2))):
            if body:
                body[rng.randrange(min(len(body), 96))] = rng.randrange(256)
        if len(body) > keep and rng.random() < 0.03:  # cut by a snap length, the link header kept
            body = body[:rng.randrange(keep, len(body))]
        out += data[pos:pos + 8] + struct.pack("<II", len(body), len(body)) + body
        pos += 16 + cap
    dest.write_bytes(bytes(out))
    return dest


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["eth", "sll1", "sll2", "erf"])
def test_columns_read_damaged_frames_as_the_per_packet_decoder(tmp_path: Path, capsys: Any, kind: str, seed: int) -> None:
    rng = random.Random(f"{kind}{seed}")
    name = SOURCES[(seed + len(kind)) % len(SOURCES)]
    src = ROOT / "captures" / name if kind == "eth" else \
        erf_copy(tmp_path, name) if kind == "erf" else cooked_copy(tmp_path, name, int(kind[-1]))
    path = _damaged(src, tmp_path / f"damaged_{kind}.pcap", rng, HEADER[kind])
    summary = decode(capsys, "-r", str(path))
    assert summary == decode(capsys, "-r", str(path), "--no-columnar"), name
    args = ["-r", str(path), "-T", "fields", *(a for n in FIELDS for a in ("-e", n))]
    assert decode(capsys, *args) == decode(capsys, *args, "--no-columnar"), name


def test_ipv4_headers_whose_payload_is_not_read(tmp_path: Path, capsys: Any) -> None:
    """A first fragment (More Fragments set), a total length under the header's, a header length under
    20 octets: the per-packet decoder reads nothing after the IPv4 header (tshark: a fragment, "Bogus IP
    length", "Bogus IP header length"), and neither do the columns (they read the UDP header and the
    BTH after all three)."""
    from rdmalab.wire.frame import encode_rocev2
    from rdmalab.wire.ib import BTH

    good = encode_rocev2(BTH(opcode=0x04, destqp=0x12, psn=5), [], b"x" * 40)
    frames = []
    for at, value in ((20, good[20] | 0x20), (17, 1), (14, 0x43), (None, None)):
        d = bytearray(good)
        if at is not None:
            d[at] = value
        frames.append(bytes(d))
    path = tmp_path / "ip.pcap"
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, d in enumerate(frames):
            f.write(struct.pack("<IIII", 1000 + i, 0, len(d), len(d)) + d)
    args = ["-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "udp.length", "-e", "infiniband.bth.psn",
            "-e", "rdmalab.encap", "-e", "udp.stream"]
    out = decode(capsys, *args)
    assert out == decode(capsys, *args, "--no-columnar")
    assert out.splitlines() == ["1\t\t\teth\t", "2\t\t\teth\t", "3\t\t\teth\t", "4\t64\t5\trocev2\t0"]
    assert decode(capsys, "-r", str(path)) == decode(capsys, "-r", str(path), "--no-columnar")
