"""``rdmalab pingpong rc|uc|ud|srq [OPTIONS] [SERVER]``: rdma-core's ``ibv_*_pingpong`` on the soft engine.

The options are the stock programs' (``ibv_rc_pingpong`` etc., rdma-core v44), with one
difference: ``-d`` names the network interface the engine sends on (default: the one holding
the local address of the out-of-band TCP connection), since there is no RDMA device.  Options
of the stock programs that need hardware features (``-o`` ODP, ``-t`` timestamps, ``-j`` device
memory, ...) are refused with a message.  See ``docs/interop.md``.
"""

from __future__ import annotations

from rdmalab.cli import Args, Fail, listen_then_run, passthrough_parsers, quick_parse

TYPE_CHECKING = False  # (neither typing nor argparse is imported on the way to a server's listen)
if TYPE_CHECKING:
    import argparse
    import socket
    from typing import TextIO

    from rdmalab.cli import Option

_UNSUPPORTED = {
    "odp": ("-o", "--odp", "on-demand paging"),
    "iodp": ("-O", "--iodp", "implicit on-demand paging"),
    "prefetch": ("-P", "--prefetch", "ODP prefetch"),
    "ts": ("-t", "--ts", "completion timestamps"),
    "dm": ("-j", "--dm", "device memory"),
    "new_send": ("-N", "--new_send", "the new post-send API (it puts the same packets on the wire)"),
}


HELP = "ibv_rc/uc/ud/srq_pingpong with the soft engine on UDP (a stock program is the peer)"

KINDS = ("rc", "uc", "ud", "srq")
# the options (the parser's and quick_parse's), in the order of --help
OPTIONS: tuple[Option, ...] = (
    (("-p", "--port"), {"type": int, "default": 18515, "help": "TCP port of the exchange (default 18515)"}),
    (("-d", "--ib-dev"), {"dest": "ifname", "metavar": "NETDEV",
                          "help": "network interface the engine uses (default: the one of the TCP connection's "
                                  "local address)"}),
    (("-i", "--ib-port"), {"type": int, "default": 1, "help": "port of the device (default 1, the only one)"}),
    (("-s", "--size"), {"type": int, "help": "message size (default 4096; ud: 1024)"}),
    (("-m", "--mtu"), {"type": int, "default": 1024, "help": "path MTU (default 1024)"}),
    (("-r", "--rx-depth"), {"type": int, "default": 500, "help": "receives posted at a time (default 500)"}),
    (("-n", "--iters"), {"type": int, "default": 1000, "help": "number of exchanges (default 1000)"}),
    (("-l", "--sl"), {"type": int, "default": 0, "help": "service level (not on the wire for RoCEv2)"}),
    (("-e", "--events"), {"action": "store_true", "help": "sleep on CQ events (same traffic)"}),
    (("-g", "--gid-idx"), {"type": int, "default": 1, "help": "local GID index (default 1: ::ffff:<IPv4>)"}),
    (("-c", "--chk"), {"action": "store_true", "help": "validate the received buffer"}),
    (("-q", "--num-qp"), {"type": int, "default": None, "help": "srq: number of QPs (default 16)"}),
    (("--pcap",), {"metavar": "FILE", "help": "write every packet the engine sends and receives to FILE"}),
    (("--timeout",), {"type": float, "default": 60.0,
                      "help": "give up after this many seconds without a completion (default 60)"}),
)


def _arguments(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    import argparse

    s.description = ("Run rdma-core's ibv_{rc,uc,ud,srq}_pingpong exchange with the soft RoCEv2 engine on real "
                    "UDP: the peer is the stock program on a kernel rxe device (or another rdmalab). Without "
                    "SERVER, wait for a client. Needs root or CAP_NET_RAW.")
    s.epilog = "Example: rdmalab pingpong rc -g 1 -n 100 -c 10.0.0.1   (peer: ibv_rc_pingpong -d rxe0 -g 1 -n 100 -c)"
    s.add_argument("kind", choices=list(KINDS), help="which program: ibv_<kind>_pingpong")
    s.add_argument("server", nargs="?", help="connect to the server at this host (default: be the server)")
    for flags, kw in OPTIONS:
        s.add_argument(*flags, **kw)
    for dest, (short, long, _) in _UNSUPPORTED.items():
        s.add_argument(short, long, dest=f"unsupported_{dest}", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(func=run_pingpong)
    return s


register, parser = passthrough_parsers("pingpong", HELP, _arguments)


def quick(argv: list[str]) -> Args | None:
    """``argv`` parsed as :func:`parser` would, without argparse, when it is a plain command line
    (:func:`rdmalab.cli.quick_parse`); ``None`` otherwise."""
    return quick_parse(argv, (("kind", KINDS), ("server", None)), OPTIONS,
                       {**{f"unsupported_{d}": False for d in _UNSUPPORTED}, "func": run_pingpong})


def main_argv(args: Args, out: TextIO) -> int:
    """Entry from ``rdmalab.cli.main`` (a pass-through command): options and SERVER may mix, as with getopt.
    A plain command line is parsed without loading argparse (start-up of a server in the lab VM)."""
    argv = list(args.lab_args)
    return run_pingpong(quick(argv) or parser().parse_intermixed_args(argv), out)


def run_pingpong(args: argparse.Namespace | Args, out: TextIO) -> int:
    for dest, (short, long, what) in _UNSUPPORTED.items():
        if getattr(args, f"unsupported_{dest}", False):
            raise Fail(f"pingpong: {short}/{long} ({what}) is not supported by the soft engine")
    if args.num_qp is not None and args.kind != "srq":
        raise Fail(f"pingpong: -q/--num-qp is an option of srq only, not {args.kind}")
    for name in ("size", "rx_depth", "iters"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise Fail(f"pingpong: --{name.replace('_', '-')} must be at least 1, not {v}")
    # a server listens before it loads the engine (listen_then_run); `rdmalab --help` loads neither
    return listen_then_run(not args.server, args.port, f"pingpong {args.kind}",
                           lambda listener: _run(args, out, listener))


def _run(args: argparse.Namespace | Args, out: TextIO, listener: socket.socket | None) -> int:
    from rdmalab.fabric.udp_setup import CarrierError
    from rdmalab.tools.oob import OOBError
    from rdmalab.tools.pingpong import PingpongError, PingpongOptions, run  # the engine

    opts = PingpongOptions(kind=args.kind, server=args.server, port=args.port, ifname=args.ifname,
                           ib_port=args.ib_port, size=args.size, mtu=args.mtu, rx_depth=args.rx_depth,
                           iters=args.iters, sl=args.sl, events=args.events, gid_idx=args.gid_idx, chk=args.chk,
                           num_qp=args.num_qp or 16, timeout=args.timeout, pcap=args.pcap)
    try:
        res = run(opts, out, listener)
    except (PingpongError, OOBError, CarrierError) as exc:
        raise Fail(f"pingpong {args.kind}: {exc}") from None
    return 1 if res.bad_messages or res.invalid_pages else 0
