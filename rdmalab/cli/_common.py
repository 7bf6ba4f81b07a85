"""What every subcommand module shares: the user-facing error, a server that listens first, and the
quick parser of the live servers' command lines (start-up: issue 21).

Nothing here imports argparse, typing or another layer at import time: ``rdmalab pingpong`` and
``rdmalab perftest`` as servers import this module, their own, :mod:`rdmalab.live.listener` and
the C module ``_socket`` before they listen.
"""

from __future__ import annotations

import _socket  # (socket.py, with enum, selectors ..., is loaded after the listen: rdmalab.live.listener)

TYPE_CHECKING = False  # (typing is not imported at run time: start-up of the live tools)
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Sequence
    from typing import Any

    # An option of a subcommand: its flags and the keywords of argparse's add_argument (one table for
    # the parser and for quick_parse, so that both take the same options).
    Option = tuple[tuple[str, ...], dict[str, Any]]


class Fail(Exception):
    """A user-facing error: printed as ``rdmalab: <message>``, exit status 1."""


class Args:
    """The arguments of a command that argparse did not parse: what ``rdmalab.cli.main`` hands a
    pass-through command (``command``, ``func``, ``lab_args``), and the options :func:`quick_parse`
    took (the same attributes as argparse's ``Namespace`` would have)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any: ...

    def __repr__(self) -> str:
        return f"Args({', '.join(f'{k}={v!r}' for k, v in sorted(self.__dict__.items()))})"


def dest_of(flags: tuple[str, ...], kw: dict[str, Any]) -> str:
    """The attribute an option sets, as argparse derives it (``dest``, else the first long flag)."""
    if "dest" in kw:
        return str(kw["dest"])
    first = next((f for f in flags if f.startswith("--")), flags[0])
    return first.lstrip("-").replace("-", "_")


def quick_parse(argv: Sequence[str], positionals: tuple[tuple[str, tuple[str, ...] | None], ...],
                options: Sequence[Option], defaults: dict[str, Any]) -> Args | None:
    """The common command lines of a live server or client, parsed without importing argparse (about
    a dozen modules, which the lab VM's servers would load before they listen), or ``None`` when the
    command line is anything else: then argparse parses it (``parse_intermixed_args``), with its
    messages, its ``--help`` and its errors.

    Taken here: the options of ``options`` spelt in full as separate words (``-n 5``, ``--iters 5``)
    or ``--iters=5``, values that do not start with ``-`` and that the option's ``type`` and
    ``choices`` accept, and one or two positionals (the first one of its choices) in any order
    among them.  Anything else (``-h``, ``-n5``, an abbreviated or unknown option, a bad value, a
    missing positional, ``--``) is argparse's; where this parser answers, argparse gives the same
    attributes (tests/test_cli.py compares them)."""
    by_flag: dict[str, tuple[str, dict[str, Any]]] = {}
    values: dict[str, Any] = {}
    for flags, kw in options:
        dest = dest_of(flags, kw)
        default = False if kw.get("action") == "store_true" else kw.get("default")
        if isinstance(default, str) and "type" in kw:
            default = kw["type"](default)  # (argparse converts a default given as a string)
        values[dest] = default
        for f in flags:
            by_flag[f] = (dest, kw)
    values.update(defaults)
    found: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word or word == "-":
            return None
        if not word.startswith("-"):
            found.append(word)
            continue
        flag, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        entry = by_flag.get(flag)
        if entry is None:
            return None
        dest, kw = entry
        if kw.get("action") == "store_true":
            if eq:
                return None
            values[dest] = True
            continue
        if not eq:
            if i >= len(argv) or not argv[i] or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        convert: Callable[[str], Any] = kw.get("type", str)
        try:
            converted = convert(value)
        except (TypeError, ValueError):
            return None
        if "choices" in kw and converted not in kw["choices"]:
            return None
        values[dest] = converted
    if not 1 <= len(found) <= len(positionals):
        return None
    words: list[str | None] = [*found, *[None] * (len(positionals) - len(found))]
    for (name, choices), given in zip(positionals, words, strict=True):
        if given is not None and choices is not None and given not in choices:
            return None
        values[name] = given
    return Args(**values)


def _may_open_raw_socket() -> bool:
    try:
        _socket.socket(_socket.AF_INET, _socket.SOCK_RAW, _socket.IPPROTO_UDP).close()
    except OSError:  # refused (or not there): check_permission says why
        return False
    return True


def listen_then_run(listen: bool, port: int, what: str, run: Callable[[socket.socket | None], int]) -> int:
    """A server that opens its TCP listener first and loads the engine after (issue 21: start-up in the lab
    VM): a client that connects meanwhile waits in the kernel's accept queue.  The permission check comes
    first, as the stock programs fail at once without it: the raw socket the carrier needs is tried here,
    and only when it is refused is :func:`rdmalab.fabric.udp_setup.check_permission` loaded to say why.
    ``run(listener)`` closes the listener once it accepts; a failure before that leaves it here to close.
    ``listen=False`` (a client, rdma_cm): ``run(None)``.
    """
    # imported here: `rdmalab --help` and the other commands do not load it
    from rdmalab.live.listener import OOBError, adopt, listen_socket

    if not 0 < port < 65536:  # (socket's bind and connect would raise OverflowError, a traceback)
        raise Fail(f"{what}: port {port} is not a TCP port")
    listener = None
    if listen:
        if not _may_open_raw_socket():
            from rdmalab.fabric.udp_setup import CarrierError, check_permission

            try:
                check_permission()
            except CarrierError as exc:
                raise Fail(f"{what}: {exc}") from None
        try:
            raw = listen_socket(port)
        except OOBError as exc:
            raise Fail(f"{what}: {exc}") from None
        listener = adopt(raw)  # listening: now socket.py
    try:
        return run(listener)
    finally:
        if listener is not None:
            listener.close()
