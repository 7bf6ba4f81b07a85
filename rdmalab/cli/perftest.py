"""``rdmalab perftest write|read|send|atomic [OPTIONS] [SERVER]``: perftest's ``ib_*_bw`` on the soft engine.

The options people use with ``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw`` and ``ib_atomic_bw``
(perftest 4.5, Debian 12), the same exchange and the same report layout; the peer is the stock
program on a kernel rxe device.  ``-d`` names the network interface the engine uses (default:
the one of the TCP connection's local address).  ``-R`` is perftest's rdma_cm mode: both QPs
connected by the engine's rdma_cm, the exchange over the first (without ``-d``, the device is a
linked one: ``rdmalab link add soft0 netdev IFNAME`` or ``RDMALAB_LINKS``).  Options it does not support are refused with
a message naming them.  See ``docs/interop.md``.
"""

from __future__ import annotations

from rdmalab.cli import Args, Fail, listen_then_run, passthrough_parsers, quick_parse

TYPE_CHECKING = False  # (neither typing nor argparse is imported on the way to a server's listen)
if TYPE_CHECKING:
    import argparse
    import socket
    from typing import TextIO

    from rdmalab.cli import Option

HELP = "ib_write/read/send/atomic_bw with the soft engine on UDP (a stock perftest program is the peer)"

# Options of perftest 4.5 this implementation refuses, with what they do.
_UNSUPPORTED = {
    "-b": "bidirectional traffic", "--bidirectional": "bidirectional traffic",
    "-z": "RDMA CM exchange",
    "--comm_rdma_cm": "RDMA CM exchange", "-c": "connection types other than RC", "--connection": "connection types",
    "-e": "CQ events", "--events": "CQ events", "-I": "inline data", "--inline_size": "inline data",
    "-l": "post lists", "--post_list": "post lists", "-Q": "CQ moderation", "--cq-mod": "CQ moderation",
    "-t": "TX depth", "--tx-depth": "TX depth", "-r": "RX depth", "--rx-depth": "RX depth",
    "-o": "outstanding reads", "--outs": "outstanding reads", "-u": "QP timeout", "--qp-timeout": "QP timeout",
    "-S": "service level", "--sl": "service level", "-T": "type of service", "--tos": "type of service",
    "--run_infinitely": "running forever", "--mr_per_qp": "an MR per QP", "--odp": "on-demand paging",
    "--use_hugepages": "huge pages", "--use_cuda": "GPU memory", "--out_json": "JSON output",
    "-O": "dual port", "--dualport": "dual port", "-M": "multicast", "--mcg": "multicast",
    "-N": "no peak", "--noPeak": "no peak", "--cpu_util": "CPU utilisation", "-w": "a BW limit",
    "--limit_bw": "a BW limit", "-y": "a message rate limit", "--limit_msgrate": "a message rate limit",
    "-H": "report per port (with -D)", "--report-both": "both reports", "--source_ip": "a TCP source address",
}


VERBS = ("write", "read", "send", "atomic")
#: options refused with real peers that the virtual run (--nic) takes
_VIRTUAL_ONLY = {"-I": "inline_size", "--inline_size": "inline_size", "-l": "post_list", "--post_list": "post_list",
                 "-Q": "cq_mod", "--cq-mod": "cq_mod", "-t": "tx_depth", "--tx-depth": "tx_depth"}
