"""The ``rdmalab`` command.  Thin: it parses arguments and calls the layers below.

Each subcommand is one module of this package with a ``register(subparsers)`` function that adds
its parser and sets ``func`` (called as ``func(args, out)``, returning the exit status).  A new
subcommand is a new module plus one line in :data:`COMMANDS`.

Subcommands follow tshark's habits where they fit::

    rdmalab decode -r FILE [-V | -T json] [-c N] [-Y FILTER] [--strict]
    rdmalab crosscheck FILE [-v]
    rdmalab stats -r FILE
    rdmalab top -i IFACE | -r FILE [--speed N|max] [--once [-T json]]
    rdmalab lab [ARGS...]
    rdmalab vm [--shell | --exec CMD | --scenario NAME] [-w FILE]
    rdmalab capture NAME... | all
    rdmalab grade DIR [-o OUT]
    rdmalab link add NAME netdev IFNAME | show | delete NAME
    rdmalab rping -s|-c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
    rdmalab udaddy [-s server] [-b bind] [-C count] [-S size]
    rdmalab sm [--node NODE] [-w FILE] [--ladder] [--serve SECONDS]
    rdmalab ibsim NETFILE [--sockname NAME | --remote [--port N]] [-v]

Errors are one sentence naming the file and what was wrong, never a traceback; the exit status
is 0 on success, 1 when a file could not be (fully) read or a strict decode failed, 2 for bad
usage.  The subcommand modules import the layers they drive inside their ``run_*`` functions,
so that ``rdmalab --help`` and every command start without importing what they do not use.

This module also holds what the subcommands share: :class:`Fail` (the one-sentence error),
:class:`Args`, the quick parser of the live servers' plain command lines (:func:`quick_parse`) and
:func:`listen_then_run`, a server that listens before it loads the engine.  On the way to a server's
listen (issue 21: start-up in the TCG lab VM, where every module read from the 9p root costs) only
``rdmalab``, this module, the command's own module, ``__future__`` and the C modules ``_socket`` and
``gc`` are loaded: no argparse, no typing, no ``socket.py``, no other layer.
"""

from __future__ import annotations

import _socket  # (socket.py, with enum, selectors ..., is loaded after a server's listen: listen_socket)
import gc  # (a module built into the interpreter: nothing is read to import it)
import sys

from rdmalab import __version__

TYPE_CHECKING = False  # (neither typing nor argparse is imported on the way to a server's listen)
if TYPE_CHECKING:
    import argparse
    import socket
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any

    # An option of a subcommand: its flags and the keywords of argparse's add_argument (one table for
    # the parser and for quick_parse, so that both take the same options).
    Option = tuple[tuple[str, ...], dict[str, Any]]


# ---------------------------------------------------------------------- what every subcommand shares
class Fail(Exception):
    """A user-facing error: printed as ``rdmalab: <message>``, exit status 1."""


def number(kind: type[int] | type[float], *, least: float | None = None, above: float | None = None) -> Any:
    """An argparse ``type``: a finite number of ``kind`` (``int`` or ``float``) of at least ``least`` or more
    than ``above``; anything else (``nan``, ``inf``, ``-1`` for a count) is refused in words naming it."""
    import argparse  # (argparse is loaded already by the parser that calls this)
    import math

    def conv(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if least is not None and v < least:
            raise argparse.ArgumentTypeError(f"{text} is less than {least:g}")
        if above is not None and v <= above:
            raise argparse.ArgumentTypeError(f"{text} must be more than {above:g}")
        return v

    return conv


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


def listen_socket(port: int) -> _socket.socket:
    """A TCP socket listening on ``port`` on all addresses, IPv4 and IPv6 (where the host has IPv6) like the
    stock programs' ``AI_PASSIVE``/``AF_UNSPEC``, made with the C module ``_socket``: ``socket.py`` brings
    ``enum``, ``selectors``, ``functools``, ``collections`` ... (in the TCG lab VM, with Debian's Python, a
    five-line listener that imports ``socket`` takes 0.52 s to listen, one with ``_socket`` 0.24 s:
    tests/live/test_startup.py), which a server loads after its listen.  (The library's own listener, for programs,
    is :func:`rdmalab.tools.oob.open_listener`, ``socket.create_server``.)  Raises ``OSError``."""
    try:
        srv = _socket.socket(_socket.AF_INET6, _socket.SOCK_STREAM)
        family = _socket.AF_INET6
    except OSError:  # no IPv6
        srv = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        family = _socket.AF_INET
    try:
        srv.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        if family == _socket.AF_INET6:
            srv.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 0)
        srv.bind(("::" if family == _socket.AF_INET6 else "0.0.0.0", port))
        srv.listen(1)
    except OSError:
        srv.close()
        raise
    return srv


