"""Feedback as a property of every check.

For every exercise: every right answer in any reasonable form (int or enum, hex or decimal,
name or number) passes; typical wrong answers (wrong field, wrong byte order, off-by-one,
wrong opcode, right value in the wrong type) fail with feedback that names the field, the
value given and what was expected.  The table must cover every registered exercise, so a new
exercise without wrong answers fails here.
"""

from __future__ import annotations

import enum
import math
import socket
import struct
import tempfile
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from test_nb15_feedback import _get as kv_get_program

import rdmalab.verbs.enums as e
from rdmalab import lab
from rdmalab.lab import FAIL, PASS
from rdmalab.lab.checkers import infiniband as ib
from rdmalab.lab.checkers.kv import NIC as KV_NIC
from rdmalab.lab.checkers.kv import measure as kv_measure
from rdmalab.lab.checkers.kv import torn_run as kv_torn_run
from rdmalab.lab.checkers.wires import bth_task, crc_capture, icrc_frame
from rdmalab.lab.feedback import names_value, nth
from rdmalab.verbs.wr import SGE, RecvWR, SendWR
from rdmalab.wire.ib import RNR_TIMER_US


def cm_facts() -> dict[str, Any]:
    """Notebook 12 for this student: its rping's port, its connection's four PSNs, its service ID's two halves."""
    from rdmalab.lab.checkers.cm import cm_messages, connection

    qps = connection().qps
    sid = lab.scenario("cm.service_id").service_id
    return {"port": cm_messages()[0][1].dst_port, "ps": (sid >> 16) & 0xFFFF, "sid_port": sid & 0xFFFF,
            "psns": {f"{side}.{attr}": qps[side][attr] for side in ("client", "server") for attr in ("sq_psn", "rq_psn")}}


def swap16(v: int) -> int:
    return int.from_bytes(v.to_bytes(2, "little"), "big")


CM = cm_facts()
PSNS = CM["psns"]
SEGMENTS = -(-lab.scenario("live.segments").length // 1024)  # notebook 13's WRITE at path MTU 1024
LAST = lab.scenario("live.segments").length - (SEGMENTS - 1) * 1024  # the payload of its Last packet
SEG = {"writes": SEGMENTS, "read_responses": SEGMENTS, "last_payload": LAST}


class Nak(enum.IntEnum):  # a learner's own enum: an IntEnum is an int
    PSN_SEQUENCE_ERROR = 0
    REMOTE_ACCESS_ERROR = 2


def _masked_icrc_input() -> bytes:
    b = bytearray(icrc_frame()[14:-4])
    b[1] = b[8] = 0xFF
    b[10:12] = b[26:28] = b"\xff\xff"
    b[32] = 0xFF
    return b"\xff" * 8 + bytes(b)


ICRC = zlib.crc32(_masked_icrc_input())


# notebooks 07 and 08 vary per student (issue 35): this run's student's BTH, damaged FPDUs, rkey and STag
BTH_TASK = bth_task()


def _swap24(v: int) -> int:
    return int.from_bytes(v.to_bytes(3, "little"), "big")


def crc_facts() -> tuple[list[int], int]:
    """Notebook 07's iWARP capture for this student: the FPDUs whose CRC32c fails (computed here), and how many."""
    from rdmalab.wire.crc import crc32c

    with tempfile.TemporaryDirectory() as tmp:
        fpdus = crc_capture(tmp).fpdus()
    return [i for i, p in enumerate(fpdus) if crc32c(p.data[:p.crc_offset])
            != int.from_bytes(p.data[p.crc_offset:p.crc_offset + 4], "little")], len(fpdus)


def rping_facts() -> dict[str, int]:
    """Notebook 08's rping captures for this student: the rkey of frame 4, the sink rkey, a PSN, the first Write's STag."""
    from rdmalab.lab.checkers.captures import my_rping

    with tempfile.TemporaryDirectory() as tmp:
        roce = my_rping("roce", tmp)
        iw = my_rping("iwarp", tmp).packets
    write = next(p for cp in iw for p in cp.pdus if p.summary().startswith("RDMA Write"))
    return {"rkey": int.from_bytes(roce.packets[3].packet.payload[8:12], "big"),
            "sink": roce.facts["sink"][1],  # type: ignore[index]  # the client's second descriptor's
            "psn": roce.packets[3].packet.bth.psn, "stag": next(s.value for s in write.spans() if s.field == "stag")}


BAD, FPDUS = crc_facts()
GOOD = next(i for i in range(FPDUS) if i not in BAD)
KEYS = rping_facts()
RKEY, STAG = KEYS["rkey"], KEYS["stag"]


# notebooks 05 and 06 vary per student (issue 35): this run's student's READ and sequence of atomics
_READ = lab.scenario("read.responses")
_READ_N = -(-_READ.length // _READ.mtu)  # the READ Responses
_READ_LAST = _READ.length - (_READ_N - 1) * _READ.mtu  # the data of the last


def atomic_results() -> tuple[list[int], int]:
    """Notebook 06's atomics for this student, run on the soft engine: r1 to r4, and the final counter."""
    from rdmalab.lab.checkers.verbs import atomic_sequence

    _, returned, final = atomic_sequence()
    return returned, final


_RET, _FIN = atomic_results()


def write_imm(post_recv: bool = True, rkey: str = "rkey", ret: str = "b", opcode: int = e.IBV_WR_RDMA_WRITE_WITH_IMM,
              imm: Callable[[int], int] = lambda x: x) -> Callable[..., Any]:
    def fn(pair: Any, data: bytes, value: int) -> Any:
        a, b = pair.a, pair.b
        if post_recv:
            b.qp.post_recv(RecvWR(wr_id=1, num_sge=0, sg=[]))
        a.mr.write(data, len(data))
        wr = SendWR(wr_id=2, opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, len(data), a.mr.lkey)], imm_data=imm(value))
        wr.set_wr_rdma(b.mr.rkey if rkey == "rkey" else b.mr.lkey + 1, b.mr.buf)
        a.qp.post_send(wr)
        wa = a.poll()
        return b.poll() if ret == "b" else wa
    fn.__name__ = "write_with_imm"
    return fn


