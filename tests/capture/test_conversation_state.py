"""The columns' conversations (:func:`rdmalab.capture.columnar_decode.fill_conversations`, a block of
frames at a time) against :meth:`rdmalab.capture.render.Conversations.add` one frame at a time (whose
numbers tshark checks, ``test_conversations``), on random traffic made to hit the rules' corners: ports
reused with a new SYN, the same SYN again, SYN-ACKs, acknowledgments before their direction's first
segment, headers past their datagram or with a bogus length, IPv4 and IPv6 addresses with the same
integer value, blocks of every size, and a state so small it forgets conversations on the way."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from rdmalab.capture.columnar import CONVERSATION_FIELDS, columns_from_dicts, fill_conversations
from rdmalab.capture.render import Conversations


def _traffic(seed: int, n: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    hosts = [("ip", 0x0A000001), ("ip", 0x0A000002), ("ipv6", 0x0A000001), ("ipv6", 0xFE80 << 112 | 7)]
    frames: list[dict[str, Any]] = []
    for i in range(n):
        fam = rnd.choice(("ip", "ipv6"))
        src, dst = (rnd.choice([h for f, h in hosts if f == fam]) for _ in range(2))
        row: dict[str, Any] = {"frame.number": i + 1, "frame.time_epoch": float(i), f"{fam}.src": src,
                               f"{fam}.dst": dst}
        kind = rnd.random()
        if kind < 0.1:  # neither TCP nor UDP
            frames.append(row)
            continue
        proto = "udp" if kind < 0.4 else "tcp"
        row[f"{proto}.srcport"] = rnd.choice((1, 2, 4791))
        row[f"{proto}.dstport"] = rnd.choice((1, 2, 4791))
        if proto == "tcp":
            row["tcp.flags"] = rnd.choice((0x02, 0x02, 0x12, 0x10, 0x10, 0x18, 0x11, 0x04, 0x14, 0x00))
            row["tcp.seq_raw"] = rnd.choice((0, 5, 1000, 0xFFFFFFFF, rnd.getrandbits(32)))
            row["tcp.ack_raw"] = rnd.choice((0, 6, 1001, rnd.getrandbits(32)))
            row["tcp.hdr_len"] = rnd.choice((20, 20, 20, 32, 12, 0))
            if rnd.random() < 0.9:  # (else a header past its datagram: no tcp.len)
                row["tcp.len"] = rnd.choice((0, 0, 1, 1448))
        frames.append(row)
    return frames


def _expected(frames: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    conv = Conversations(most=most)
    out = []
    for f in frames:
        g = dict(f)
        conv.add(g)
        out.append({k: g[k] for k in CONVERSATION_FIELDS if k in g})
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("most", [1 << 20, 3])
def test_columns_as_one_frame_at_a_time(seed: int, most: int) -> None:
    frames = _traffic(seed, 400)
    want = _expected(frames, most)
    cols = columns_from_dicts([dict(f) for f in frames])
    conv = Conversations(most=most)
    rnd = random.Random(seed)
    got: list[dict[str, Any]] = []
    at = 0
    while at < len(frames):
        k = rnd.choice((1, 2, 7, 50, 400))
        part = cols.take(np.arange(at, min(at + k, len(frames))))
        fill_conversations(part, conv)
        for i in range(part.n):
            got.append({name: int(part.data[name][i]) for name in CONVERSATION_FIELDS if part.layers[name][i]})
        at += k
    assert got == want
    assert sum("tcp.stream" in w for w in want) > 100 and sum("udp.stream" in w for w in want) > 50
    assert len({w.get("tcp.stream") for w in want}) > (20 if most > 3 else 5)  # (new SYNs: new streams)
