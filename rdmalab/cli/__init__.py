"""The ``rdmalab`` command.  Thin: it parses arguments and calls the layers below.

Each subcommand is one module of this package with a ``register(subparsers)`` function that adds
its parser and sets ``func`` (called as ``func(args, out)``, returning the exit status).  A new
subcommand is a new module plus one line in :data:`COMMANDS`.

Subcommands follow tshark's habits where they fit::

    rdmalab decode -r FILE [-V | -T json] [-c N] [-Y FILTER] [--strict]
    rdmalab crosscheck FILE [-v]
    rdmalab stats -r FILE
    rdmalab lab [ARGS...]
    rdmalab vm [--shell | --exec CMD | --scenario NAME] [-w FILE]
    rdmalab capture NAME... | all
    rdmalab grade DIR [-o OUT]
    rdmalab link add NAME netdev IFNAME | show | delete NAME
    rdmalab rping -s|-c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
    rdmalab udaddy [-s server] [-b bind] [-C count] [-S size]

Errors are one sentence naming the file and what was wrong, never a traceback; the exit status
is 0 on success, 1 when a file could not be (fully) read or a strict decode failed, 2 for bad
usage.  The subcommand modules import the layers they drive inside their ``run_*`` functions,
so that ``rdmalab --help`` and every command start without importing what they do not use.
"""

from __future__ import annotations

import sys

from rdmalab import __version__
from rdmalab.cli._common import Args, Fail

TYPE_CHECKING = False  # (neither typing nor argparse is imported on the way to a server's listen)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from types import ModuleType

# The order here is the order of `rdmalab --help`.  The modules are imported when the parser is built
# (command_modules): a pass-through command imports its own module only (start-up of the live tools).
COMMAND_NAMES = ("decode", "crosscheck", "stats", "analyze", "convert", "lab", "pingpong", "perftest", "rping", "udaddy",
                 "simulate", "link", "vm", "capture", "grade")
# Commands whose every argument after the command name belongs to another program (--help included):
# command -> the function of its module that takes them.
PASSTHROUGH = {"lab": "run_lab", "pingpong": "main_argv", "perftest": "main_argv", "rping": "main_argv",
               "udaddy": "main_argv"}


def command_module(name: str) -> ModuleType:
    """``rdmalab.cli.NAME`` (``__import__``, which ``python -X importtime`` reports, unlike ``importlib``'s)."""
    __import__(f"rdmalab.cli.{name}")
    return sys.modules[f"rdmalab.cli.{name}"]


def command_modules() -> list[ModuleType]:
    """The subcommand modules, in the order of ``rdmalab --help``."""
    return [command_module(name) for name in COMMAND_NAMES]


def build_parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="rdmalab",
        description="rdmalab: an RDMA protocol lab. Decode InfiniBand, RoCE and iWARP captures, "
                    "cross-check them against Wireshark, and run the Jupyter lab.",
        epilog="Start with: rdmalab decode -r captures/synthetic_rocev2.pcap",
    )
    p.add_argument("--version", action="version", version=f"rdmalab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        module.register(sub)
    return p


def _user_error(err: Exception) -> bool:
    """Whether ``err`` is told in one sentence (``Fail``, or a ``RdmalabError``: a ``CaptureError``, a
    ``DecodeError``...).  ``rdmalab.wire.errors`` is not imported for it: where it is not loaded, no
    RdmalabError was raised (a live server does not load it before it listens)."""
    errors = sys.modules.get("rdmalab.wire.errors")
    return isinstance(err, Fail) or (errors is not None and isinstance(err, errors.RdmalabError))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | Args
    if argv and argv[0] in PASSTHROUGH:
        # without argparse: the live servers parse their own command lines (pingpong, perftest: quickly)
        args = Args(command=argv[0], func=getattr(command_module(argv[0]), PASSTHROUGH[argv[0]]), lab_args=argv[1:])
    else:
        parser = build_parser()
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
        print(f"rdmalab: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
