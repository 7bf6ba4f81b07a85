"""Answers as data: what a learner's kernel reports, so that a grader can check it in its own process.

``lab.check`` writes every answer it is given to the check log (``RDMALAB_CHECK_LOG``) as plain
JSON (:func:`encode`).  ``rdmalab grade`` reads those values back (:func:`decode`) and runs the
checkers itself: nothing the student's code does to ``lab.check``, the checkers, the feedback
module, the types of its answers (an ``__eq__`` that is always true) or the statuses in the log
reaches the grade, because the grader never takes a status, an object or code from the kernel,
only values.

Values are ints, floats, strings, bools, ``None`` and ``...``, bytes (``{"$bytes": hex}``), lists,
tuples, sets and dicts of those.  An enum member is its value (an ``IntEnum``) or its name; a
:class:`~rdmalab.wire.header.Header` is its encoded bytes; a numpy integer is an int.  Anything
else is reported as its type name only (:class:`Opaque`), which no checker accepts.

Answers that are programs (a function ``(pair, ...) -> ...``, exercises registered with a
:class:`Program`) cannot travel as values: the kernel runs the function on a fresh
:class:`~rdmalab.lab.pair.SoftPair` as the checker prescribes and reports what it did (a
:class:`Run`: the values returned, the trace with every frame on the wire, the start of both
memory regions).  The checker judges that record, in the kernel for the learner's feedback and
in the grader for the grade, the same way.  What this does not prevent is said in
docs/teaching.md.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rdmalab.lab.pair import SoftPair
from rdmalab.verbs.cq import WC
from rdmalab.verbs.trace import Trace, TraceEvent
from rdmalab.wire import decode_ethernet
from rdmalab.wire.header import Header

#: how many bytes of each side's memory region a :class:`Run` keeps (the checkers look at the first 4 KiB)
MEMORY_KEPT = 8192
_WC_FIELDS = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "qp_num", "src_qp", "imm_data", "wc_flags",
              "pkey_index", "slid", "sl", "dlid_path_bits")


class BadReport(ValueError):
    """A reported answer that is not the shape :func:`encode` writes."""


@dataclass(frozen=True)
class Opaque:
    """An answer of a type that cannot be reported as a value: only its type name travels."""

    type_name: str

    def __repr__(self) -> str:
        return f"<a {self.type_name}>"


@dataclass(frozen=True)
class Raised:
    """The learner's function raised instead of returning (``NotImplementedError`` means "not yet")."""

    type_name: str
    message: str


def encode(value: Any, _depth: int = 0) -> Any:
    """A learner's answer as plain JSON data (see the module docstring)."""
    if _depth > 20:
        raise BadReport("the answer is nested more than 20 levels deep")
    d = _depth + 1
    if value is None or value is Ellipsis:
        return None if value is None else {"$ellipsis": True}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, enum.Enum) and not isinstance(value, int):
        return str(value.name)
    if isinstance(value, int):
        return int.__index__(value)  # the value itself, whatever the subclass says about __eq__ or __int__
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, Header):
        return {"$bytes": value.encode().hex()}
    if isinstance(value, Run):
        return {"$run": value.to_json()}
    if isinstance(value, Raised):
        return {"$raised": [value.type_name, value.message]}
    if isinstance(value, WC):
        return {"$wc": {k: int(getattr(value, k)) for k in _WC_FIELDS}}
    if isinstance(value, Opaque):
        return {"$opaque": value.type_name}
    if isinstance(value, list):
        return [encode(v, d) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$tuple": [encode(v, d) for v in tuple.__iter__(value)]}
    if isinstance(value, (set, frozenset)):
        return {"$set": [encode(v, d) for v in value]}
    if isinstance(value, dict):
        return {"$dict": [[encode(k, d), encode(v, d)] for k, v in dict.items(value)]}
    if hasattr(type(value), "__index__") and not callable(value):  # numpy integers
        try:
            return int(operator.index(value))
        except Exception:
            pass
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # numpy floats and bools
        return encode(value.item(), d)
    return {"$opaque": type(value).__name__}


def decode(data: Any, _depth: int = 0) -> Any:
    """The value :func:`encode` wrote, as plain Python objects; :class:`BadReport` for anything else."""
    if _depth > 20:
        raise BadReport("the report is nested more than 20 levels deep")
    d = _depth + 1
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, d) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise BadReport(f"not an encoded answer: {str(data)[:80]}")
    (tag, v), = data.items()
    try:
        if tag == "$ellipsis":
            return Ellipsis
        if tag == "$bytes":
            return bytes.fromhex(v)
        if tag == "$tuple":
            return tuple(decode(x, d) for x in v)
        if tag == "$set":
            return {decode(x, d) for x in v}
        if tag == "$dict":
            return {decode(k, d): decode(x, d) for k, x in v}
        if tag == "$opaque":
            return Opaque(str(v))
        if tag == "$raised":
            return Raised(str(v[0]), str(v[1]))
        if tag == "$wc":
            return WC(**{k: int(v[k]) for k in _WC_FIELDS})
        if tag == "$run":
            return Run.from_json(v)
    except BadReport:
        raise
    except Exception as err:  # wrong shapes inside a tag: say which
        raise BadReport(f"a malformed {tag} value: {type(err).__name__}: {err}") from None
    raise BadReport(f"unknown tag {tag!r}")