def listen_then_run(listen: bool, port: int, what: str, run: Callable[[socket.socket | None], int]) -> int:
    """A server that opens its TCP listener first and loads the engine after (issue 21: start-up in the lab
    VM): a client that connects meanwhile waits in the kernel's accept queue.  The permission check comes
    first, as the stock programs fail at once without it: the raw socket the carrier needs is tried here,
    and only when it is refused is :func:`rdmalab.fabric.udp_setup.check_permission` loaded to say why.
    ``run(listener)`` closes the listener once it accepts; a failure before that leaves it here to close.
    ``listen=False`` (a client, rdma_cm): ``run(None)``.
    """
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
        except OSError as exc:
            raise Fail(f"{what}: Couldn't listen to port {port}: {exc.strerror or exc}") from None
        import socket  # listening: now socket.py (enum, selectors ...), which owns the descriptor from here

        listener = socket.socket(fileno=raw.detach())
    try:
        return run(listener)
    finally:
        if listener is not None:
            listener.close()


def passthrough_parsers(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
                        ) -> tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None],
                                   Callable[[], argparse.ArgumentParser]]:
    """``register`` and ``parser`` of a pass-through command (:data:`PASSTHROUGH`: a tool that parses its own
    command line): ``register(subparsers)`` adds its line to ``rdmalab --help`` (without argparse's ``-h``:
    ``arguments`` adds one where the tool wants it),
    ``parser()`` is what parses ``rdmalab NAME ...``; ``arguments`` adds the command's arguments to either."""

    def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        arguments(sub.add_parser(name, help=help, add_help=False))

    def parser() -> argparse.ArgumentParser:
        import argparse  # here, not above: a server's plain command line is parsed without it (quick_parse)

        return arguments(argparse.ArgumentParser(prog=f"rdmalab {name}"))

    return register, parser


# ---------------------------------------------------------------------- the command
# The order here is the order of `rdmalab --help`.  The modules are imported when the parser is built
# (command_modules): a pass-through command imports its own module only (start-up of the live tools).
COMMAND_NAMES = ("decode", "crosscheck", "stats", "analyze", "convert", "lab", "pingpong", "perftest", "rping", "udaddy",
                 "simulate", "link", "vm", "capture", "grade", "top", "sm", "ibsim")
# Commands whose every argument after the command name belongs to another program (--help included):
# command -> the function of its module that takes them.
PASSTHROUGH = {"lab": "run_lab", "pingpong": "main_argv", "perftest": "main_argv", "rping": "main_argv",
               "udaddy": "main_argv"}


def command_module(name: str) -> ModuleType:
    """``rdmalab.cli.NAME`` (``__import__``, which ``python -X importtime`` reports, unlike ``importlib``'s)."""
    __import__(f"rdmalab.cli.{name}")
    return sys.modules[f"rdmalab.cli.{name}"]


