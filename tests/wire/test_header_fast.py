"""The code generated from header declarations (wire/header.py) equals the readable reference.

``Header.encode`` runs an encoder compiled from the layout; ``encode_reference`` is the loop that
checks, shifts and ors each field.  For every declared header: random in-range values give the
same bytes, and out-of-range, negative, bool or non-integer values give the same result or the
same error.  The generated constructor builds headers equal to the dataclass's own."""

from __future__ import annotations

import random
import sys

import pytest

import rdmalab.capture  # noqa: F401  (loads every module that declares headers)
import rdmalab.wire
from rdmalab.wire.errors import EncodeError, TruncatedError
from rdmalab.wire.header import Header, compile_constructor
from rdmalab.wire.ib import AETH


def _all_headers() -> list[type[Header]]:
    out, todo = [], list(Header.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        # dataclass(slots=True) replaces each class with a new one; the module holds the real one
        real = getattr(sys.modules[cls.__module__], cls.__name__, None) is cls
        if real and "LAYOUT" in vars(cls) and cls.encode is Header.encode:
            out.append(cls)
    return sorted(set(out), key=lambda c: (c.__module__, c.__name__))


HEADERS = _all_headers()


def test_there_are_headers_to_check() -> None:
    names = {c.__name__ for c in HEADERS}
    assert {"BTH", "RETH", "AETH", "GRH", "LRH", "IPv4", "UDP", "DETH"} <= names, names
    assert rdmalab.wire is not None


def _outcome(fn: object) -> tuple[str, object]:
    try:
        return "ok", fn()  # type: ignore[operator]
    except EncodeError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__name__}")
def test_generated_encoder_equals_reference(cls: type[Header]) -> None:
    rng = random.Random(cls.__name__)
    fields = cls.LAYOUT.fields
    for trial in range(200):
        values = [rng.getrandbits(f.bits) for f in fields]
        if trial % 4 == 0:  # the edges: all zeros, all ones
            values = [0 if trial % 8 == 0 else f.mask for f in fields]
        h = cls(*values)
        assert h.encode() == h.encode_reference() == bytes(h)
        assert cls.decode(h.encode()) == h
    for f in fields:  # a value that does not fit, in each field: the same error as the reference
        for bad in (f.mask + 1, -1, 1 << (f.bits + 7), "x", 1.5):
            values = [0] * len(fields)
            values[[g.name for g in fields].index(f.name)] = bad
            h = cls(*values)
            assert _outcome(h.encode) == _outcome(h.encode_reference)
    values = [True if f.bits == 1 else 0 for f in fields]  # bools are ints to the reference
    assert cls(*values).encode() == cls(*values).encode_reference()


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__name__}")
def test_generated_constructor_equals_dataclass(cls: type[Header]) -> None:
    make = compile_constructor(cls)
    rng = random.Random(cls.__name__)
    values = [rng.getrandbits(f.bits) for f in cls.LAYOUT.fields]
    made, ref = make(*values), cls(*values)
    assert type(made) is cls and made == ref and hash(made) == hash(ref) and repr(made) == repr(ref)
    with pytest.raises(AttributeError):
        made.__setattr__(cls.LAYOUT.fields[0].name, 1)  # still frozen


def test_aeth_shortcuts() -> None:
    assert AETH.ack(7) == AETH(type=0, value=31, msn=7) and AETH.ack(7, 3).credits == 3
    assert AETH.nak(1, 2).is_nak and AETH.rnr_nak(1, 12).is_rnr_nak


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__name__}")
def test_generated_decoder_equals_reference(cls: type[Header]) -> None:
    """``Header.decode`` (generated) and ``decode_reference`` give equal headers of the same class,
    with every field the same, at any offset; short data raises the same TruncatedError."""
    rng = random.Random("decode " + cls.__name__)
    size = cls.LAYOUT.size
    for trial in range(100):
        data = bytes(rng.getrandbits(8) for _ in range(size + 3))
        if trial % 4 == 0:  # the edges: all zeros, all ones
            data = (b"\0" if trial % 8 == 0 else b"\xff") * (size + 3)
        off = trial % 4
        got, want = cls.decode(data, off), cls.decode_reference(data, off)
        assert type(got) is type(want) is cls
        assert got == want and got.values() == want.values() and hash(got) == hash(want)
        assert got.encode() == data[off:off + size]
    for data, off in ((b"\0" * (size - 1), 0), (b"\0" * size, 1), (b"\0" * size, -1)):
        with pytest.raises(TruncatedError) as a:
            cls.decode(data, off)
        with pytest.raises(TruncatedError) as b:
            cls.decode_reference(data, off)
        assert str(a.value) == str(b.value)