def read_remote(offset_fix: int = 0, op: int = e.IBV_WR_RDMA_READ, length_fix: int = 0) -> Callable[..., Any]:
    def fn(pair: Any, remote_offset: int, length: int) -> Any:
        a, b = pair.a, pair.b
        n = length + length_fix
        wr = SendWR(wr_id=1, opcode=op, num_sge=1, sg=[SGE(a.mr.buf, n, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + remote_offset + offset_fix)
        a.qp.post_send(wr)
        a.poll()
        return a.mr.read(n, 0)
    fn.__name__ = "read_remote"
    return fn


def try_lock(op: int = e.IBV_WR_ATOMIC_CMP_AND_SWP, result: str = "bool") -> Callable[..., Any]:
    def fn(pair: Any) -> Any:
        a, b = pair.a, pair.b
        wr = SendWR(wr_id=9, opcode=op, num_sge=1, sg=[SGE(a.mr.buf + 128, 8, a.mr.lkey)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, 0 if op == e.IBV_WR_ATOMIC_CMP_AND_SWP else 1, 1)
        a.qp.post_send(wr)
        a.poll()
        old = struct.unpack("<Q", a.mr.read(8, 128))[0]
        return (old == 0) if result == "bool" else int(old == 0)
    fn.__name__ = "try_lock"
    return fn


def write_to_peer(sge_key: str = "lkey", reth_key: str = "rkey") -> Callable[..., Any]:
    def fn(pair: Any, data: bytes) -> Any:
        a, b = pair.a, pair.b
        a.mr.write(data, len(data))
        key = a.mr.lkey if sge_key == "lkey" else b.mr.rkey
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, len(data), key)])
        wr.set_wr_rdma(b.mr.rkey if reth_key == "rkey" else a.mr.lkey, b.mr.buf)
        a.qp.post_send(wr)
        return a.poll()
    fn.__name__ = "write_to_peer"
    return fn


def ce_frame(ecn: int = 3, fix_checksum: bool = True, ttl: int | None = None) -> bytes:
    from rdmalab.lab.checkers.congestion import my_write_frame
    from rdmalab.wire.frame import decode_ethernet
    from rdmalab.wire.net import IPv4

    frame = my_write_frame()
    ip = decode_ethernet(frame)[IPv4].replace(ecn=ecn)
    if ttl is not None:
        ip = ip.replace(ttl=ttl)
    if fix_checksum:
        ip = ip.with_checksum()
    return frame[:14] + ip.encode() + frame[34:]


def cnp(**kw: Any) -> bytes:
    from rdmalab.wire import encode_rocev2
    from rdmalab.wire.ib import BTH, CNPPad

    mine = lab.scenario("congestion.write")
    ips = kw.pop("ips", (mine.responder_ip, mine.requester_ip))
    opcode = kw.pop("opcode", None)
    fields = {"opcode": 0x81, "destqp": mine.requester_qpn, "becn": 1} | kw
    frame = encode_rocev2(BTH(**fields), [CNPPad()], src_ip=ips[0], dst_ip=ips[1])
    return frame if opcode is None else frame[:42] + bytes([opcode]) + frame[43:]  # a wrong opcode, patched in


def cnp_ips() -> tuple[str, str]:
    """Notebook 10's CNP of this student goes from the WRITE's responder to its requester."""
    mine = lab.scenario("congestion.write")
    return mine.responder_ip, mine.requester_ip


def nak_facts() -> tuple[int, int]:
    """Notebook 09's NAK run of this student: the PSN lost and the PSN the NAK names."""
    from rdmalab.lab.checkers.reliability import nak_scenario_run
    from rdmalab.wire.ib import AETH

    p = nak_scenario_run()
    nak = next(pk for pk in p.packets() if AETH in pk and pk[AETH].is_nak)
    return next(int(ev.psn) for ev in p.trace if ev.kind == "dropped"), int(nak.bth.psn)


