"""Helpers that turn a wrong answer into a message naming the field, the offset and the kind of value."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Wrong
from rdmalab.wire.header import Header


def as_bytes(answer: Any, what: str) -> bytes:
    """Accept bytes, bytearray, a hex string or a list of ints; explain anything else."""
    if isinstance(answer, (bytes, bytearray, memoryview)):
        return bytes(answer)
    if isinstance(answer, str):
        try:
            return bytes.fromhex(answer.replace(":", " "))
        except ValueError:
            raise Wrong(f"{what}: the string {answer[:40]!r} is not hexadecimal bytes (e.g. '04 00 ff ff').") from None
    if isinstance(answer, (list, tuple)) and all(isinstance(x, int) and 0 <= x < 256 for x in answer):
        return bytes(answer)
    if isinstance(answer, Header):
        return answer.encode()
    raise Wrong(f"{what}: expected bytes (for example b'\\x04\\x00...' or bytes.fromhex(...)), "
                f"got a {type(answer).__name__}.")


def as_int(answer: Any, what: str) -> int:
    if isinstance(answer, bool):
        raise Wrong(f"{what}: expected an integer, got a bool.")
    if isinstance(answer, int):
        return answer
    if isinstance(answer, str):
        try:
            return int(answer, 0)
        except ValueError:
            pass
    raise Wrong(f"{what}: expected an integer (decimal or 0x... hex), got {answer!r}.")


def _kind(header: type[Header], name: str) -> str:
    f = header.LAYOUT.field(name)
    doc = f" ({f.doc})" if f.doc else ""
    return f"a {f.bits}-bit value{doc}"


def compare_header(expected: Header, answer: Any, *, base_offset: int = 0, show_values: bool = False) -> None:
    """Raise :class:`Wrong` naming the first wrong fields of a header built by hand."""
    cls = type(expected)
    name = cls.LAYOUT.name
    got = as_bytes(answer, f"your {name}")
    size = cls.LAYOUT.size
    if len(got) != size:
        raise Wrong(f"A {name} is {size} bytes long ({cls.LAYOUT.spec}); yours is {len(got)} bytes.",
                    field=name, offset=base_offset + min(len(got), size))
    decoded = cls.decode(got)
    wrong = []
    for f in cls.LAYOUT.fields:
        want, have = getattr(expected, f.name), getattr(decoded, f.name)
        if want != have:
            wrong.append((f, want, have))
    if not wrong:
        return
    details = []
    for f, _want, _have in wrong:
        hi = 7 - f.bit_offset % 8
        bits = "" if f.bits >= 8 else (f" (bit {hi})" if f.bits == 1 else f" (bits {hi}-{hi - f.bits + 1})")
        line = (f"{name}.{f.name} at byte {base_offset + f.byte_start}{bits}"
                f": you encoded {decoded.describe(f.name)}; expected {_kind(cls, f.name)}")
        if show_values:
            line += f" = {expected.describe(f.name)}"
        details.append(line)
    f0 = wrong[0][0]
    raise Wrong(f"{len(wrong)} field(s) of your {name} differ; the first is {f0.name} at byte "
                f"{base_offset + f0.byte_start}.", field=f"{name}.{f0.name}", offset=base_offset + f0.byte_start,
                details=details)


def compare_sequence(expected: list[Any], answer: Any, what: str) -> None:
    if not isinstance(answer, (list, tuple)):
        raise Wrong(f"{what}: expected a list, got a {type(answer).__name__}.")
    got = list(answer)
    for i, (w, g) in enumerate(zip(expected, got, strict=False)):
        if w != g:
            raise Wrong(f"{what}: item {i} is {g!r}; expected a different value there.",
                        details=[f"the first {i} item(s) are right"])
    if len(got) != len(expected):
        raise Wrong(f"{what}: you listed {len(got)} item(s); there are {len(expected)}.",
                    details=[f"the first {min(len(got), len(expected))} item(s) are right"])


def norm_name(s: Any) -> str:
    """Normalise an opcode or status name for comparison: case, spaces, underscores, dashes."""
    return "".join(ch for ch in str(s).upper() if ch.isalnum())
