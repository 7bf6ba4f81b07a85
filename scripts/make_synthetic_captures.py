"""Synthesise captures with every opcode, deterministically, with rdmalab's own encoders.

    python scripts/make_synthetic_captures.py [OUTDIR]     (default: captures/)

* ``synthetic_all_opcodes_rocev2.pcap``: every BTH opcode of the opcode table (RC, UC, RD, UD,
  CNP, XRC, FLUSH, ATOMIC WRITE) once over RoCEv2/IPv4 and once over RoCEv2/IPv6;
* ``synthetic_all_opcodes_rocev1.pcap``: every opcode over RoCEv1 (EtherType 0x8915, GRH);
* ``synthetic_iwarp_all_opcodes.pcap``: a TCP connection with an MPA Request/Reply (rev 1,
  CRC) and one FPDU for every RDMAP opcode (RFC 5040 and RFC 7306), Terminate included.

Header values are distinct non-zero numbers so that a field read from the wrong bytes shows.
The parity test (tests/test_parity.py) compares every packet with tshark.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rdmalab.capture import write_pcap
from rdmalab.wire import iwarp, rdmap
from rdmalab.wire.frame import encode_rocev1, encode_rocev2, encode_tcp_frame
from rdmalab.wire.header import Header
from rdmalab.wire.ib import AETH, BTH, DETH, GRH, RETH, AtomicETH
from rdmalab.wire.net import TCP
from rdmalab.wire.opcodes import OPCODES


def _headers(code: int) -> list[Header]:
    out: list[Header] = []
    for i, cls in enumerate(OPCODES[code].headers):
        if cls is AETH:
            out.append(AETH.ack(msn=0x123 + code, credits=5))
        elif cls is RETH:
            out.append(RETH(va=0x7F00_0000_1000 + code * 0x100, r_key=0x1234_5600 + code, dma_length=64 + code))
        elif cls is AtomicETH:
            out.append(AtomicETH(va=0x7F00_0000_8000 + code * 8, r_key=0xABCD_0000 + code, swap_add=0x1111 * code,
                                 compare=0x2222 * code))
        elif cls is DETH:
            out.append(DETH(q_key=0x1111_0000 + code, src_qp=0x200 + code))
        else:  # every other field: a distinct small number per field
            out.append(cls(**{f.name: (0 if f.reserved else (code + 7 * (j + 1) + i) & f.mask)
                              for j, f in enumerate(cls.LAYOUT.fields)}))
    return out


def _ib_packets() -> list[tuple[BTH, list[Header], bytes]]:
    out = []
    for code, info in OPCODES.items():
        payload = bytes((code + k) & 0xFF for k in range(8 if info.op.value == "ATOMIC WRITE" else 13)) \
            if info.payload else b""
        bth = BTH(opcode=code, se=int(info.imm), p_key=0xFFFF, destqp=0x100 + code, ackreq=int(info.is_request),
                  psn=0x10000 + code, becn=int(code == 0x81))
        out.append((bth, _headers(code), payload))
    return out


def rocev2(path: Path) -> int:
    frames = [encode_rocev2(b, h, p, src_port=49152 + b.opcode) for b, h, p in _ib_packets()]
    frames += [encode_rocev2(b, h, p, src_ip="fd00::1", dst_ip="fd00::2", src_port=49152 + b.opcode,
                             flowlabel=b.opcode) for b, h, p in _ib_packets()]
    return write_pcap(path, frames)


def rocev1(path: Path) -> int:
    grh = GRH(sgid=int.from_bytes(bytes.fromhex("fe800000000000000000000000000001"), "big"),
              dgid=int.from_bytes(bytes.fromhex("fe800000000000000000000000000002"), "big"), hoplmt=1)
    return write_pcap(path, [encode_rocev1(b, h, p, grh=grh) for b, h, p in _ib_packets()])


def iwarp_all(path: Path) -> int:
    a, b = ("10.0.0.1", 40000), ("10.0.0.2", 7174)
    seq = {a: 1000, b: 5000}
    frames: list[bytes] = []

    def tcp(src: tuple[str, int], dst: tuple[str, int], payload: bytes = b"", flags: int = TCP.ACK | TCP.PSH) -> None:
        frames.append(encode_tcp_frame(payload, src_ip=src[0], dst_ip=dst[0], src_port=src[1], dst_port=dst[1],
                                       seq=seq[src], ack=seq[dst], flags=flags))
        seq[src] += len(payload) + (1 if flags & (TCP.SYN | TCP.FIN) else 0)

    tcp(a, b, flags=TCP.SYN)
    tcp(b, a, flags=TCP.SYN | TCP.ACK)
    tcp(a, b, flags=TCP.ACK)
    tcp(a, b, iwarp.encode_mpa_frame(crc=True, private_data=b"rdmalab"))
    tcp(b, a, iwarp.encode_mpa_frame(reply=True, crc=True, private_data=b"ok"))
    ulpdus_a = [
        iwarp.rdma_write(0x1122_3344, 0x7F00_0000_1000, b"WRITE payload!"),
        iwarp.read_request(0x5566_7788, 0x7F00_0000_2000, 64, 0x99AA_BBCC, 0x7F00_0000_3000, msn=1),
        iwarp.send(b"plain SEND", msn=1),
        iwarp.send(b"SEND with Invalidate", msn=2, inv_stag=0x0BAD_CAFE),
        iwarp.send(b"SEND with SE", msn=3, se=True),
        iwarp.send(b"SEND, SE, Invalidate", msn=4, se=True, inv_stag=0x0BAD_F00D),
        iwarp.fetch_add(7, 0x1234_0000, 0x7F00_0000_4000, 5, msn=1),
        iwarp.atomic_request(rdmap.ATOMIC_CMP_SWAP, 8, 0x1234_0000, 0x7F00_0000_4008, 0x42, 0, 0x41, 0, msn=2),
        iwarp.immediate_data(0xDEAD_BEEF, msn=5),
        iwarp.immediate_data(0xFEED_FACE, se=True, msn=6),
    ]
    for u in ulpdus_a:
        tcp(a, b, iwarp.encode_fpdu(u))
    ulpdus_b = [
        iwarp.read_response(0x5566_7788, 0x7F00_0000_2000, bytes(range(64))),
        iwarp.atomic_response(7, 0x1000),
        iwarp.terminate(1, 2, 2, ddp_seg_len=34, terminated_ddp=ulpdus_a[2][:18]),
    ]
    for u in ulpdus_b:
        tcp(b, a, iwarp.encode_fpdu(u))
    return write_pcap(path, frames)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "captures")
    for name, fn in (("synthetic_all_opcodes_rocev2.pcap", rocev2), ("synthetic_all_opcodes_rocev1.pcap", rocev1),
                     ("synthetic_iwarp_all_opcodes.pcap", iwarp_all)):
        print(f"{out / name}: {fn(out / name)} frames")


if __name__ == "__main__":
    main()
