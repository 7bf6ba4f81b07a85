"""rdmalab's exceptions for bad bytes and bad values.

Every problem names the protocol layer, the field, the byte offset (from the start of the
buffer that was being decoded), the offending value and what was expected, so that a learner
sees *what* was wrong and *where* instead of an ``IndexError`` from deep inside a decoder.

``TruncatedError`` (the bytes stop before the header or payload ends) is kept apart from
``MalformedError`` (the bytes are all there but a value is impossible), because the two call for
different remedies: a short capture snap length versus a broken sender.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)
if TYPE_CHECKING:
    from typing import Any


def _restored(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    err = cls.__new__(cls, *args)  # BaseException.__new__ keeps args; __init__ is not called again
    err.__dict__.update(state)
    return err


class Picklable:
    """Mixed into an exception whose ``__init__`` takes other arguments than its message: it pickles
    as its message and its attributes, and unpickles without calling ``__init__`` again.

    Worker processes (``rdmalab decode -j``, ``convert``, the parallel column reader) send their
    errors back pickled; the default pickling of such an exception calls ``__init__`` with the message
    alone, which fails in the receiving process (and ``multiprocessing.Pool`` then waits forever)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restored, (type(self), self.args, self.__dict__))  # type: ignore[attr-defined]


class RdmalabError(Picklable, Exception):
    """Base class of every exception rdmalab raises on purpose."""


class DecodeError(RdmalabError):
    """Bytes that could not be decoded.

    Attributes mirror the message: ``layer`` (e.g. ``"BTH"``), ``field`` (e.g. ``"opcode"``),
    ``offset`` (byte offset in the decoded buffer, or ``None``), ``value`` (what was found) and
    ``expected`` (a short phrase).
    """

    kind = "bad"

    def __init__(
        self,
        layer: str,
        field: str | None,
        offset: int | None,
        value: Any,
        expected: str,
        detail: str | None = None,
    ) -> None:
        self.layer = layer
        self.field = field
        self.offset = offset
        self.value = value
        self.expected = expected
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        where = self.layer + (f".{self.field}" if self.field else "")
        at = f" at byte {self.offset}" if self.offset is not None else ""
        val = self.value
        if isinstance(val, int) and not isinstance(val, bool):
            shown = f"{val} (0x{val:x})"
        elif isinstance(val, (bytes, bytearray)):
            shown = bytes(val[:16]).hex(" ") + (" ..." if len(val) > 16 else "")
        else:
            shown = repr(val)
        msg = f"{self.kind} {where}{at}: got {shown}, expected {self.expected}"
        if self.detail:
            msg += f" ({self.detail})"
        return msg

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly description (used by the lenient decoder and ``-T json``)."""
        value = self.value
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).hex()
        return {
            "kind": self.kind,
            "layer": self.layer,
            "field": self.field,
            "offset": self.offset,
            "value": value,
            "expected": self.expected,
            "message": str(self),
        }


class TruncatedError(DecodeError):
    """The bytes end before the header (or the length it announces) does."""

    kind = "truncated"


class MalformedError(DecodeError):
    """The bytes are present but a field holds a value the protocol forbids."""

    kind = "malformed"


class EncodeError(RdmalabError, ValueError):
    """A value cannot be encoded (out of range for its field, wrong type, inconsistent headers)."""

    def __init__(self, layer: str, field: str | None, value: Any, expected: str) -> None:
        self.layer = layer
        self.field = field
        self.value = value
        self.expected = expected
        where = layer + (f".{field}" if field else "")
        super().__init__(f"cannot encode {where}: got {value!r}, expected {expected}")