def timeout_facts() -> tuple[int, float, int]:
    """Notebook 09's timeout run of this student: the request packets sent a second time, the ms from the lost
    packet's send to the first resend, and the QP's timeout code."""
    from rdmalab.lab.checkers.reliability import timeout_scenario_run

    p = timeout_scenario_run()
    sent = [ev for ev in p.trace if ev.kind == "sent" and ev.node == p.a.name]
    lost = next(ev.psn for ev in p.trace if ev.kind == "dropped" and ev.node == p.b.name)
    again = next(ev.time_ns for ev in p.trace if ev.kind == "retransmitted")
    waited = (again - next(ev.time_ns for ev in sent if ev.psn == lost)) / 1e6
    return len(sent) - len({ev.psn for ev in sent}), waited, lab.scenario("reliability.timeout").timeout


LOST, RESEND = nak_facts()
RESENT, WAITED, TIMEOUT_CODE = timeout_facts()
OTHER_TIMER = 4.096e-3 * 2 ** (TIMEOUT_CODE + 1)  # the timer of another timeout code


def _sends(n: int, *, first: str = "RC SEND First", last: str = "RC SEND Last") -> list[str]:
    """The opcode names of an n-packet SEND, or of a list with a wrong first or last."""
    return [first] + ["RC SEND Middle"] * (n - 2) + [last]


# notebook 03's answers vary per student (issue 35): this run's student's scenarios
_N = math.ceil(lab.scenario("send.opcodes").length / lab.scenario("send.opcodes").mtu)
_RNR_CODE = lab.scenario("send.rnr").timer_code
_RNR_MS = RNR_TIMER_US[_RNR_CODE] / 1000
_UC_RTR = {"AV", "PATH_MTU", "RQ_PSN", "DEST_QPN"}
_RC_RTR = _UC_RTR | {"MIN_RNR_TIMER", "MAX_DEST_RD_ATOMIC"}

# notebook 14's subnet, WRITE and incast vary per student: this run's student's, measured as the checkers do
IB_LID, IB_PORT, _ = ib.lft_answer()
IB_LRH = ib.lrh_answer(lab.scenario("ib.lrh"))
IB_HOL = dict(zip(("shared_vl_gbps", "own_vl_gbps"),
                  (ib.victim_gbps(r) for r in ib.hol_runs(lab.scenario("ib.hol").senders,
                                                          lab.scenario("ib.hol").rate_gbps)), strict=True))

# notebook 15's crossover and torn read vary per student: this run's student's, measured as the checkers do
_KV_READS, _KV_RPC = kv_measure(lab.scenario("kv.crossover").service_ns, nic=KV_NIC)
KV_X = {"rpc_ns": _KV_RPC, "reads": next(i + 1 for i, t in enumerate(_KV_READS) if t > _KV_RPC)}
_KV_T = lab.scenario("kv.torn")
KV_TORN = {"torn": kv_torn_run(_KV_T, False).value, "reads": kv_torn_run(_KV_T, True).round_trips}

