"""The check framework: exercises, their checkers, results that explain themselves, hints.

A learner calls ``lab.check("wires.icrc", answer)``.  The checker compares the answer with what
rdmalab itself computes from the same bytes, capture or engine run, and returns a
:class:`Result` whose message names what is wrong: the header and field, the byte offset, and
the kind of value expected.  An answer that is still ``...`` (the placeholder the student
notebooks contain), ``None``, or a function that raises ``NotImplementedError`` gets the status
``"not yet"`` rather than a failure.

``lab.hint("wires.icrc")`` shows the hints of an exercise one at a time.

When the environment variable ``RDMALAB_CHECK_LOG`` names a file, every check appends one JSON
line to it: exercise id, status, message, and the answer itself as data
(:func:`rdmalab.lab.answers.encode`).  The notebook tests use the statuses to require that the
instructor notebooks pass every check and that the student notebooks report "not yet";
``rdmalab grade`` ignores them and judges the answers again in its own process (:func:`judge`).
"""

from __future__ import annotations

import html
import importlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdmalab.lab import data, variant
from rdmalab.lab.answers import Opaque, Program, Raised, Run, encode
from rdmalab.wire.errors import Picklable

PASS = "pass"
FAIL = "fail"
NOT_YET = "not yet"
ERROR = "error"

_STYLE = {
    PASS: ("#e8f5e9", "#2e7d32", "\u2714 Correct"),
    FAIL: ("#ffebee", "#c62828", "\u2718 Not quite"),
    NOT_YET: ("#f5f5f5", "#616161", "\u2026 Not yet answered"),
    ERROR: ("#fff3e0", "#e65100", "! Your code raised an error"),
}


