"""``rdmalab top``: a live view of RDMA connections (:mod:`rdmalab.capture.top`), drawn with rich.

One row per connection (QPs, opcodes, throughput, message rate, NAKs, retransmissions, CNPs), the
PFC and PAUSE frames seen, and the findings as they happen, refreshed every ``--interval`` seconds;
from a live interface (``-i``) or a capture replayed at its own pace (``-r``, ``--speed``).
``--once`` prints only the final table (text or JSON): for scripts and tests.  Ctrl-C (or SIGTERM)
stops and prints the final table.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from rdmalab.cli import Fail, number

if TYPE_CHECKING:
    from rdmalab.capture.top import LiveTop


def _speed(text: str) -> float | None:
    if text == "max":
        return None
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--speed {text!r}: a factor (1 = the capture's pace, 10, 0.5) or max") from None
    if not v > 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"--speed {text}: the factor must be a positive number (or max)")
    return v


def _autostop(text: str) -> tuple[str, float]:
    what, _, value = text.partition(":")
    if what not in ("duration", "packets"):
        raise argparse.ArgumentTypeError(f"-a {text!r}: the stop conditions are duration:SECONDS and packets:N")
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-a {text!r}: {what} needs a number after the colon") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"-a {text}: {what} must be positive")
    return what, v


def _size(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}P"


def _short(opcode_name: str) -> str:
    """``RC RDMA WRITE Middle`` -> ``WRITE Middle`` (the transport is in the connection's name)."""
    name = opcode_name.replace("RDMA ", "")
    head, _, rest = name.partition(" ")
    return rest if head in ("RC", "UC", "RD", "UD", "XRC") and rest else name


def render(top: LiveTop, *, title: str = "rdmalab top", average: bool = False, max_rows: int | None = None) -> Any:
    """The view as one rich renderable: a header line, the connections table, the recent findings.
    ``average``: throughput and message rate over each connection's life (the final table), else since
    the last refresh.  ``max_rows``: the most recently created connections only."""
    from rich import box  # lazy: rich loads only for this command
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    tot = top.totals()
    k = tot["kinds"]
    head = Text.assemble(
        (f"{title}  ", "bold"),
        f"{tot['frames']} frames, {tot['rdma_packets']} RDMA packets, "
        + (f"{tot['iwarp_frames']} iWARP frames, " if tot.get("iwarp_frames") else "")
        + f"{tot['connections'] + tot.get('iwarp_connections', 0)} connection(s), "
        f"{sum(tot['messages'].values()) + sum(tot.get('iwarp_messages', {}).values())} messages"
        + (f", path MTU ~{tot['mtu']}   " if tot["rdma_packets"] else "   "),
        ("PFC ", "bold"), f"{tot['pfc_frames']}" + (f" (pausing priority 0-7: {'/'.join(map(str, tot['pfc_by_priority']))})"
                                                    if tot["pfc_frames"] else "") + "  ",
        ("PAUSE ", "bold"), f"{tot['pause_frames']}",
        (f"   the kernel dropped {tot['dropped']} frames (the counts miss them)", "bold red") if tot["dropped"] else "")
    table = Table(expand=False, header_style="bold cyan", pad_edge=False, box=box.SIMPLE_HEAVY,
                  caption="Mbit/s and msg/s: " + ("over each connection's life" if average else
                                                  "since the last refresh") + "; bytes: first copies, retx B: sent again",
                  caption_justify="left")
    for name, just in (("#", "right"), ("connection", "left"), ("opcodes", "left"), ("pkts", "right"),
                       ("bytes", "right"), ("Mbit/s", "right"), ("msg/s", "right"), ("msgs", "right"),
                       ("NAK seq", "right"), ("RNR", "right"), ("NAK oth", "right"), ("retx", "right"),
                       ("retx B", "right"), ("CNP", "right"), ("ICRC", "right")):
        table.add_column(name, justify=just, no_wrap=name == "connection",  # type: ignore[arg-type]
                         min_width=28 if name == "opcodes" else None)
    rows = sorted(top.rows() + top.iwarp_rows(), key=lambda r: r["id"])  # (ids: one numbering for both)
    if max_rows is not None:
        rows = rows[-max_rows:]
    for r in rows:
        ops = ", ".join(f"{n} {_short(o)}" for o, n in sorted(r["opcodes"].items(), key=lambda x: -x[1])[:3])
        msgs = ", ".join(f"{n} {o}" for o, n in r["messages"].items()) or "0"
        if r["transport"] == "iWARP":  # (NAKs, CNPs, ICRCs: RoCE's; retransmissions: TCP's)
            bad = r["bad_crc32c"] + r["terminates"] + r["retransmissions"]
            table.add_row(str(r["id"]), r["name"], ops, str(r["packets"]), _size(r["request_bytes"]),
                          f"{r['avg_mbps' if average else 'mbps']:.1f}",
                          f"{r['avg_msg_rate' if average else 'msg_rate']:.0f}", msgs, "-", "-", "-",
                          str(r["retransmissions"]), _size(r["retransmitted_bytes"]), "-", "-",
                          style="yellow" if bad else None)
            continue
        bad = r["nak_seq_err"] + r["nak_rnr"] + r["nak_other"] + r["retransmissions"] + r["bad_icrc"]
        table.add_row(str(r["id"]), r["name"], ops, str(r["packets"]), _size(r["request_bytes"]),
                      f"{r['avg_mbps' if average else 'mbps']:.1f}", f"{r['avg_msg_rate' if average else 'msg_rate']:.0f}",
                      msgs, str(r["nak_seq_err"]), str(r["nak_rnr"]),
                      str(r["nak_other"]), str(r["retransmissions"]), _size(r["retransmitted_bytes"]),
                      str(r["cnps"]), str(r["bad_icrc"]), style="yellow" if bad else None)
    if not rows:
        table.add_row("", "(no RDMA connection yet)", *[""] * 13)
    kinds = ", ".join(f"{n} {name}" + (f" ({k['retransmission_nak']} after a NAK, {k.get('retransmission_rnr', 0)} "
                                        "after an RNR NAK)" if name == "retransmission" and
                                        (k.get("retransmission_nak") or k.get("retransmission_rnr")) else "")
                      for name, n in k.items() if not name.startswith("retransmission_")) or "none"
    fl = Text(f"Findings: {kinds}\n", style="bold")
    for f in list(top.findings)[-12:]:
        where = f"conn {f.connection}" if f.connection is not None else "capture"
        style = "red" if f.kind in ("nak_other", "bad_icrc", "bad_crc32c", "terminate", "unreachable") else \
            "yellow" if f.kind in ("nak_seq_err", "nak_rnr", "retransmission", "timeout", "psn_gap") else "cyan"
        fl.append(f"  {f.time - (top.start_ns or 0) / 1e9:10.6f} ", style="dim")
        fl.append(f"{f.kind:<16}", style=style)
        fl.append(f" {where:<8} {f.text}\n")
    return Group(head, table, fl)


def _text(top: LiveTop, width: int, title: str) -> str:
    from rich.console import Console  # lazy: rich loads only for this command

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(render(top, title=title,
                                                                                        average=True))
    return buf.getvalue()


def run_top(args: argparse.Namespace, out: TextIO) -> int:
    # lazy: keeps `rdmalab --help` fast (the decoder and numpy load only for this command)
    from rdmalab.capture.top import LiveTop
    from rdmalab.capture.top_source import CaptureError, SniffError, replay
    from rdmalab.capture.top_source import live as live_frames

    if (args.interface is None) == (args.read is None):
        raise Fail("top needs one source: -i IFACE (a live interface) or -r FILE (a capture to replay)")
    if not args.interval > 0:
        raise Fail(f"--interval {args.interval}: the refresh interval must be positive")
    try:
        top = LiveTop(max_conns=args.max_conns, idle_s=args.idle if args.idle > 0 else None,
                      max_findings=args.findings)
    except ValueError as err:
        raise Fail(str(err)) from None
    title = f"rdmalab top -i {args.interface}" if args.interface else f"rdmalab top -r {args.read}"
    stats = {"dropped": 0}
    src = live_frames(args.interface, bpf=args.capture_filter, timeout=min(0.25, args.interval), stats=stats) \
        if args.interface else \
        replay(args.read, args.speed, max_gap=args.max_gap or None)
    stop_after = dict(args.autostop or [])
    live = None
    if not args.once:
        from rich.console import Console  # lazy: rich loads only for this command
        from rich.live import Live

        live = Live(render(top, title=title), console=Console(file=out) if not out.isatty() else None,
                    refresh_per_second=max(1.0, 1 / args.interval), transient=False, auto_refresh=False)
        live.start()
    start = time.monotonic()
    next_draw = start + args.interval
    # Ctrl-C and SIGTERM stop the loop at its next frame or pause (a quarter of a second at most), not in
    # the middle of a batch being decoded: a flag, not an exception raised wherever the signal lands
    stop: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    old = {sig: signal.signal(sig, lambda signum, _frame: stop.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        for fr in src:
            if fr is not None:
                top.feed(*fr)
            if stop:
                break
            top.dropped = stats["dropped"]
            now = time.monotonic()
            if "packets" in stop_after and top.frames_fed >= stop_after["packets"]:
                break
            if "duration" in stop_after and now - start >= stop_after["duration"]:
                break
            if now >= next_draw:
                top.tick(time.time_ns() if args.interface else None)
                next_draw = now + args.interval
                if live is not None:
                    live.update(render(top, title=title), refresh=True)
    except KeyboardInterrupt:
        pass
    except SniffError as err:
        if live is not None:
            live.stop()
        raise Fail(str(err)) from None
    except CaptureError as err:
        if top.frames_fed == 0:  # not a capture, or damaged from its start: nothing to show
            if live is not None:
                live.stop()
            raise Fail(str(err)) from None
        # cut short or damaged further on (as analyze): what was read is shown, and what stopped it said
        found = top.damaged(err.damage)
        print(f"rdmalab: warning: {args.read}: {found.text}", file=sys.stderr)
    finally:
        close = getattr(src, "close", None)
        if close is not None:
            close()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    top.dropped = stats["dropped"]
    top.tick(time.time_ns() if args.interface else None)
    if live is not None:
        live.update(render(top, title=title), refresh=True)
        live.stop()
        return 0
    if args.format == "json":
        out.write(json.dumps(top.to_dict(), default=str) + "\n")
    else:
        out.write(_text(top, args.width, title))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help="a live view of RDMA connections: throughput, NAKs, retransmissions, CNPs",
                       description="One row per RDMA connection (QPs, opcodes, throughput, message rate, NAKs, "
                                   "retransmissions, CNPs), PFC/PAUSE frames, and the findings as they happen, "
                                   "refreshed every second; from a live interface or a capture replayed. The "
                                   "counts are `rdmalab analyze`'s, found packet by packet.")
    p.add_argument("-i", "--interface", metavar="IFACE",
                   help="capture live on this interface (any: all of them; Linux AF_PACKET; root or CAP_NET_RAW)")
    p.add_argument("-f", dest="capture_filter", metavar="FILTER",
                   help="with -i: a capture filter in tcpdump's language (e.g. 'udp port 4791')")
    p.add_argument("-r", "--read", metavar="FILE", help="replay a capture file (pcap/pcapng, also .gz)")
    p.add_argument("--speed", type=_speed, default=1.0, metavar="N|max",
                   help="replay at N times the capture's pace (default 1), or max: as fast as it decodes")
    p.add_argument("--max-gap", type=number(float, least=0), default=60.0, metavar="S",
                   help="-r: a pause of the capture longer than S seconds (at --speed) is skipped, the pace going on "
                        "from the frame after it (default 60; 0: every pause waited through)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="refresh every S seconds (default 1)")
    p.add_argument("--once", action="store_true",
                   help="no live display: run to the end (of the file, of -a, or Ctrl-C / SIGTERM) and print the final "
                        "table")
    p.add_argument("-T", dest="format", choices=("text", "json"), default="text", help="--once output format")
    p.add_argument("-a", "--autostop", type=_autostop, action="append", metavar="COND",
                   help="stop after duration:SECONDS (wall clock) or packets:N (frames), as tshark's -a")
    p.add_argument("--max-conns", type=int, default=4096, metavar="N",
                   help="connections kept (default 4096): past that the least recently active is retired into "
                        "the totals")
    p.add_argument("--idle", type=number(float, least=0), default=60.0, metavar="S",
                   help="retire a connection idle this long in capture time (default 60; 0: never)")
    p.add_argument("--findings", type=int, default=200, metavar="N", help="recent findings kept (default 200)")
    p.add_argument("--width", type=number(int, least=20), default=200, metavar="COLS", help="--once text width (default 200)")
    p.set_defaults(func=run_top)
