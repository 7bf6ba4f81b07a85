#!/usr/bin/env python3
"""Recompute the RoCEv2 ICRC of every IPv4 UDP/4791 packet in classic pcap files.

    check_icrc.py FILE.pcap...

ICRC = CRC-32 (zlib polynomial) over 8 bytes of 0xFF + IPv4 header + UDP header +
BTH + payload (without the ICRC), with these bytes masked to 0xFF: IPv4 TOS, TTL
and header checksum; UDP checksum; BTH byte 4 (FECN/BECN/resv). The result is
stored little-endian in the last 4 bytes. Only standard library; Ethernet linktype
only. Prints one line per file and exits 1 on any mismatch.
"""
import struct
import sys
import zlib


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        yield linktype, data[off + 16:off + 16 + incl]
        off += 16 + incl


def main():
    bad_total = 0
    for path in sys.argv[1:]:
        n = bad = 0
        for linktype, pkt in packets(path):
            if linktype != 1 or len(pkt) < 14 + 20 + 8 + 12 + 4:
                continue
            if pkt[12:14] != b"\x08\x00":
                continue
            ip = bytearray(pkt[14:])
            ihl = (ip[0] & 15) * 4
            total = struct.unpack(">H", ip[2:4])[0]
            ip = ip[:total]
            if ip[9] != 17 or struct.unpack(">H", ip[ihl + 2:ihl + 4])[0] != 4791:
                continue
            wire = struct.unpack("<I", ip[-4:])[0]
            m = bytearray(ip[:-4])
            m[1] = m[8] = m[10] = m[11] = 0xFF
            m[ihl + 6] = m[ihl + 7] = 0xFF
            m[ihl + 8 + 4] = 0xFF
            n += 1
            if zlib.crc32(b"\xff" * 8 + bytes(m)) & 0xFFFFFFFF != wire:
                bad += 1
        print(f"{path}: {n} RoCEv2/IPv4 packets, {bad} ICRC mismatches")
        bad_total += bad
    sys.exit(1 if bad_total else 0)


if __name__ == "__main__":
    main()