BTH_OK = BTH_TASK.encode()
RIGHT: dict[str, list[Any]] = {
    "welcome.opcode": ["RC RDMA READ Request", "rc_rdma_read_request", 0x0C, "0x0c", "12"],
    "dma.copies": [2, "2", "0x2"],
    "dma.syscalls": [0, "0"],
    "verbs.path": [["RESET", "INIT", "RTR", "RTS"], ["ERR", "ibv_qps_reset", "IBV_QPS_INIT", "rtr", "rts"],
                   [e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS]],
    "verbs.rtr": [_UC_RTR, ["IBV_QP_AV", "IBV_QP_PATH_MTU", "IBV_QP_RQ_PSN", "IBV_QP_DEST_QPN"],
                  e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_RQ_PSN | e.IBV_QP_DEST_QPN],
    "send.opcodes": [_sends(_N), [0x00] + [0x01] * (_N - 2) + [0x02]],
    "send.rnr": [_RNR_MS, str(_RNR_MS), f"{_RNR_MS} ms"],
    "write.imm": [write_imm(), write_imm(imm=socket.htonl)],
    "read.program": [read_remote()],
    "read.responses": [[_READ_N, _READ_LAST], (str(_READ_N), hex(_READ_LAST))],
    "atomic.final": [[_RET, _FIN], ([hex(_RET[0]), *_RET[1:]], str(_FIN))],
    "atomic.lock": [try_lock()],
    "wires.bth": [BTH_OK, bytearray(BTH_OK), BTH_OK.hex(), BTH_OK.hex(" "), list(BTH_OK), BTH_TASK],
    "wires.icrc": [ICRC, ICRC.to_bytes(4, "little"), ICRC.to_bytes(4, "little").hex(), hex(ICRC)],
    "wires.crc32c": [BAD, tuple(BAD), set(BAD), [str(i) for i in BAD]],
    "wires.which": [["RoCEv2", "iWARP", "IB", "RoCEv1"], ["rocev2", "IWARP", "native IB", "RoCE v1"]],
    "wires.iwarp_overhead": [20, "20", " 20 "],
    "captures.rkey": [RKEY, hex(RKEY), str(RKEY)],
    "captures.stag": [STAG, hex(STAG), str(STAG)],
    "captures.agree": [],  # depends on tshark; covered by test_agree_* below
    "reliability.nak": [{"code": c, "lost": LOST, "resend_from": RESEND} for c in
                        (0, "0", "0x0", "PSN Sequence Error", "psn_sequence_error", Nak.PSN_SEQUENCE_ERROR, 0x60)]
                       + [{"code": 0, "lost": hex(LOST), "resend_from": str(RESEND)}],
    "reliability.timeout": [{"resent": RESENT, "waited_ms": WAITED},
                            {"resent": str(RESENT), "waited_ms": f"{WAITED:.1f} ms"}],
    "congestion.ce": [ce_frame()],
    "congestion.cnp": [cnp()],
    "security.fix": [write_to_peer()],
    "security.guess": [["IBV_WC_REM_ACCESS_ERR", "Remote Access Error"], [e.IBV_WC_REM_ACCESS_ERR, 2],
                       ["REM_ACCESS_ERR", Nak.REMOTE_ACCESS_ERROR]],
    "security.flags": [{"read": {"REMOTE_READ"}, "atomic": {"LOCAL_WRITE", "REMOTE_ATOMIC"}},
                       {"read": "IBV_ACCESS_REMOTE_READ",
                        "atomic": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC}],
    "cm.port": [CM["port"], str(CM["port"]), hex(CM["port"])],
    "cm.psn": [{"10.0.0.2": "REP", "10.0.0.1": "REQ"}, {"10.0.0.2": "rep", "10.0.0.1": "req"}],
    "cm.req_psn": [PSNS, {k: hex(v) for k, v in PSNS.items()}, {k: str(v) for k, v in PSNS.items()}],
    "cm.first_rts": ["server", "passive", " Server "],
    "cm.service_id": [{"port_space": CM["ps"], "port": CM["sid_port"]},
                      {"port_space": f"{CM['ps']:#06x}", "port": str(CM["sid_port"])}],
    "live.segments": [SEG, {"writes": str(SEGMENTS), "read_responses": hex(SEGMENTS), "last_payload": str(LAST)}],
    "congestion.victim": [{"port": "P1->P2", "reason": "B"}, {"port": "P1 \u2192 P2", "reason": "b"}],
    "congestion.converge": [{"settings": {"rpg_ai_rate": "200"}, "cost": "queue"}],
    "live.error_fields": [{"wr_id", "status", "qp_num"}, ["WR_ID", "status", "qp_num", "vendor_err"]],
    "live.wrong_rkey": [["IBV_WC_REM_ACCESS_ERR", "IBV_QPS_ERR"], [e.IBV_WC_REM_ACCESS_ERR, e.IBV_QPS_ERR],
                        ["rem_access_err", "ERR"]],
    "ib.lft": [{"lid": IB_LID, "port": IB_PORT}, {"lid": str(IB_LID), "port": hex(IB_PORT)}],
    "ib.lrh": [IB_LRH, {k: str(v) for k, v in IB_LRH.items()}],
    "ib.hol": [IB_HOL, {k: round(v, 1) for k, v in IB_HOL.items()}],
    "ib.why": ["B", " b "],
    "kv.get": [kv_get_program(), kv_get_program(window=4)],
    "kv.crossover": [KV_X, {k: str(v) for k, v in KV_X.items()}],
    "kv.torn": [KV_TORN, {"torn": bytearray(KV_TORN["torn"]), "reads": str(KV_TORN["reads"])}],
    "kv.why": ["B", " b "],
}