# the options (the parser's and quick_parse's), in the order of --help
OPTIONS: tuple[Option, ...] = (
    (("-p", "--port"), {"type": int, "default": 18515, "help": "TCP port of the exchange (default 18515)"}),
    (("-d", "--ib-dev"), {"dest": "ifname", "metavar": "NETDEV",
                          "help": "network interface the engine uses (default: the one of the TCP connection's "
                                  "local address; with -R: the devices of `rdmalab link` / RDMALAB_LINKS)"}),
    (("-R", "--rdma_cm"), {"action": "store_true",
                           "help": "connect both QPs with rdma_cm (a control QP carrying the exchange, then the "
                                   "data QP, both to --port), as perftest's -R"}),
    (("--transport",), {"choices": ["auto", "roce", "iwarp"], "default": "auto",
                        "help": "the device's transport with -R: iwarp connects over TCP and MPA (the peer: "
                                "ib_*_bw -R on kernel siw); auto (default) takes the linked device's, roce with "
                                "-d NETDEV"}),
    (("--mpa-crc",), {"action": "store_true",
                      "help": "iWARP: ask for MPA CRC32c (the C flag of the MPA Request/Reply; siw honours it)"}),
    (("-i", "--ib-port"), {"type": int, "default": 1, "help": "port of the device (default 1, the only one)"}),
    (("-s", "--size"), {"type": int, "help": "message size (default 65536; atomic: 8)"}),
    (("-n", "--iters"), {"type": int, "help": "iterations (default 5000 for write, 1000 otherwise)"}),
    (("-D", "--duration"), {"type": float, "help": "run for this many seconds instead of -n"}),
    (("-a", "--all"), {"action": "store_true", "help": "run sizes 2 .. 2^23 (write and read)"}),
    (("-x", "--gid-index"), {"type": int, "help": "GID index (the soft device: 1, ::ffff:<IPv4>)"}),
    (("-m", "--mtu"), {"type": int, "help": "MTU (default: the port's, from the interface)"}),
    (("-F", "--CPU-freq"), {"action": "store_true", "help": "accepted (no CPU frequency check here)"}),
    (("-q", "--qp"), {"type": int, "default": 1, "help": "number of QPs (1 only)"}),
    (("--report_gbits",), {"action": "store_true", "help": "report Gb/sec instead of MB/sec"}),
    (("-A", "--atomic_type"), {"default": "FETCH_AND_ADD", "help": "CMP_AND_SWAP or FETCH_AND_ADD (atomic)"}),
    (("--pcap",), {"metavar": "FILE", "help": "write every packet the engine sends and receives to FILE"}),
    (("--timeout",), {"type": float, "default": 60.0,
                      "help": "give up after this many seconds without a completion (default 60)"}),
    (("--nic",), {"metavar": "MODEL",
                  "help": "no peer: run both sides on the simulated fabric under this NIC model (connectx3) and "
                          "report virtual-time bandwidth, message rate and latency (docs/nic-model.md); takes "
                          "-I, -l, -Q, -t and -q"}),
    (("-I", "--inline_size"), {"type": int, "default": 0, "help": "with --nic: inline payloads up to this size"}),
    (("-l", "--post_list"), {"type": int, "default": 1, "help": "with --nic: work requests per post_send"}),
    (("-Q", "--cq-mod"), {"dest": "cq_mod", "type": int, "default": 100,
                          "help": "with --nic: one signaled work request in this many"}),
    (("-t", "--tx-depth"), {"dest": "tx_depth", "type": int, "default": 128,
                            "help": "with --nic: work requests outstanding per QP"}),
)


