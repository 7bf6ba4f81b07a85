"""A variant of every exercise per student: scenarios drawn from a seed made of who and which exercise.

Every exercise whose answer is a number or bytes read off a scenario (a PSN, a key, a length, a
count, a CRC, a port) draws that scenario here, so that one student's right values are wrong for
another.  The seed is a hash of the *student* and a *key* (an exercise id, or a notebook's name for
a scenario several exercises share)::

    from rdmalab import lab
    from rdmalab.lab.variant import scenario

    @scenario("my.send")
    def _my_send(r):                    # r: a random.Random seeded for (student, "my.send")
        return {"length": r.randrange(3000, 9000), "mtu": r.choice((512, 1024, 2048))}

    lab.scenario("my.send")             # Scenario my.send for the book's variant ...: length=..., mtu=...

and both the notebook and the checker read the same values with ``lab.scenario("my.send")`` (the checkers
of the lab's own notebooks register theirs, e.g. ``"send.opcodes"``, in ``rdmalab.lab.checkers``).

Who the student is:

* in a learner's kernel, ``$RDMALAB_STUDENT`` (``rdmalab lab --student NAME`` sets it for the lab's
  kernels; ``rdmalab grade`` sets it from the submission's folder or file name);
* in the grader's own process, the name :func:`as_student` gives while it judges a submission, whatever
  the kernel did to its environment: a kernel that sets ``RDMALAB_STUDENT`` to a classmate's name sees
  the classmate's scenario and is then judged against its own.

No student (the variable unset or empty) is the variant the public book shows.
"""

from __future__ import annotations

import copy
import hashlib
import html
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

ENV = "RDMALAB_STUDENT"
_override: ContextVar[str | None] = ContextVar("rdmalab_student", default=None)
_BUILDERS: dict[str, Callable[[random.Random], dict[str, Any]]] = {}
_CACHE: dict[tuple[str, str], dict[str, Any]] = {}


def student() -> str:
    """The student whose variant is in use ("" for the book's)."""
    name = _override.get()
    if name is None:
        name = os.environ.get(ENV, "")
    return name.strip()


@contextmanager
def as_student(name: str) -> Iterator[None]:
    """Judge, build scenarios and seed as ``name`` inside the block (the grader's view of a submission)."""
    token = _override.set(name.strip())
    try:
        yield
    finally:
        _override.reset(token)


def seed(key: str, who: str | None = None) -> int:
    """A 64-bit seed for (student, key): the same for a student every time, unrelated across students."""
    who = student() if who is None else who
    digest = hashlib.sha256(f"rdmalab-variant\0{who}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def rng(key: str) -> random.Random:
    """A random generator seeded for (student, key)."""
    return random.Random(seed(key))


class Scenario(dict[str, Any]):
    """The values of one student's variant of an exercise: ``s["length"]`` or ``s.length``.

    In a notebook it shows itself as a small table headed by whose variant it is.
    """

    key: str = ""
    who: str = ""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the scenario of {self.key!r} has no value {name!r}; it has {sorted(self)}") from None

    def _whose(self) -> str:
        return f"student {self.who!r}" if self.who else "the book's variant (no RDMALAB_STUDENT set)"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td style='text-align:left'><code>{html.escape(k)}</code></td>"
                       f"<td style='text-align:left'><code>{html.escape(_fmt(v))}</code></td></tr>"
                       for k, v in self.items())
        return (f"<div class='rdmalab-scenario'><b>Your scenario</b> for <code>{html.escape(self.key)}</code> "
                f"<span style='color:#555'>({html.escape(self._whose())})</span><table>{rows}</table></div>")

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={_fmt(v)}" for k, v in self.items())
        return f"Scenario {self.key} for {self._whose()}: {body}"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int) and v > 9:
        return f"{v} ({v:#x})"
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex(" ")
    return repr(v)


def scenario(key: str) -> Callable[[Callable[[random.Random], dict[str, Any]]], Callable[[random.Random], dict[str, Any]]]:
    """Register how the scenario ``key`` is drawn: a function of a seeded ``random.Random`` that returns a dict."""

    def deco(fn: Callable[[random.Random], dict[str, Any]]) -> Callable[[random.Random], dict[str, Any]]:
        if key in _BUILDERS:
            raise ValueError(f"scenario {key!r} registered twice")
        _BUILDERS[key] = fn
        return fn

    return deco


def keys() -> list[str]:
    """The registered scenario keys (after the checkers were imported)."""
    return sorted(_BUILDERS)


def draw(key: str) -> Scenario:
    """The current student's scenario ``key`` (the builders must be registered: see :func:`rdmalab.lab.core.scenario`)."""
    who = student()
    values = _CACHE.get((who, key))
    if values is None:
        try:
            build = _BUILDERS[key]
        except KeyError:
            raise KeyError(f"no scenario {key!r}; the scenarios are {keys()}") from None
        values = build(random.Random(seed(key, who)))
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[(who, key)] = values
    s = Scenario(copy.deepcopy(values))  # a copy: what a notebook does to its scenario changes no later draw
    s.key, s.who = key, who
    return s