# (answer, the field the feedback must name, a phrase the message or details must contain)
WRONG: dict[str, list[tuple[Any, str, str]]] = {
    "welcome.opcode": [("RC RDMA WRITE Only", "BTH.opcode", "frame 2"), (0x0A, "BTH.opcode", "frame 2"),
                       ("READ", "BTH.opcode", "opcode_name"), (12.0, "BTH.opcode", "float")],
    "dma.copies": [(1, "copies", "another"), (3, "copies", "rchar"), (2.0, "copies", "float"),
                   ("two", "copies", "integer")],
    "dma.syscalls": [(2, "syscalls", "syscr"), (b"\x00", "syscalls", "int.from_bytes")],
    "verbs.path": [(["INIT", "RTR", "RTS"], "qp_state", "ERR -> INIT"), (["RESET", "INIT", "RTR"], "qp_state", "ends in RTR"),
                   (["RESET", "INIT", "RTS"], "qp_state", "INIT -> RTS"), (["RESET", "READY"], "qp_state", "not a QP state"),
                   (["RESET", "INIT", "RTR", "RTS", "SQD", "RTS"], "qp_state", "shorter")],
    "verbs.rtr": [({"AV", "PATH_MTU"}, "attr_mask", "missing"), (_RC_RTR, "attr_mask", "RC QP"),
                  (_UC_RTR | {"MIN_RNR_TIMER"}, "attr_mask", "no RNR NAK"),
                  (_UC_RTR | {"SQ_PSN"}, "attr_mask", "not even allowed"),
                  (_UC_RTR | {"ACCESS_FLAGS"}, "attr_mask", "may be given"), ("AV", "attr_mask", "set")],
    "send.opcodes": [(_sends(_N - 1), "BTH.opcode", f"{_N - 1} packet(s)"),
                     (_sends(_N + 1), "BTH.opcode", f"listed {_N + 1} packets"),
                     (_sends(_N, first="RC SEND Only"), "BTH.opcode", "first packet (opcodes[0])"),
                     ([0x00] + [0x01] * (_N - 3) + [0x02, 0x02], "BTH.opcode", f"packet (opcodes[{_N - 2}])"),
                     ("RC SEND First", "BTH.opcode", "list")],
    "send.rnr": [(_RNR_CODE, "AETH.value", "timer code itself"), (_RNR_MS * 1000, "AETH.value", "microseconds"),
                 (_RNR_MS / 1000, "AETH.value", "seconds"), (_RNR_MS + 1000, "AETH.value", "not the delay"),
                 ([_RNR_MS], "AETH.value", "number")],
    "write.imm": [(write_imm(post_recv=False), "AETH.syndrome", "RNR NAK"),
                  (write_imm(rkey="wrong"), "AETH.syndrome", "Remote Access Error"),
                  (write_imm(ret="a"), "wc.opcode", "A's own completion"),
                  (write_imm(opcode=e.IBV_WR_RDMA_WRITE, post_recv=False), "BTH.opcode", "immediate data"),
                  (write_imm(imm=lambda x: x + 1), "ImmDt.imm", "not the imm argument"),
                  (42, "write_with_imm", "function")],
    "read.program": [(read_remote(offset_fix=1), "RETH.va", "remote address"),
                     (read_remote(length_fix=-1), "length", "2999 bytes"),
                     (read_remote(op=e.IBV_WR_RDMA_WRITE), "BTH.opcode", "READ Request"),
                     (b"secret", "read_remote", "function")],
    "read.responses": [([_READ_N - 1, _READ_LAST], "BTH.opcode", "remainder"),
                       ([_READ_N + 1, _READ_LAST], "BTH.opcode", "READ Request is A's"),
                       ([float(_READ_N), _READ_LAST], "BTH.opcode", "float"),
                       ([_READ_N, _READ.mtu], "READ Response Last: data", "full MTU"),
                       (_READ_N, "answer", "count is right")],
    "atomic.final": [([_RET, _RET[3]], "counter", "final counter"),
                     ([[_RET[1], *_RET[1:]], _FIN], "AtomicAckETH.orig_data", "r1 is wrong"),
                     ([[*_RET[:2], _RET[2] + 1, _RET[3]], _FIN], "AtomicAckETH.orig_data", "r3 is wrong"),
                     ([*_RET, _FIN], "answer", "4 returned values")],
    "atomic.lock": [(try_lock(op=e.IBV_WR_ATOMIC_FETCH_AND_ADD), "BTH.opcode", "CmpSwap"),
                    (try_lock(result="int"), "return value", "True")],
    "wires.bth": [(BTH_TASK.replace(padcnt=0).encode(), "BTH.padcnt", f"expected {BTH_TASK.padcnt}"),
                  *([(BTH_TASK.replace(psn=_swap24(BTH_TASK.psn)).encode(), "BTH.psn", "wrong byte order")]
                    if _swap24(BTH_TASK.psn) != BTH_TASK.psn else []),
                  (BTH_TASK.replace(destqp=BTH_TASK.destqp ^ 1).encode(), "BTH.destqp",
                   f"expected {BTH_TASK.describe('destqp')}"),
                  (BTH_TASK.replace(opcode=0x00).encode(), "BTH.opcode", f"expected {BTH_TASK.describe('opcode')}"),
                  (BTH_TASK.replace(opcode=0, padcnt=0, destqp=1, psn=1).encode(), "BTH.opcode", "yours alone"),
                  (BTH_OK[:11], "BTH", "12 bytes"), (BTH_OK + b"\x00", "BTH", "12 bytes"),
                  (int.from_bytes(BTH_OK, "big"), "BTH", "to_bytes")],
    "wires.icrc": [(ICRC.to_bytes(4, "big"), "ICRC", "byte order"), (ICRC.to_bytes(4, "little")[:3], "ICRC", "4 bytes"),
                   (zlib.crc32(_masked_icrc_input()[8:]), "ICRC", "0xff"),
                   (zlib.crc32(b"\xff" * 8 + icrc_frame()[14:-4]), "ICRC", "mask"), (ICRC + 1, "ICRC", "usual slips"),
                   (float(ICRC), "ICRC", "bytes")],
    "wires.crc32c": [([i + 1 for i in BAD], "MPA CRC", "one too high"),
                     (sorted([*BAD, GOOD]), "MPA CRC", "correct CRC32c"), (BAD[:1], "MPA CRC", "missing"),
                     (BAD[0], "MPA CRC", f"[{BAD[0]}]"), ([], "MPA CRC", "empty"),
                     (list(range(FPDUS)), "MPA CRC", "little-endian"), ([FPDUS + 5], "MPA CRC", "not among them")],
    "wires.iwarp_overhead": [(16, "FPDU", "CRC32c"), (74, "FPDU", "Ethernet, IPv4 and TCP"),
                             (60, "FPDU", "per FPDU")],
    "wires.which": [(["RoCEv2", "iWARP", "IB", "RoCEv2"], "names[3]: Ethernet.type", "fourth frame"),
                    (["RoCEv1", "iWARP", "IB", "RoCEv1"], "names[0]: Ethernet.type", "first frame"),
                    (["RoCEv2", "iWARP", "IB"], "frames", "4 names")],
    "captures.rkey": [(int.from_bytes(RKEY.to_bytes(4, "little"), "big"), "RETH.r_key", "byte order"),
                      (KEYS["psn"], "RETH.r_key", "psn"), (RKEY.to_bytes(4, "big"), "RETH.r_key", "int.from_bytes"),
                      (KEYS["sink"], "RETH.r_key", "second SEND"), (0x142A, "RETH.r_key", "rxe_rping.pcap"),
                      (RKEY ^ 0x8000_0000, "RETH.r_key", "not the rkey")],
    "captures.stag": [(int.from_bytes(STAG.to_bytes(4, "little"), "big"), "DDP.stag", "byte order"),
                      (STAG ^ 0x8000_0000, "DDP.stag", "not the STag"), (0x6F092200, "DDP.stag", "siw_rping.pcap"),
                      (float(STAG), "DDP.stag", "float")],
    "captures.agree": [],
    "reliability.nak": [({"code": 2, "lost": LOST, "resend_from": RESEND}, "AETH.value", "Remote Access Error"),
                        ({"code": "RNR", "lost": LOST, "resend_from": RESEND}, "AETH.value", "not a NAK code"),
                        ({"code": 0, "lost": LOST + 1, "resend_from": RESEND}, "BTH.psn", "one off"),
                        ({"code": 0, "lost": LOST, "resend_from": RESEND + 1}, "BTH.psn", "resume"),
                        ({"code": 0, "lost": float(LOST), "resend_from": RESEND}, "BTH.psn", "float"),
                        (["code", "lost"], "answer", "dict")],
    "reliability.timeout": [({"resent": 1, "waited_ms": WAITED}, "retransmitted packets", "lost"),
                            ({"resent": RESENT + 1, "waited_ms": WAITED}, "retransmitted packets", "off by one"),
                            ({"resent": 10 * RESENT + 1, "waited_ms": WAITED}, "retransmitted packets",
                             "more than your message has"),
                            ({"resent": RESENT, "waited_ms": WAITED * 1000}, "waited_ms", "microseconds"),
                            ({"resent": RESENT, "waited_ms": OTHER_TIMER}, "waited_ms", "timeout code"),
                            (RESENT, "answer", "dict")],
    "congestion.ce": [(ce_frame(ecn=2), "IPv4.ecn", "0b11"), (ce_frame(fix_checksum=False), "IPv4.checksum", "recomputes"),
                      (ce_frame(ttl=1), "IPv4.ttl", "other field"), (ce_frame()[:-1], "frame length", "keep its length")],
    "congestion.cnp": [(cnp(opcode=0x11), "BTH.opcode", "CNP"), (cnp(destqp=0x11), "BTH.destqp", "requester"),
                       (cnp(becn=0), "BTH.becn", "BECN"), (cnp(ips=cnp_ips()[::-1]), "IPv4.src", "other way")],
    "security.fix": [(write_to_peer(sge_key="rkey"), "wc.status", "local protection"),
                     (write_to_peer(reth_key="lkey"), "AETH.syndrome", "Remote Access Error")],
    "security.guess": [(["IBV_WC_LOC_PROT_ERR", "Remote Access Error"], "wc.status", "not the completion status"),
                       (["IBV_WC_REM_ACCESS_ERR", "PSN Sequence Error"], "AETH.value", "not the NAK"),
                       (["IBV_WC_REM_ACCESS_ERR"], "answer", "status")],
    "security.flags": [({"read": {"REMOTE_READ", "REMOTE_WRITE"}, "atomic": {"LOCAL_WRITE", "REMOTE_ATOMIC"}},
                        "mr.access[read]", "more than needed"),
                       ({"read": {"REMOTE_READ"}, "atomic": {"REMOTE_ATOMIC"}}, "mr.access[atomic]", "missing")],
    "cm.port": [(35360, "CM_REQ.service_id", "source port"), (swap16(CM["port"]), "CM_REQ.service_id", "byte order"),
                (CM["port"] + 1, "CM_REQ.service_id", "Not the port")],
    "cm.psn": [({"10.0.0.2": "REQ", "10.0.0.1": "REP"}, "BTH.psn", "starting PSN"),
               ({"10.0.0.2": "REP"}, "IPv4.src", "10.0.0.1")],
    "cm.req_psn": [({k: PSNS[f"{'server' if k.startswith('client') else 'client'}.{k[7:]}"] for k in PSNS},
                    "client.sq_psn", "not on the side it belongs to"),
                   (PSNS | {"server.rq_psn": PSNS["server.rq_psn"] ^ 1}, "server.rq_psn", "neither"),
                   (PSNS | {"server.rq_psn": PSNS["client.rq_psn"]}, "server.rq_psn", "same packets"),
                   (PSNS | {"client.sq_psn": PSNS["server.sq_psn"], "server.rq_psn": PSNS["server.sq_psn"]},
                    "client.sq_psn", "same message"),
                   (("server", "sq_psn"), "answer", "four keys")],
    "cm.first_rts": [("client", "QP.state", "first row where a QP column shows RTS"), (1, "answer", "Name a side"),
                     ("rts", "answer", "Name a side")],
    "cm.service_id": [({"port_space": CM["ps"], "port": swap16(CM["sid_port"])}, "service_id", "port space is right"),
                      ({"port_space": CM["ps"] + 1, "port": CM["sid_port"]}, "service_id", "port is right"),
                      ({"port_space": CM["ps"] + 1, "port": CM["sid_port"] + 1}, "service_id", "Neither"),
                      ({"port_space": CM["sid_port"], "port": CM["ps"]}, "service_id", "wrong places"),
                      ((CM["ps"], CM["sid_port"]), "answer", "keys")],
    "congestion.victim": [({"port": "P2->R2", "reason": "B"}, "port", "F1's path"),
                          ({"port": "P1->P2", "reason": "A"}, "reason", "never enters"),
                          ({"port": "P1->P2", "reason": "C"}, "reason", "CNP goes back"),
                          (["P1->P2", "B"], "answer", "dict")],
    "congestion.converge": [({"settings": {"no_such": "1"}, "cost": "queue"}, "settings", "unknown parameter"),
                            ({"settings": {}, "cost": "queue"}, "settings", "at least one"),
                            ({"settings": {"rpg_ai_rate": "200"}, "cost": "latency"}, "cost", "must be one of"),
                            ({"settings": {"rpg_ai_rate": "200"}}, "answer", "dict")],
    "live.segments": [(SEG | {"writes": SEGMENTS - 1}, "BTH.opcode", "WRITE packets"),
                      (SEG | {"read_responses": SEGMENTS + 1}, "BTH.opcode", "READ request itself"),
                      (SEG | {"writes": float(SEGMENTS)}, "BTH.opcode", "float"),
                      (SEG | {"last_payload": 1024}, "payload", "full packet"),
                      ([SEGMENTS, SEGMENTS], "answer", "Give")],
    "live.error_fields": [({"wr_id", "status"}, "wc", "missing"),
                          ({"wr_id", "status", "qp_num", "byte_len"}, "wc", "not defined")],
    "live.wrong_rkey": [(["IBV_WC_LOC_PROT_ERR", "IBV_QPS_ERR"], "wc.status", "completion status"),
                        (["IBV_WC_REM_ACCESS_ERR", "RTS"], "qp_state", "state")],
    "ib.lft": [({"lid": IB_LID % 6 + 1, "port": IB_PORT}, "PortInfo.lid", "SM on"),
               ({"lid": IB_LID, "port": IB_PORT % 6 + 1}, "LinearForwardingTable", "forwarding table"),
               ([IB_LID, IB_PORT], "answer", "Give")],
    "ib.lrh": [(IB_LRH | {"last_pktlen": IB_LRH["last_pktlen"] + 1}, "LRH.pktlen", "VCRC"),
               (IB_LRH | {"last_pktlen": IB_LRH["last_pktlen"] * 4}, "LRH.pktlen", "4-byte words"),
               (IB_LRH | {"vl": 15}, "LRH.vl", "management lane"),
               (IB_LRH | {"packets": IB_LRH["packets"] + 1}, "BTH.opcode", "payload")],
    "ib.hol": [({"shared_vl_gbps": IB_HOL["own_vl_gbps"], "own_vl_gbps": IB_HOL["shared_vl_gbps"]},
                "shared_vl_gbps", "other run"),
               ({"shared_vl_gbps": IB_HOL["shared_vl_gbps"], "own_vl_gbps": "fast"}, "own_vl_gbps", "number")],
    "ib.why": [("A", "drops", "Nothing was dropped"), ("C", "answer", "CNPs")],
    "kv.get": [(kv_get_program(verify=False), "CRC32", "torn value"),
               (kv_get_program(probe=False), "probe sequence", "next buckets"),
               (kv_get_program(stop_at_empty=False), "READs", "first empty bucket")],
    "kv.crossover": [({**KV_X, "reads": KV_X["reads"] + 1}, "reads", "already at"),
                     ({**KV_X, "rpc_ns": _KV_READS[0]}, "rpc_ns", "a GET by one READ")],
    "kv.torn": [({**KV_TORN, "torn": _KV_T.new.encode()}, "torn", "one whole value"),
                ({**KV_TORN, "reads": KV_TORN["reads"] - 1}, "reads", "more READs")],
    "kv.why": [("A", "answer", "bytes"), ("C", "answer", "round trip")],
}


