"""Capture statistics: frames per encapsulation and per operation, CRC failures, decoding
problems, and congestion/NAK counts (what ``rdmalab stats`` prints)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from rdmalab.capture.pcapio import shown_path
from rdmalab.capture.reader import read
from rdmalab.wire.ib import AETH, BTH
from rdmalab.wire.rdmap import RDMAPControl, RDMAPUntagged, rdmap_opcode_name


@dataclass
class CaptureStats:
    """Counts over one capture file."""

    path: str
    frames: int = 0
    encaps: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    crc_failures: list[str] = field(default_factory=list)  # "frame N (ICRC)" ...
    problems: list[str] = field(default_factory=list)
    findings: Counter[str] = field(default_factory=Counter)

    def text(self, limit: int = 50) -> str:
        lines = [f"{self.path}: {self.frames} frames", "Encapsulations:"]
        lines += [f"  {n:8d}  {k}" for k, n in self.encaps.most_common()]
        lines.append("Operations (by opcode):")
        lines += [f"  {n:8d}  {k}" for k, n in self.operations.most_common()]
        lines.append(f"CRC failures: {len(self.crc_failures)}")
        lines += [f"  {s}" for s in self.crc_failures[:limit]]
        lines.append(f"Decode problems: {len(self.problems)}")
        lines += [f"  {s}" for s in self.problems[:limit]]
        if self.findings:
            lines.append("Findings:")
            lines += [f"  {n:8d}  {k}" for k, n in self.findings.most_common()]
        return "\n".join(lines) + "\n"


def capture_stats(path: str | os.PathLike[str], *, iwarp: bool = True) -> CaptureStats:
    """Count what a capture holds (streaming, one packet at a time; ``-`` reads standard input)."""
    st = CaptureStats(shown_path(path))
    for cp in read(path, lenient=True, iwarp=iwarp):
        st.frames += 1
        st.encaps[cp.packet.encap] += 1
        for pkt in [cp.packet, *cp.pdus]:
            bth = pkt.get(BTH)
            if bth is not None:
                st.operations[pkt.opcode_name or "?"] += 1
                if bth.fecn:
                    st.findings["FECN set (congestion seen on the way)"] += 1
                if bth.becn:
                    st.findings["BECN set (congestion notification)"] += 1
                aeth = pkt.get(AETH)
                if aeth is not None and aeth.is_nak:
                    st.findings[f"NAK: {aeth.nak_name}"] += 1
                if aeth is not None and aeth.is_rnr_nak:
                    st.findings["RNR NAK (receiver not ready)"] += 1
            elif pkt.encap == "iwarp":
                ctrl = pkt.get(RDMAPControl) or pkt.get(RDMAPUntagged)
                if ctrl is not None:
                    st.operations[f"iWARP {rdmap_opcode_name(ctrl.opcode)}"] += 1
                else:  # MPA Request/Reply
                    st.operations[" ".join(pkt.summary().split(" ")[:2])] += 1
                if pkt.crc_status is None and ctrl is not None:
                    st.findings["iWARP FPDU without CRC32c (MPA negotiated none)"] += 1
            if pkt.crc_status == "bad":
                st.crc_failures.append(f"frame {cp.frame_number} ({'ICRC' if pkt.crc_kind == 'icrc' else 'CRC32c'})")
            for p in pkt.problems:
                st.problems.append(f"frame {cp.frame_number}: {p}")
    return st