@dataclass
class Result:
    """The outcome of one check.  ``bool(result)`` is ``True`` only when it passed."""

    exercise: str
    status: str
    message: str
    details: list[str] = field(default_factory=list)
    field: str | None = None  # "BTH.psn", when the problem is one field
    offset: int | None = None  # byte offset of the problem, when there is one
    given: str | None = None  # the learner's value, as the feedback shows it
    expected: str | None = None  # what was expected there: a value, or a description when the value is the answer

    def __bool__(self) -> bool:
        return self.status == PASS

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def _repr_html_(self) -> str:
        bg, fg, head = _STYLE.get(self.status, _STYLE[ERROR])
        where = ""
        if self.field or self.offset is not None:
            bits = []
            if self.field:  # a header field ("BTH.psn") is a field; "retransmitted packets" is what the answer is about
                bits.append(f"{'field ' if is_header_field(self.field) else ''}<code>{html.escape(self.field)}</code>")
            if self.offset is not None:
                bits.append(f"byte offset {self.offset}")
            label = "Where" if self.offset is not None or (self.field and is_header_field(self.field)) else "About"
            where = f"<div style='font-size:90%'>{label}: {', '.join(bits)}</div>"
        if self.given is not None or self.expected is not None:
            rows = [(k, v) for k, v in (("You gave", self.given), ("Expected", self.expected)) if v is not None]
            where += "".join(f"<div style='font-size:90%'>{k}: <code>{html.escape(v)}</code></div>" for k, v in rows)
        details = "".join(f"<li>{html.escape(d)}</li>" for d in self.details)
        if details:
            details = f"<ul style='margin:.2em 0 0 1.2em;padding:0'>{details}</ul>"
        tip = ""
        if self.status in (FAIL, NOT_YET):
            tip = (f"<div style='font-size:85%;color:#555;margin-top:.2em'>Stuck? "
                   f"<code>lab.hint(\"{html.escape(self.exercise)}\")</code></div>")
        return (
            f"<div class='rdmalab-check rdmalab-check-{self.status.replace(' ', '-')}' "
            f"style='border-left:4px solid {fg};background:{bg};padding:.4em .7em;margin:.4em 0'>"
            f"<b style='color:{fg}'>{head}</b> <span style='color:#555'>[{html.escape(self.exercise)}]</span>"
            f"<div>{html.escape(self.message)}</div>{where}{details}{tip}</div>"
        )

    def __repr__(self) -> str:
        lines = [f"[{self.exercise}] {self.status.upper()}: {self.message}"]
        if self.field or self.offset is not None:
            lines.append(f"  where: field={self.field} offset={self.offset}")
        if self.given is not None:
            lines.append(f"  you gave: {self.given}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        lines += [f"  - {d}" for d in self.details]
        return "\n".join(lines)


def is_header_field(name: str) -> bool:
    """``"BTH.psn"``, ``"AETH.value"``, ``"mr.access[read]"``: a header (or object) and one of its fields."""
    return re.fullmatch(r"[A-Za-z][\w']*\.[\w\[\]]+", name) is not None


def say(title: str, rest: str) -> str:
    """An exercise's title, then a sentence: "Build a BTH by hand: replace ...", "Which wire is which? Replace ..."."""
    if title.endswith(("?", "!", ".")):
        return f"{title} {rest[:1].upper()}{rest[1:]}"
    return f"{title}: {rest}"


class Wrong(Picklable, Exception):
    """Raised by a checker to report a wrong answer with its location."""

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None,
                 details: Sequence[str] = (), given: Any = None, expected: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.offset = offset
        self.details = list(details)
        self.given = None if given is None else (str(given) if isinstance(given, Said) else show(given))
        self.expected = expected


class Said(str):
    """Text a checker wrote to describe the learner's value (``Wrong(given=Said(...))``), shown as is."""


def show(value: Any, limit: int = 60) -> str:
    """A learner's value as feedback shows it: bytes in hex, integers in decimal and hex, the rest repr."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        text = b[:limit // 2].hex(" ") + (" ..." if len(b) > limit // 2 else "")
        return f"{len(b)} bytes: {text}"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        n = int(value)
        text = f"{n} ({n:#x})" if n > 9 else str(n)
        name = getattr(value, "name", None)  # an enum member: show its name too
        return f"{name} = {text}" if isinstance(name, str) else text
    if callable(value):
        return f"the function {getattr(value, '__name__', repr(value))}"
    if isinstance(value, (set, frozenset)) and value:  # in a stable order, so that the same answer reads the same
        text = "{" + ", ".join(sorted(map(repr, value))) + "}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


class CannotCheck(Exception):
    """Raised by a checker that cannot judge here (a tool it needs is missing): an error, never a pass or a fail."""


class NotAnswered(Exception):
    """Raised by a checker when the answer is still the placeholder."""


@dataclass
class Exercise:
    id: str
    title: str
    checker: Callable[[Any], str | None]
    hints: tuple[str, ...] = ()
    notebook: str = ""
    program: Program | None = None  # the answer is a function: how to run it (rdmalab.lab.answers)
    #: the answer is read off a per-student scenario (rdmalab.lab.variant): a classmate's values fail here
    varies: bool = False


_REGISTRY: dict[str, Exercise] = {}
_HINTS_SHOWN: dict[str, int] = {}


def exercise(id: str, title: str, hints: Sequence[str] = (), notebook: str = "",
             program: Program | None = None, varies: bool = False) -> Callable[[Callable[[Any], str | None]], Callable[[Any], str | None]]:
    """Register a checker.  It returns a success message or raises :class:`Wrong`.

    ``varies=True`` says the answer is read off the student's own scenario (:mod:`rdmalab.lab.variant`), so
    that another student's right answer is wrong here (tests/lab/test_variants.py holds every exercise to it).

    With ``program``, the answer is a function: :func:`check` runs it as the :class:`Program` says and
    the checker receives the :class:`~rdmalab.lab.answers.Run` (what the function did), not the function.
    """

    def deco(fn: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
        if id in _REGISTRY:
            raise ValueError(f"exercise {id!r} registered twice")
        _REGISTRY[id] = Exercise(id, title, fn, tuple(hints), notebook, program, varies)
        return fn

    return deco


def is_placeholder(answer: Any) -> bool:
    """``...``, ``None``, or a container whose every element is a placeholder."""
    if answer is Ellipsis or answer is None:
        return True
    if isinstance(answer, (list, tuple)) and answer and all(a is Ellipsis for a in answer):
        return True
    if isinstance(answer, dict) and answer and all(v is Ellipsis for v in answer.values()):
        return True
    return False


def _ensure_loaded() -> None:
    importlib.import_module("rdmalab.lab.checkers")  # registers the checkers


def get(id: str) -> Exercise:
    _ensure_loaded()
    try:
        return _REGISTRY[id]
    except KeyError:
        close = [k for k in _REGISTRY if k.split(".")[0] == id.split(".")[0]]
        raise KeyError(f"no exercise {id!r}" + (f"; did you mean one of {close}?" if close else "")) from None


def scenario(key: str) -> variant.Scenario:
    """The current student's variant of an exercise (or of a scenario a notebook shares): see :mod:`rdmalab.lab.variant`."""
    _ensure_loaded()
    return variant.draw(key)


def student() -> str:
    """Whose variant this kernel shows (``$RDMALAB_STUDENT``; "" for the book's)."""
    return variant.student()


def _log(result: Result, answer: Any) -> None:
    path = os.environ.get("RDMALAB_CHECK_LOG")
    if not path:
        return
    try:
        reported = encode(answer)
    except Exception as err:  # an answer that cannot be reported (nested too deep, ...): report that
        reported = encode(Opaque(f"unreportable answer ({type(err).__name__})"))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"exercise": result.exercise, "status": result.status, "message": result.message,
                             "field": result.field, "given": result.given, "expected": result.expected,
                             "answer": reported}) + "\n")