def test_every_exercise_has_right_and_wrong_answers() -> None:
    ids = {x.id for x in lab.exercises().items}
    assert ids == set(RIGHT) == set(WRONG)
    no_tshark = {"captures.agree"}  # its answer comes from tshark: test_agree_* below
    for ex in ids - no_tshark:
        assert RIGHT[ex] and WRONG[ex], ex


@pytest.mark.parametrize("ex,answer", [(k, a) for k, v in RIGHT.items() for a in v],
                         ids=[f"{k}-{i}" for k, v in RIGHT.items() for i in range(len(v))])
def test_right_answers_in_any_reasonable_form_pass(ex: str, answer: Any) -> None:
    r = lab.check(ex, answer)
    assert r.status == PASS, repr(r)


@pytest.mark.parametrize("ex,answer,field,phrase", [(k, *w) for k, v in WRONG.items() for w in v],
                         ids=[f"{k}-{i}" for k, v in WRONG.items() for i in range(len(v))])
def test_wrong_answers_name_field_value_and_expectation(ex: str, answer: Any, field: str, phrase: str) -> None:
    r = lab.check(ex, answer)
    assert r.status == FAIL, repr(r)
    assert r.field == field, repr(r)
    assert r.given, f"the feedback does not show the value given: {r!r}"
    assert r.expected, f"the feedback does not say what was expected: {r!r}"
    text = " ".join([r.message, *r.details]).lower()
    assert phrase.lower() in text, repr(r)
    shown = repr(r)
    assert f"you gave: {r.given}" in shown and f"expected: {r.expected}" in shown
    html = r._repr_html_()
    assert "You gave" in html and "Expected" in html


