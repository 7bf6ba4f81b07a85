"""``rdmalab stats``: per-opcode counts, CRC failures and findings."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TextIO

from rdmalab.cli._common import Fail


def run_stats(args: argparse.Namespace, out: TextIO) -> int:
    from rdmalab.capture import read
    from rdmalab.wire.ib import AETH, BTH
    from rdmalab.wire.rdmap import RDMAPControl, RDMAPUntagged, rdmap_opcode_name

    path = args.file or args.read
    if path is None:
        raise Fail("stats needs a capture file: rdmalab stats -r FILE")
    frames = 0
    encaps: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    crc_bad: list[str] = []
    problems: list[str] = []
    findings: Counter[str] = Counter()
    for cp in read(path, lenient=True, iwarp=not args.no_iwarp):
        frames += 1
        encaps[cp.packet.encap] += 1
        for pkt in [cp.packet, *cp.pdus]:
            bth = pkt.get(BTH)
            if bth is not None:
                ops[pkt.opcode_name or "?"] += 1
                if bth.fecn:
                    findings["FECN set (congestion seen on the way)"] += 1
                if bth.becn:
                    findings["BECN set (congestion notification)"] += 1
                aeth = pkt.get(AETH)
                if aeth is not None and aeth.is_nak:
                    findings[f"NAK: {aeth.nak_name}"] += 1
                if aeth is not None and aeth.is_rnr_nak:
                    findings["RNR NAK (receiver not ready)"] += 1
            elif pkt.encap == "iwarp":
                ctrl = pkt.get(RDMAPControl) or pkt.get(RDMAPUntagged)
                if ctrl is not None:
                    ops[f"iWARP {rdmap_opcode_name(ctrl.opcode)}"] += 1
                else:  # MPA Request/Reply
                    ops[" ".join(pkt.summary().split(" ")[:2])] += 1
                if pkt.crc_status is None and ctrl is not None:
                    findings["iWARP FPDU without CRC32c (MPA negotiated none)"] += 1
            if pkt.crc_status == "bad":
                crc_bad.append(f"frame {cp.frame_number} ({'ICRC' if pkt.crc_kind == 'icrc' else 'CRC32c'})")
            for p in pkt.problems:
                problems.append(f"frame {cp.frame_number}: {p}")
    w = out.write
    w(f"{path}: {frames} frames\n")
    w("Encapsulations:\n")
    for k, n in encaps.most_common():
        w(f"  {n:8d}  {k}\n")
    w("Operations (by opcode):\n")
    for k, n in ops.most_common():
        w(f"  {n:8d}  {k}\n")
    w(f"CRC failures: {len(crc_bad)}\n")
    for s in crc_bad[:50]:
        w(f"  {s}\n")
    w(f"Decode problems: {len(problems)}\n")
    for s in problems[:50]:
        w(f"  {s}\n")
    if findings:
        w("Findings:\n")
        for k, n in findings.most_common():
            w(f"  {n:8d}  {k}\n")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("stats", help="per-opcode counts, CRC failures and findings of a capture")
    s.add_argument("file", nargs="?")
    s.add_argument("-r", "--read", metavar="FILE")
    s.add_argument("--no-iwarp", action="store_true")
    s.set_defaults(func=run_stats)