def judge(id: str, answer: Any) -> Result:
    """Check an answer given as a value (or a :class:`~rdmalab.lab.answers.Run`), without logging it.

    This is the whole verdict: :func:`check` calls it in the learner's kernel, ``rdmalab grade``
    calls it in its own process on the values the kernel reported."""
    ex = get(id)
    if is_placeholder(answer):
        return Result(id, NOT_YET, say(ex.title, "replace the ... with your answer, then run the cell again."))
    if ex.program is not None and callable(answer):  # only a recorded Run is judged, never a function
        return Result(id, ERROR, "the grader received a function instead of the record of its run.")
    try:
        if isinstance(answer, Raised):
            if answer.type_name == "NotImplementedError":
                raise NotImplementedError
            return Result(id, ERROR, f"{answer.type_name}: {answer.message}",
                          ["The checker ran your answer and it raised this exception."])
        msg = ex.checker(answer)
        return Result(id, PASS, msg or say(ex.title, "correct."))
    except NotAnswered as e:
        return Result(id, NOT_YET, str(e) or say(ex.title, "not answered yet."))
    except CannotCheck as e:
        return Result(id, ERROR, say(ex.title, f"cannot be checked here: {e}"))
    except NotImplementedError:
        return Result(id, NOT_YET, say(ex.title, "your function still raises NotImplementedError."))
    except Wrong as e:
        given = e.given if e.given is not None else (None if callable(answer) or isinstance(answer, Run)
                                                     else show(answer))
        return Result(id, FAIL, e.message, e.details, e.field, e.offset, given, e.expected)
    except Exception as e:  # the learner's code failed inside the checker: say so, don't crash
        return Result(id, ERROR, f"{type(e).__name__}: {e}",
                      ["The checker ran your answer and it raised this exception."])


def check(id: str, answer: Any) -> Result:
    """Check an answer to exercise ``id`` and explain what, if anything, is wrong."""
    ex = get(id)
    if ex.program is not None and callable(answer):
        try:
            answer = ex.program.record(answer)  # run the learner's function; the checker judges what it did
        except Exception as e:
            answer = Raised(type(e).__name__, str(e))
    result = judge(id, answer)
    _log(result, answer)
    return result


@dataclass
class Hint:
    exercise: str
    number: int
    total: int
    text: str

    def _repr_html_(self) -> str:
        return (f"<div class='rdmalab-hint' style='border-left:4px solid #1565c0;background:#e3f2fd;"
                f"padding:.4em .7em;margin:.4em 0'><b>Hint {self.number}/{self.total}</b> "
                f"<span style='color:#555'>[{html.escape(self.exercise)}]</span><div>{html.escape(self.text)}</div></div>")

    def __repr__(self) -> str:
        return f"Hint {self.number}/{self.total} [{self.exercise}]: {self.text}"


def hint(id: str, number: int | None = None) -> Hint:
    """The next hint for an exercise (or hint ``number``, counting from 1)."""
    ex = get(id)
    if not ex.hints:
        return Hint(id, 0, 0, "No hints for this one: re-read the cells above the exercise.")
    if number is None:
        number = min(_HINTS_SHOWN.get(id, 0) + 1, len(ex.hints))
    number = max(1, min(number, len(ex.hints)))
    _HINTS_SHOWN[id] = number
    return Hint(id, number, len(ex.hints), ex.hints[number - 1])


@dataclass
class ExerciseList:
    items: list[Exercise]

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(e.notebook)}</td><td><code>{html.escape(e.id)}</code></td>"
                       f"<td>{html.escape(e.title)}</td><td>{len(e.hints)}</td></tr>" for e in self.items)
        return (f"<table class='rdmalab-exercises'><tr><th style='text-align:left'>notebook</th>"
                f"<th style='text-align:left'>id</th><th style='text-align:left'>exercise</th><th>hints</th></tr>"
                f"{rows}</table>").replace("<td>", "<td style='text-align:left'>")

    def __repr__(self) -> str:
        return "\n".join(f"{e.notebook:24} {e.id:22} {e.title}" for e in self.items)


def exercises(notebook: str | None = None) -> ExerciseList:
    """All exercises (or those of one notebook), in notebook order and, within one, in the order it asks them."""
    _ensure_loaded()
    order = {e.id: i for i, e in enumerate(_in_source_order())}
    items = [e for e in _REGISTRY.values() if notebook is None or e.notebook == notebook]
    return ExerciseList(sorted(items, key=lambda e: (e.notebook, order.get(e.id, len(order)))))


def _in_source_order() -> list[Exercise]:
    """The exercises in the order the notebook sources check them (registration order when a source is missing)."""
    import re


    found: list[str] = []
    try:
        for src in sorted(data.notebooks_dir().glob("[0-9][0-9]-*.py")):
            found += [m for m in re.findall(r"""lab\.check\(\s*["']([\w.]+)["']""", src.read_text(encoding="utf-8"))
                      if m not in found]
    except OSError:
        pass
    ordered = [_REGISTRY[i] for i in found if i in _REGISTRY]
    return ordered + [e for e in _REGISTRY.values() if e.id not in found]