def test_a_value_given_is_shown_as_given() -> None:
    r = lab.check("captures.rkey", RKEY ^ 0x8000_0000)
    assert r.given == f"{RKEY ^ 0x8000_0000} ({RKEY ^ 0x8000_0000:#x})"
    r = lab.check("reliability.nak", {"code": 0, "lost": LOST + 1, "resend_from": RESEND})
    assert r.given == f"{LOST + 1} ({LOST + 1:#x})"
    r = lab.check("wires.bth", BTH_TASK.replace(padcnt=0).encode())
    assert (r.given, r.expected) == ("BTH.padcnt = 0", f"BTH.padcnt = {BTH_TASK.padcnt}")


def test_agree_rejects_a_malformed_answer_with_the_expected_shape() -> None:
    from rdmalab.capture.crosscheck import tshark_path

    if tshark_path() is None:
        pytest.skip("tshark is not installed: captures.agree cannot be checked without it")
    r = lab.check("captures.agree", 5)
    assert r.status == FAIL and r.field == "answer" and r.given == "5" and "fields_compared" in (r.expected or "")
    r = lab.check("captures.agree", [1, 0])
    assert r.status == FAIL and r.field == "report.fields_compared" and r.given == "1"


_EVERY = [(k, a) for k, v in RIGHT.items() for a in v] + [(k, w[0]) for k, v in WRONG.items() for w in v]


