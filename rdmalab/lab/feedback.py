"""Helpers that turn a wrong answer into a message naming the field, the offset and the kind of value."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from rdmalab.lab.core import Said, Wrong
from rdmalab.wire.header import Header


def as_bytes(answer: Any, what: str, *, field: str | None = None) -> bytes:
    """Accept bytes, bytearray, a hex string or a list of ints; explain anything else."""
    if isinstance(answer, (bytes, bytearray, memoryview)):
        return bytes(answer)
    if isinstance(answer, str):
        try:
            return bytes.fromhex(answer.replace(":", " "))
        except ValueError:
            raise Wrong(f"{what}: the string {answer[:40]!r} is not hexadecimal bytes (e.g. '04 00 ff ff').",
                        field=field, given=answer, expected="bytes, or a string of hex digits") from None
    if isinstance(answer, (list, tuple)) and all(isinstance(x, int) and 0 <= x < 256 for x in answer):
        return bytes(answer)
    if isinstance(answer, Header):
        return answer.encode()
    hint = ""
    if isinstance(answer, int) and not isinstance(answer, bool):
        hint = " An integer has no byte order or length: write it with n.to_bytes(length, 'big')."
    raise Wrong(f"{what}: expected bytes (for example b'\\x04\\x00...' or bytes.fromhex(...)), "
                f"got a {type(answer).__name__}.{hint}", field=field, given=answer,
                expected="bytes (or a hex string)")


def as_int(answer: Any, what: str, *, field: str | None = None) -> int:
    """Accept an int (an IntEnum too, or a numpy integer) or a decimal/0x-hex string; explain anything else."""
    if isinstance(answer, bool):
        raise Wrong(f"{what}: expected an integer, got a bool.", field=field, given=answer, expected="an integer")
    if isinstance(answer, int):
        return int(answer)
    if isinstance(answer, str):
        try:
            return int(answer.strip().replace("_", ""), 0)
        except ValueError:
            pass
    if hasattr(answer, "__index__"):  # numpy integers
        return int(operator.index(answer))
    hint = ""
    if isinstance(answer, float):
        hint = " (a float: write the whole number, e.g. int(x), and check that it is one)"
    elif isinstance(answer, (bytes, bytearray)):
        hint = " (bytes: turn them into a number with int.from_bytes(b, 'big'), in the byte order of the field)"
    raise Wrong(f"{what}: expected an integer (decimal or 0x... hex), got a {type(answer).__name__}{hint}.",
                field=field, given=answer, expected="an integer")


def as_letter(answer: Any, options: Mapping[str, str]) -> str:
    """A multiple-choice answer: one of the letters of ``options`` (any case, spaces around it), upper-cased;
    anything else is explained."""
    if not isinstance(answer, str) or answer.strip().upper() not in options:
        letters = ", ".join(options)
        raise Wrong(f"Answer with one letter of {letters}.", field="answer", given=answer,
                    expected=" or ".join(letters.rsplit(", ", 1)))
    return answer.strip().upper()


def _kind(header: type[Header], name: str) -> str:
    f = header.LAYOUT.field(name)
    doc = f" ({f.doc})" if f.doc else ""
    return f"a {f.bits}-bit value{doc}"


def compare_header(expected: Header, answer: Any, *, base_offset: int = 0, show_values: bool = True) -> None:
    """Raise :class:`Wrong` naming the first wrong fields of a header built by hand.

    With ``show_values`` (the default: the exercise states the values) the feedback says the value
    each wrong field should have; without, only what kind of value it is.
    """
    cls = type(expected)
    name = cls.LAYOUT.name
    got = as_bytes(answer, f"your {name}", field=name)
    size = cls.LAYOUT.size
    if len(got) != size:
        raise Wrong(f"A {name} is {size} bytes long ({cls.LAYOUT.spec}); yours is {len(got)} bytes.",
                    field=name, offset=base_offset + min(len(got), size), given=got,
                    expected=f"{size} bytes")
    decoded = cls.decode(got)
    wrong = []
    for f in cls.LAYOUT.fields:
        want, have = getattr(expected, f.name), getattr(decoded, f.name)
        if want != have:
            wrong.append((f, want, have))
    if not wrong:
        return
    details = []
    for f, want, have in wrong:
        hi = 7 - f.bit_offset % 8
        bits = "" if f.bits >= 8 else (f" (bit {hi})" if f.bits == 1 else f" (bits {hi}-{hi - f.bits + 1})")
        line = (f"{name}.{f.name} at byte {base_offset + f.byte_start}{bits}, {_kind(cls, f.name)}"
                f": you encoded {decoded.describe(f.name)}")
        line += f"; expected {expected.describe(f.name)}" if show_values else ""
        if f.bits % 8 == 0 and f.bits > 8 and isinstance(want, int) and isinstance(have, int) and \
                int.from_bytes(have.to_bytes(f.bits // 8, "big"), "little") == want:
            line += " (right value, wrong byte order: headers are big-endian, most significant byte first)"
        details.append(line)
    f0, want0, have0 = wrong[0]
    raise Wrong(f"{len(wrong)} field(s) of your {name} differ; the first is {name}.{f0.name} at byte "
                f"{base_offset + f0.byte_start}: you encoded {decoded.describe(f0.name)}, "
                + (f"expected {expected.describe(f0.name)}." if show_values else f"expected {_kind(cls, f0.name)}.")
                + (" Right value, wrong byte order." if "wrong byte order" in details[0] else ""),
                field=f"{name}.{f0.name}", offset=base_offset + f0.byte_start, details=details,
                given=Said(f"{name}.{f0.name} = {decoded.describe(f0.name)}"),
                expected=f"{name}.{f0.name} = {expected.describe(f0.name)}" if show_values else _kind(cls, f0.name))


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


def names_value(answer: Any, value: int, prefix: str, *names: str) -> bool:
    """Whether ``answer`` stands for the enum ``value``: the number (an IntEnum member too), its decimal
    string, or one of ``names`` with or without ``prefix`` (``names_value(a, IBV_WC_REM_ACCESS_ERR, "IBV_WC",
    "REM_ACCESS_ERR")`` takes ``10``, ``"10"``, ``"IBV_WC_REM_ACCESS_ERR"``, ``"rem access err"``); case, spaces,
    underscores and dashes aside (:func:`norm_name`)."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return answer == value
    name, head = norm_name(answer), norm_name(prefix)
    if name.startswith(head):
        name = name[len(head):]
    return name == str(value) or name in {norm_name(n) for n in names}


def plain(value: Any) -> Said:
    """A count or a duration as the learner wrote it (``show`` would add the hex: "1280 (0x500)")."""
    return Said(str(value))


_NTH = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def nth(index: int) -> str:
    """The ordinal of a 0-based index, as people count: 0 -> "first", 4 -> "fifth", 11 -> "12th"."""
    return _NTH[index] if 0 <= index < len(_NTH) else f"{index + 1}th"
