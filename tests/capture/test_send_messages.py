"""iWARP Send messages of several FPDUs put together as tshark 4.0 puts them together (packet-iwarp-ddp-rdmap.c,
``dissect_rdmap_payload``: the untagged Send segments of a TCP conversation in one sequence, the last flag ending
a message): the FPDU that ends one has the whole message as its ``data`` (``-T fields``, filters, ``-T json``),
``-x`` shows it as "Reassembled SMB Direct" (tshark's title), ``-V`` says which FPDUs it came from; against tshark
on the real siw Send captures, and bounded in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tshark_cli import decode, requires_tshark, tshark

from rdmalab.capture import iwarp, read, records
from rdmalab.capture.reader import decode_record

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
SENDS = ["siw_send_bw.pcap", "siw_crc_send_bw.pcap"]
#: tshark's heuristic dissectors that would claim the payloads (as test_decode_hexdump runs it)
NO_HEURISTICS = ("--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct")


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", SENDS)
@pytest.mark.parametrize("how", [(), ("--no-columnar",)])
def test_the_data_of_each_frame_is_tsharks(name: str, how: tuple[str, ...], capsys: Any) -> None:
    path = str(CAPTURES / name)
    args = ("-T", "fields", "-e", "frame.number", "-e", "data.len", "-e", "data.data")
    want = tshark("-n", *NO_HEURISTICS, "-r", path, *args)
    assert decode(capsys, "-r", path, *args, *how) == want
    assert "\t4096\t" in want  # (messages of several FPDUs among them)
    flt = ("-Y", "data.len == 4096", "-T", "fields", "-e", "frame.number")
    assert decode(capsys, "-r", path, *flt, *how) == tshark("-n", *NO_HEURISTICS, "-r", path, *flt)


@requires_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("name", SENDS)
def test_the_fpdus_of_each_message_are_tsharks(name: str) -> None:
    """Which frames each message was put together from (tshark's ``iwarp_rdma.send.fragment``, its count and
    length): an FPDU of another frame between them (frames 43, 44, 48) included."""
    path = str(CAPTURES / name)
    want = tshark("-n", *NO_HEURISTICS, "-r", path, "-Y", "iwarp_rdma.send.fragment", "-T", "fields",
                  "-e", "frame.number", "-e", "iwarp_rdma.send.fragment", "-e", "iwarp_rdma.send.fragment.count",
                  "-e", "iwarp_rdma.send.reassembled.length")
    got = []
    for cp in read(path):
        for pdu in cp.pdus:
            msg = pdu.send_message
            if msg is not None:
                got.append(f"{cp.frame_number}\t{','.join(str(f) for f, _n in msg.fragments)}\t{len(msg.fragments)}\t"
                           f"{len(msg.data)}")
    assert "\n".join(got) + "\n" == want and len(got) >= 5


@requires_tshark
@pytest.mark.tshark
def test_json_and_the_tree(capsys: Any) -> None:
    path = str(CAPTURES / "siw_send_bw.pcap")

    def data_layers(text: str) -> list[tuple[str, Any]]:
        return [(x["_source"]["layers"]["frame"]["frame.number"], x["_source"]["layers"].get("data"))
                for x in json.loads(text) if "data" in x["_source"]["layers"]]

    want = data_layers(tshark("-n", *NO_HEURISTICS, "-r", path, "-T", "json"))
    assert data_layers(decode(capsys, "-r", path, "-T", "json")) == want
    assert data_layers(decode(capsys, "-r", path, "-T", "json", "-j", "2")) == want
    tree = decode(capsys, "-r", path, "-V", "-Y", "frame.number == 42")
    assert "Send message: 4096 bytes in 3 FPDUs: #40(1424), #41(1424), #42(1248) (the data of this PDU)" in tree


def test_a_message_that_never_ends_is_bounded(monkeypatch: Any) -> None:
    """Send segments without the last flag for ever (a hostile or cut stream) are held up to
    ``MAX_SEND_MESSAGE`` octets: past that the message is not put together, and nothing more is held."""
    path = str(CAPTURES / "siw_send_bw.pcap")
    whole = [len(p.send_message.data) for cp in read(path) for p in cp.pdus if p.send_message is not None]
    assert whole and set(whole) == {4096}
    monkeypatch.setattr(iwarp, "MAX_SEND_MESSAGE", 3000)  # (a message of 4096 octets: too long to hold)
    cut = [p.send_message for cp in read(path) for p in cp.pdus if p.send_message is not None]
    assert cut == []
    tracker = iwarp.IwarpTracker()
    for rec in records(path):
        pkt = decode_record(rec).packet
        seg = iwarp.IwarpTracker.segment_of(pkt)
        if seg is not None:
            tracker.process_segment(rec.frame_number, seg[0], seg[1], seg[2], seg[3], seg[4], seg[5], bytes(pkt.payload))
        assert all(sum(len(p) for _f, p in c.sends) <= 3000 and len(c.sends) <= 3 for c in tracker._conns.values())