@pytest.mark.parametrize("ex,answer", _EVERY, ids=[f"{k}-{i}" for i, (k, _) in enumerate(_EVERY)])
def test_the_grader_judges_the_reported_answer_as_the_kernel_did(ex: str, answer: Any, tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`rdmalab grade` judges the values lab.check reported, in its own process: same verdict, same feedback."""
    from rdmalab.lab.grade import read_reports

    log = tmp_path / "checks.jsonl"
    monkeypatch.setenv("RDMALAB_CHECK_LOG", str(log))
    r = lab.check(ex, answer)
    rows, notes = read_reports(log.read_text(encoding="utf-8"))
    assert not notes and len(rows) == 1, (rows, notes)
    assert (rows[0]["status"], rows[0]["field"], rows[0]["message"], rows[0]["given"]) == \
        (r.status, r.field, r.message, r.given)


def test_wording_counts_like_people_and_rdmalab_decode() -> None:
    """Issue 20, item 5: packets counted from 1 in words (with the list index), a duration or a count never
    shown in hex, no doubled punctuation after a title ending in '?', and a count is not called a field."""
    r = lab.check("send.opcodes", _sends(_N, last="RC SEND Only"))
    assert f"The {nth(_N - 1)} packet (opcodes[{_N - 1}])" in r.message and f"Packet {_N - 1}" not in r.message
    micro = round(_RNR_MS * 1000)
    r = lab.check("send.rnr", micro)
    assert r.given == str(micro) and "0x" not in repr(r)
    r = lab.check("reliability.timeout", {"resent": 12, "waited_ms": WAITED})
    assert r.given == "12"
    html = r._repr_html_()
    assert "About: <code>retransmitted packets</code>" in html and "field <code>retransmitted" not in html
    assert "Where: field <code>BTH.opcode</code>" in lab.check("send.opcodes", ["RC SEND First"] * _N)._repr_html_()
    r = lab.check("wires.which", [..., ..., ..., ...])
    assert r.message.startswith("Which wire is which? Replace the ...") and "?:" not in r.message
    assert lab.check("wires.bth", ...).message.startswith("Build a BTH by hand: replace the ...")


def test_names_value_takes_the_number_or_a_name_with_or_without_its_prefix() -> None:
    err = e.IBV_WC_REM_ACCESS_ERR
    for said in (err, int(err), str(int(err)), "IBV_WC_REM_ACCESS_ERR", "rem access err", "REM-ACCESS-ERR"):
        assert names_value(said, err, "IBV_WC", "REM_ACCESS_ERR"), said
    for said in (e.IBV_WC_LOC_PROT_ERR, True, "IBV_WC_LOC_PROT_ERR", "IBV_QPS_ERR", "", None):
        assert not names_value(said, err, "IBV_WC", "REM_ACCESS_ERR"), said
    assert names_value("IBV_QPS_ERROR", e.IBV_QPS_ERR, "IBV_QPS", "ERR", "ERROR")