class _Memory:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, length: int, offset: int) -> bytes:
        if offset < 0 or offset + length > len(self.data):
            raise ValueError(f"the recorded run kept only the first {len(self.data)} bytes of this memory region")
        return self.data[offset:offset + length]


@dataclass
class _Side:
    name: str
    mr: _Memory


class Run:
    """What a learner's program did on a :class:`~rdmalab.lab.pair.SoftPair`, as data.

    It stands in for the pair in the checkers (``trace``, ``packets()``, ``a.name``,
    ``b.mr.read(length, offset)``), and ``returned`` holds what each call returned.
    """

    def __init__(self, returned: list[Any], trace: list[TraceEvent], frames: list[bytes], names: tuple[str, str],
                 memory: tuple[bytes, bytes]) -> None:
        self.returned = returned
        self.trace = Trace(trace)
        self.frames = frames
        self.a = _Side(names[0], _Memory(memory[0]))
        self.b = _Side(names[1], _Memory(memory[1]))

    def packets(self) -> list[Any]:

        return [decode_ethernet(f, lenient=True) for f in self.frames]

    @classmethod
    def of(cls, pair: Any, returned: list[Any]) -> Run:
        kept = [side.mr.read(min(MEMORY_KEPT, side.mr.length), 0) for side in (pair.a, pair.b)]
        return cls(returned, list(pair.trace), [f for *_, f in pair.frames], (pair.a.name, pair.b.name),
                   (kept[0], kept[1]))

    def to_json(self) -> dict[str, Any]:
        return {
            "returned": [encode(r) for r in self.returned],
            "trace": [[ev.time_ns, ev.node, ev.qpn, ev.kind, ev.psn, ev.opcode, encode(dict(ev.detail)),
                       None if ev.frame is None else ev.frame.hex()] for ev in self.trace],
            "frames": [f.hex() for f in self.frames],
            "names": [self.a.name, self.b.name],
            "memory": [self.a.mr.data.hex(), self.b.mr.data.hex()],
        }

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> Run:
        def opt_int(x: Any) -> int | None:
            return None if x is None else int(x)

        trace = [TraceEvent(int(t), str(node), int(qpn), str(kind), opt_int(psn), opt_int(op), dict(decode(detail)),
                            None if frame is None else bytes.fromhex(frame))
                 for t, node, qpn, kind, psn, op, detail, frame in v["trace"]]
        a, b = v["names"]
        ma, mb = v["memory"]
        return cls([decode(r) for r in v["returned"]], trace, [bytes.fromhex(f) for f in v["frames"]],
                   (str(a), str(b)), (bytes.fromhex(ma), bytes.fromhex(mb)))


@dataclass(frozen=True)
class Program:
    """How a program exercise runs the learner's function: on ``SoftPair(seed=seed)``, after ``setup(pair)``
    (which returns the argument tuples, one per call: the function is called once per tuple)."""

    seed: int
    setup: Callable[[Any], list[tuple[Any, ...]]]

    def record(self, fn: Callable[..., Any]) -> Run:
        """Run ``fn`` as the exercise prescribes and return what it did, passed through JSON and back (so the
        learner's feedback comes from exactly the record the grader sees)."""

        pair = SoftPair(seed=self.seed)
        returned = [fn(pair, *args) for args in self.setup(pair)]
        run = Run.of(pair, returned)
        back = decode(encode(run))
        assert isinstance(back, Run)
        return back