def _arguments(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    s.description = ("Run perftest 4.5's ib_{write,read,send,atomic}_bw exchange, traffic and report with the soft "
                     "RoCEv2 engine on real UDP: the peer is the stock program on a kernel rxe device (or another "
                     "rdmalab). Without SERVER, wait for a client. Needs root or CAP_NET_RAW.")
    s.epilog = "Example: rdmalab perftest write -x 1 -s 4096 -n 500 10.0.0.1   (peer: ib_write_bw -d rxe0 -x 1 -s 4096 -n 500)"
    s.add_argument("verb", choices=list(VERBS), help="which program: ib_<verb>_bw")
    s.add_argument("server", nargs="?", help="connect to the server at this host (default: be the server)")
    for flags, kw in OPTIONS:
        s.add_argument(*flags, **kw)
    s.set_defaults(func=run_perftest)
    return s


register, parser = passthrough_parsers("perftest", HELP, _arguments)


def quick(argv: list[str]) -> Args | None:
    """``argv`` parsed as :func:`parser` would, without argparse, when it is a plain command line
    (:func:`rdmalab.cli.quick_parse`); ``None`` otherwise."""
    return quick_parse(argv, (("verb", VERBS), ("server", None)), OPTIONS, {"func": run_perftest})


def main_argv(args: Args, out: TextIO) -> int:
    """Entry from ``rdmalab.cli.main`` (a pass-through command): options and SERVER may mix.  A plain
    command line is parsed without loading argparse (start-up of a server in the lab VM)."""
    argv = list(args.lab_args)
    virtual = any(a.split("=", 1)[0] == "--nic" for a in argv)
    for a in argv:
        name = a.split("=", 1)[0]
        if name in _UNSUPPORTED and not (virtual and name in _VIRTUAL_ONLY):
            raise Fail(f"perftest: {name} ({_UNSUPPORTED[name]}) is not supported by the soft engine's perftest")
    return run_perftest(quick(argv) or parser().parse_intermixed_args(argv), out)


def run_perftest(args: argparse.Namespace | Args, out: TextIO) -> int:
    if getattr(args, "nic", None):
        return _run_virtual(args, out)
    for flag, dest in _VIRTUAL_ONLY.items():
        default = {"inline_size": 0, "post_list": 1, "cq_mod": 100, "tx_depth": 128}[dest]
        if flag.startswith("--") and getattr(args, dest, default) != default:
            raise Fail(f"perftest: {flag} ({_UNSUPPORTED[flag]}) is supported only in the virtual run (--nic)")
    if args.atomic_type not in ("CMP_AND_SWAP", "FETCH_AND_ADD"):
        raise Fail(f"perftest: -A {args.atomic_type}: the atomic type is CMP_AND_SWAP or FETCH_AND_ADD")
    if args.atomic_type != "FETCH_AND_ADD" and args.verb != "atomic":
        raise Fail("perftest: -A is an option of atomic only")
    if args.all and args.verb in ("send", "atomic"):
        raise Fail(f"perftest: -a (all sizes) is supported for write and read, not {args.verb}")
    if args.transport == "iwarp" and not args.rdma_cm:
        raise Fail("perftest: --transport iwarp needs -R: iWARP connects with rdma_cm only (TCP and MPA)")
    if args.mpa_crc and args.transport == "roce":
        raise Fail("perftest: --mpa-crc is an iWARP option (MPA CRC32c); RoCE has the ICRC always")
    if args.transport == "iwarp" and args.verb == "atomic":
        raise Fail("perftest atomic: iWARP has no atomics (kernel siw answers them with a TERMINATE): "
                   "ib_atomic_bw has no iWARP peer")
    if args.qp != 1:
        raise Fail(f"perftest: -q {args.qp}: the soft engine's perftest runs one QP (-q 1)")
    if args.duration is not None and args.iters is not None:
        raise Fail("perftest: -D and -n exclude each other (a test runs by duration or by iterations)")
    for name in ("size", "iters", "duration"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            raise Fail(f"perftest: --{name} must be positive, not {v}")
    if args.iters is not None and not 5 <= args.iters <= 100_000_000:
        # perftest 4.5 refuses the same: `ib_write_bw -n 3` says "Iteration num should be between 5 and 100000000"
        raise Fail(f"perftest: -n {args.iters}: the iteration count must be between 5 and 100000000, as perftest's")
    # a server (without -R) listens before it loads the engine (listen_then_run); `rdmalab --help` loads neither
    return listen_then_run(args.server is None and not args.rdma_cm, args.port, f"perftest {args.verb}",
                           lambda listener: _run(args, out, listener))


def _run_virtual(args: argparse.Namespace | Args, out: TextIO) -> int:
    """``--nic MODEL``: both sides in this process, virtual time (:mod:`rdmalab.tools.perftest.virtual`)."""
    from rdmalab.tools.perftest import PerftestError  # (the engine: loaded only when a run starts, as in _run)
    from rdmalab.tools.perftest.virtual import VirtualOptions, run_virtual  # (likewise: the engine and fabric)

    if args.server is not None:
        raise Fail("perftest --nic: the virtual run has no peer; drop SERVER")
    size = args.size if args.size is not None else 65536
    iters = args.iters if args.iters is not None else (5000 if args.verb == "write" else 1000)
    opts = VirtualOptions(verb=args.verb, nic=args.nic, size=size, iters=iters, all_sizes=args.all,
                          inline_size=args.inline_size, post_list=args.post_list, cq_mod=args.cq_mod,
                          tx_depth=args.tx_depth, num_qps=args.qp, report_gbits=args.report_gbits)
    try:
        run_virtual(opts, out)
    except PerftestError as exc:
        raise Fail(f"perftest {args.verb}: {exc}") from None
    return 0


def _run(args: argparse.Namespace | Args, out: TextIO, listener: socket.socket | None) -> int:
    from rdmalab.fabric.udp_setup import CarrierError
    from rdmalab.tools.oob import OOBError
    from rdmalab.tools.perftest import PerftestError, PerftestOptions, run  # the engine
    from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

    opts = PerftestOptions(verb=args.verb, server=args.server, port=args.port, ifname=args.ifname,
                           ib_port=args.ib_port, size=args.size, iters=args.iters, duration=args.duration,
                           all_sizes=args.all, gid_idx=args.gid_index, mtu=args.mtu, report_gbits=args.report_gbits,
                           atomic_type=args.atomic_type, num_qps=args.qp, timeout=args.timeout, pcap=args.pcap,
                           rdma_cm=args.rdma_cm, transport=args.transport, mpa_crc=args.mpa_crc)
    try:
        res = run(opts, out, listener)
    except (PerftestError, OOBError, CarrierError, PyverbsRDMAError) as exc:
        raise Fail(f"perftest {args.verb}: {exc}") from None
    return 1 if res.errors else 0