def command_modules(only: str | None = None) -> list[ModuleType]:
    """The subcommand modules, in the order of ``rdmalab --help`` (or the one named ``only``)."""
    return [command_module(name) for name in COMMAND_NAMES if only is None or name == only]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``rdmalab``; ``only`` (a command's name) adds that command's subparser alone, so
    that running one command does not import the modules of the others (this is the CLI's dispatch:
    :func:`main` passes the command named on the command line; ``rdmalab --help`` lists them all)."""
    import argparse

    p = argparse.ArgumentParser(
        prog="rdmalab",
        description="rdmalab: an RDMA protocol lab. Decode InfiniBand, RoCE and iWARP captures, "
                    "cross-check them against Wireshark, and run the Jupyter lab.",
        epilog="Start with: rdmalab decode -r captures/synthetic_rocev2.pcap",
    )
    p.add_argument("--version", action="version", version=f"rdmalab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules(only):
        module.register(sub)
    return p


def _user_error(err: Exception) -> bool:
    """Whether ``err`` is told in one sentence (``Fail``, or a ``RdmalabError``: a ``CaptureError``, a
    ``DecodeError``...).  ``rdmalab.wire.errors`` is not imported for it: where it is not loaded, no
    RdmalabError was raised (a live server does not load it before it listens)."""
    errors = sys.modules.get("rdmalab.wire.errors")
    return isinstance(err, Fail) or (errors is not None and isinstance(err, errors.RdmalabError))


#: whether this process is the ``rdmalab`` program (:func:`command`), not a caller of :func:`main` (a test, a notebook)
_program = False


def command() -> int:
    """The ``rdmalab`` program: its console script and ``python -m rdmalab``.  :func:`main` of the command
    line, in a process that ends with it (what :func:`settled` relies on)."""
    global _program
    _program = True
    return main()


def settled() -> None:
    """Said by a command once it has imported the modules it runs, before its work (decode, analyze,
    stats).  In the ``rdmalab`` program (:func:`command`) the objects made so far (the modules, their classes and functions, which live
    until the process ends) are left out of the cyclic garbage collector's passes from here on (``gc.freeze``):
    each pass of its oldest generation walked them all, and so did the pass at the process's end; the worker
    processes forked later inherit them left out.  What the command makes after this is collected as usual.
    In a process that calls :func:`main` (tests, a notebook) nothing is done: it lives on after the command."""
    if _program:
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | Args
    if argv and argv[0] in PASSTHROUGH:
        # without argparse: the live servers parse their own command lines (pingpong, perftest: quickly)
        args = Args(command=argv[0], func=getattr(command_module(argv[0]), PASSTHROUGH[argv[0]]), lab_args=argv[1:])
    else:
        # a known command first: only its module is imported and registered (argparse takes no
        # abbreviation of a command, so the parse is the same as with every command registered)
        parser = build_parser(argv[0] if argv and argv[0] in COMMAND_NAMES else None)
        args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    out = sys.stdout
    try:
        rc: int = args.func(args, out)
        out.flush()
        return rc
    except BrokenPipeError:
        # the reader (e.g. `head`) went away: stop quietly, as tshark does
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        if not _user_error(err):
            raise
        out.flush()  # CaptureError, DecodeError, Fail...: one sentence, no traceback
        print(f"rdmalab: {err}{_own_capture_hint(err)}", file=sys.stderr)
        return 1


def _own_capture_hint(err: BaseException) -> str:
    """For a capture file that does not exist but is named as one of rdmalab's own captures (the
    help's "Start with" typed outside a clone, after ``pip install rdmalab``; a file name from a
    notebook or the README): where rdmalab's own copy is, to type instead.  Else nothing."""
    if getattr(err, "reason", None) is None and err.__context__ is not None:
        err = err.__context__  # (a command that says the capture's error as its own Fail)
    path = getattr(err, "path", None)
    if getattr(err, "reason", None) != "no such file" or not isinstance(path, str):
        return ""
    import os

    from rdmalab.lab.data import captures_dirs  # noqa: PLC0415 - on this error only (the lab package is slow to load)

    name = os.path.basename(path)
    for folder in captures_dirs():
        own = folder / name
        if name and own.is_file():
            return f" (rdmalab's own {name} is {own})"
    return ""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
