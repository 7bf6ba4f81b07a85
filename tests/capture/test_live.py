"""Live captures from an interface of this host (``rdmalab capture -i``, ``rdmalab decode -i``,
:mod:`rdmalab.capture.sniff`): RoCE packets built by rdmalab.wire sent over UDP to 127.0.0.1:4791 and
captured on ``lo`` with a capture filter; ring files; the errors without privileges or interface.

Capturing needs root (or CAP_NET_RAW): those tests are skipped without it.  Each capture filters on
the source port of its own sending socket too, so that other traffic to port 4791 on this host (other
tests' soft RoCE) cannot end up in it."""

from __future__ import annotations

import ctypes.util
import os
import select
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rdmalab.capture.fields import frame_fields
from rdmalab.capture.linktypes import LINKTYPE_ETHERNET, decode_frame
from rdmalab.capture.reader import CapturedPacket, read
from rdmalab.capture.sniff import (
    LiveCapture,
    PcapPipe,
    RingFiles,
    SniffError,
    Stop,
    compile_filter,
    parse_conditions,
    restore_vlan,
)
from rdmalab.wire import BTH, RETH, encode_rocev2

ROOT = Path(__file__).resolve().parents[2]
GUARD = 60.0  # waiting for what must come: a guard against hanging, never a measurement
UDP_PAYLOAD = 14 + 20 + 8  # Ethernet, IPv4 and UDP headers before the BTH in encode_rocev2's frame


def _can_capture() -> bool:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
        return True
    except OSError:
        return False


needs_libpcap = pytest.mark.skipif(ctypes.util.find_library("pcap") is None,
                                   reason="capture filters are compiled by libpcap (libpcap0.8), not installed")
needs_capture = pytest.mark.skipif(not _can_capture() or ctypes.util.find_library("pcap") is None,
                                   reason="capturing needs root or CAP_NET_RAW, and filters libpcap")


def _env() -> dict[str, str]:
    """The environment of a command run here: this checkout's rdmalab, and Python's own buffering of
    standard output (what -l is about)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONPATH": str(ROOT)}


def _roce(n: int) -> list[bytes]:
    """``n`` RoCEv2 packets (RDMA WRITE Only, PSN 100.., a payload that says which), as UDP payloads."""
    out = []
    for k in range(n):
        frame = encode_rocev2(BTH(opcode=0x0A, destqp=0x51, psn=100 + k), [RETH(va=0x1000 * k, r_key=7, dma_length=8)],
                              f"pkt{k:05d}".encode())
        out.append(frame[UDP_PAYLOAD:])
    return out


class Sender:
    """A UDP socket on 127.0.0.1 with a port of its own (the capture filters on it)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.filter = f"udp port 4791 and udp src port {self.port}"

    def send(self, payloads: list[bytes], port: int = 4791) -> None:
        for p in payloads:
            self.sock.sendto(p, ("127.0.0.1", port))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def sender() -> Sender:
    s = Sender()
    yield s
    s.close()


def _started(proc: subprocess.Popen[bytes]) -> None:
    """Wait until the command says it is capturing (its socket is open and filtered)."""
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], GUARD)
    assert ready, "the capture did not start"
    line = proc.stderr.readline()
    assert line == b"Capturing on 'lo'\n", line


# ----------------------------------------------------------------------------- the library


@needs_libpcap
def test_filters_compile_like_tcpdump() -> None:
    prog = compile_filter("udp port 4791")
    assert prog[-1] == (6, 0, 0, 0) and (6, 0, 0, 262144) in prog  # reject; accept the snaplen
    assert any(k == 4791 for _c, _jt, _jf, k in prog)
    tcpdump = shutil.which("tcpdump")
    if tcpdump is not None:
        out = subprocess.run([tcpdump, "-y", "EN10MB", "-ddd", "udp port 4791"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        assert [tuple(int(x) for x in line.split()) for line in out[1:int(out[0]) + 1]] == prog
    with pytest.raises(SniffError, match=r"-f 'udp prot 4791': not a capture filter libpcap understands \(.+\)"):
        compile_filter("udp prot 4791")


def test_a_vlan_tag_the_card_took_off_is_put_back() -> None:
    """PACKET_AUXDATA's TCI (priority 1, VLAN 5) back after the MAC addresses: the frame decodes as RoCE on VLAN 5."""
    frame = encode_rocev2(BTH(opcode=4, destqp=3, psn=9), [], b"hi")
    tagged = restore_vlan(frame, 0x2005)
    assert len(tagged) == len(frame) + 4 and tagged[12:16] == b"\x81\x00\x20\x05"
    pkt = decode_frame(LINKTYPE_ETHERNET, tagged)
    fields = frame_fields(CapturedPacket(1, 0.0, LINKTYPE_ETHERNET, pkt))
    assert (pkt.encap, fields["vlan.id"], fields["vlan.priority"], fields["infiniband.bth.psn"]) == ("rocev2", 5, 1, 9)
    assert restore_vlan(frame, 7, 0x88A8)[12:16] == b"\x88\xa8\x00\x07"  # 802.1ad, when the kernel says so


@needs_capture
def test_pcap_pipe_feeds_a_stream_reader(sender: Sender) -> None:
    """PcapPipe (decode -i's way): the packets as a pcap stream; close() ends the capture though none came."""
    payloads = _roce(3)
    with LiveCapture("lo", bpf=sender.filter) as cap, PcapPipe(cap, Stop(packets=3, duration=GUARD)) as pipe:
        sender.send(payloads)
        assert [cp.packet.data[UDP_PAYLOAD:] for cp in read(pipe.path)] == payloads
    with LiveCapture("lo", bpf=sender.filter) as cap:
        idle = PcapPipe(cap)  # no stop: only close() ends it
        idle.close()
        assert not idle._thread.is_alive()


@needs_capture
def test_live_capture_on_lo_keeps_what_the_filter_takes(sender: Sender) -> None:
    payloads = _roce(6)
    with LiveCapture("lo", bpf=sender.filter) as cap:
        sender.send(payloads[:3])
        sender.send([b"not this one"], port=4792)  # filtered out
        sender.send(payloads[3:])
        got = list(cap.packets(Stop(packets=6, duration=GUARD)))
        # the kernel's counts are of packets, not of lo's two copies (the outgoing one is rejected in its filter)
        assert cap.stats() == (6, 0)
    assert [data[UDP_PAYLOAD:] for _ts, data, _wire in got] == payloads  # each once
    assert all(wire == len(data) for _ts, data, wire in got)
    assert [ts for ts, _d, _w in got] == sorted(ts for ts, _d, _w in got)
    assert cap.linktype == 1


@needs_capture
def test_capture_command_writes_what_was_sent(sender: Sender, tmp_path: Path) -> None:
    """``rdmalab capture -i lo -w F.pcapng -f FILTER -c 5``: the file holds the five RoCE packets, in order."""
    out = tmp_path / "lo.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "capture", "-i", "lo", "-w", str(out), "-f",
                             sender.filter, "-c", "5"], stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    _started(proc)
    payloads = _roce(7)
    sender.send([b"other port"], port=4792)
    sender.send(payloads)
    assert proc.wait(GUARD) == 0
    assert proc.stderr is not None
    tail = proc.stderr.read().decode()
    assert f"Packets captured: 5; dropped by the kernel (buffer full): 0; written to {out}" in tail
    assert out.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # pcapng
    pkts = list(read(out))
    assert [cp.packet.data[UDP_PAYLOAD:] for cp in pkts] == payloads[:5]
    assert [cp.packet.encap for cp in pkts] == ["rocev2"] * 5
    assert [cp.rdma[0].get(BTH).psn for cp in pkts] == [100, 101, 102, 103, 104]


@needs_capture
def test_decode_dash_i_prints_packets_as_they_arrive(sender: Sender) -> None:
    """``rdmalab decode -i lo -f FILTER -c 3 -l``: the line of each packet comes before the next is sent."""
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "decode", "-i", "lo", "-f", sender.filter, "-c", "3",
                             "-l", "-T", "fields", "-e", "frame.number", "-e", "infiniband.bth.psn", "-e",
                             "infiniband.bth.opcode"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
                            cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    _started(proc)
    for k, payload in enumerate(_roce(3)):
        sender.send([payload])
        ready, _, _ = select.select([proc.stdout], [], [], GUARD)
        assert ready, f"no line for packet {k + 1}"
        assert proc.stdout.readline() == f"{k + 1}\t{100 + k}\t10\n".encode()
    assert proc.wait(GUARD) == 0
    assert proc.stdout.read() == b""
    assert proc.stderr.read() == b"3 packets captured\n"


@needs_capture
def test_ring_files_on_lo(sender: Sender, tmp_path: Path) -> None:
    """``-b packets:2 -b files:2 -c 5``: files of 2, 2 and 1 packets, the oldest deleted."""
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "capture", "-i", "lo", "-w", str(tmp_path / "ring.pcap"),
                             "-f", sender.filter, "-c", "5", "-b", "packets:2", "-b", "files:2"],
                            stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    _started(proc)
    payloads = _roce(5)
    sender.send(payloads)
    assert proc.wait(GUARD) == 0
    files = sorted(tmp_path.glob("ring_*.pcap"))
    assert [f.name[:11] for f in files] == ["ring_00002_", "ring_00003_"]
    assert all(len(f.name) == len("ring_00002_20260101120000.pcap") for f in files)
    assert [[cp.packet.data[UDP_PAYLOAD:] for cp in read(f)] for f in files] == [payloads[2:4], payloads[4:]]


# ----------------------------------------------------------------------------- the ring without a capture


def test_ring_switches_on_size_and_keeps_the_newest(tmp_path: Path) -> None:
    """-b filesize:1 (1000 bytes): a file is closed at the packet that takes it to 1000 bytes or more."""
    ring = RingFiles(str(tmp_path / "r.pcap"), 1, format="pcap", ring=parse_conditions(
        ["filesize:1", "files:2"], "-b", ("filesize", "files")))
    frames = [bytes([k]) * 300 for k in range(10)]
    for k, fr in enumerate(frames):
        ring.write(k * 1000, fr, len(fr))
    ring.close()
    # 24 + 3 * 316 = 972 < 1000, the fourth packet takes the file to 1288: 4 packets a file, the first deleted
    assert [len(list(read(p))) for p in ring.paths] == [4, 2] and len(ring.removed) == 1
    assert [cp.packet.data for cp in read(ring.paths[1])] == frames[8:]
    assert [os.path.getsize(p) for p in ring.paths] == [24 + 4 * 316, 24 + 2 * 316]
    assert not any(os.path.exists(p) for p in ring.removed)


def test_stop_conditions_about_files(tmp_path: Path) -> None:
    one = RingFiles(str(tmp_path / "one.pcapng"), 1, stop={"filesize": 1})
    n = 0
    while not one.done:
        one.write(n, bytes(200), 200)
        n += 1
    one.close()
    assert one.paths == [str(tmp_path / "one.pcapng")] and os.path.getsize(one.paths[0]) >= 1000
    assert n == len(list(read(one.paths[0])))
    many = RingFiles(str(tmp_path / "m.pcapng"), 1, ring={"packets": 3}, stop={"files": 2})
    k = 0
    while not many.done:
        many.write(k, bytes(60), 60)
        k += 1
    many.close()
    assert (k, len(many.paths)) == (6, 2)


@pytest.mark.parametrize("opts,message", [
    (["-b", "files:3"], "-b files:N needs a condition to switch files on"),
    (["-b", "size:3"], "-b size:3: expected one of duration:N, packets:N, filesize:N, files:N"),
    (["-a", "duration:x"], "-a duration:x: 'x' is not a number"),
    (["-b", "packets:0"], "-b packets:0: the value must be positive"),
])
def test_bad_conditions(opts: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rdmalab.cli import main

    assert main(["capture", "-i", "lo", "-w", str(tmp_path / "x.pcap"), *opts, "-c", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"rdmalab: {message}"), err


# ----------------------------------------------------------------------------- errors


def test_missing_interface(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from rdmalab.cli import main

    for argv in (["capture", "-i", "nosuch0", "-w", str(tmp_path / "x.pcap")], ["decode", "-i", "nosuch0"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("rdmalab: -i nosuch0: there is no interface 'nosuch0' on this host (interfaces: lo"), err
        assert err.count("\n") == 1
    assert not (tmp_path / "x.pcap").exists()


@pytest.mark.skipif(os.geteuid() != 0 and _can_capture(), reason="this user may capture; nobody to run as")
@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="setpriv (util-linux) is needed")
def test_without_privileges(tmp_path: Path) -> None:
    """As ``nobody`` (or this user, if not root): one sentence naming the interface and what is missing."""
    out = tmp_path / "x.pcap"
    tmp_path.chmod(0o777)
    for argv in (["capture", "-i", "lo", "-w", str(out)], ["decode", "-i", "lo"]):
        cmd = [sys.executable, "-m", "rdmalab", *argv]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all",
                   "--bounding-set=-all", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=GUARD)
        assert r.returncode == 1
        assert r.stderr == ("rdmalab: -i lo: capturing needs root or the capability CAP_NET_RAW (a packet socket "
                            "was refused: operation not permitted)\n")
    assert not out.exists()


def test_live_options_need_an_interface(capsys: pytest.CaptureFixture[str]) -> None:
    from rdmalab.cli import main

    assert main(["capture", "-w", "x.pcap", "-c", "3"]) == 1
    assert "-w, -c: for a live capture from an interface; give it with -i IFACE" in capsys.readouterr().err
    assert main(["decode", "-r", "x.pcap", "-f", "udp"]) == 1
    assert "-f: for a live capture; give it with -i IFACE" in capsys.readouterr().err
    assert main(["decode", "-r", "x.pcap", "-i", "lo"]) == 1
    assert "not both" in capsys.readouterr().err


def test_dash_a_without_a_condition_is_still_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``capture -a`` meant --all before -a took dumpcap's conditions: without one (or before a capture
    name) it still does; a condition without -i is an error."""
    import contextlib

    from rdmalab.cli import main
    from rdmalab.live import captures, vm

    made: list[list[str]] = []
    monkeypatch.setattr(vm, "VM", lambda **_kw: contextlib.nullcontext())
    monkeypatch.setattr(captures, "make", lambda names, *_a, **_kw: made.append(list(names)) or [])
    assert main(["capture", "-a", "--no-manifest", "-o", str(tmp_path)]) == 0
    assert main(["capture", "--no-manifest", "-o", str(tmp_path), "-a", "rxe_rc_pingpong"]) == 0
    assert made == [list(captures.CAPTURES)] * 2
    assert main(["capture", "-a", "duration:5"]) == 1
    assert "-a COND: for a live capture from an interface; give it with -i IFACE" in capsys.readouterr().err


@needs_capture
@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="needs tcpdump")
def test_tcpdump_piped_into_decode_dash_r_dash(sender: Sender, tmp_path: Path) -> None:
    """What engineers type first: ``tcpdump -w - | rdmalab decode -r - -l``.  Each packet's line comes
    out while tcpdump is still capturing (it has not seen its -c yet), and the lines are tshark's
    for the same stream (a copy of what went through the pipe)."""
    n = 4
    tcpdump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-w", "-", "-c", str(n), "-Q", "in", sender.filter],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tee = tmp_path / "stream.pcap"
    assert tcpdump.stdout is not None and tcpdump.stderr is not None
    shell = f"tee {tee} | {sys.executable} -m rdmalab decode -r - -l -T fields -e frame.number -e infiniband.bth.psn"
    decode = subprocess.Popen(["sh", "-c", shell], stdin=tcpdump.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    tcpdump.stdout.close()  # decode's end of the pipe is the only one left
    assert decode.stdout is not None
    ready, _, _ = select.select([tcpdump.stderr], [], [], GUARD)  # "listening on lo ...": its filter is in
    assert ready and b"listening on lo" in tcpdump.stderr.readline()
    for k, payload in enumerate(_roce(n)):
        sender.send([payload])
        ready, _, _ = select.select([decode.stdout], [], [], GUARD)
        assert ready, f"no line for packet {k + 1} while tcpdump runs"
        assert decode.stdout.readline() == f"{k + 1}\t{100 + k}\n".encode()
    assert tcpdump.wait(GUARD) == 0 and decode.wait(GUARD) == 0, decode.stderr.read() if decode.stderr else ""
    if shutil.which("tshark"):
        want = subprocess.run(["tshark", "-r", str(tee), "-T", "fields", "-e", "frame.number", "-e",
                               "infiniband.bth.psn", "-d", "udp.port==4791,infiniband"],
                              capture_output=True, text=True, check=True).stdout
        assert want == "".join(f"{k + 1}\t{100 + k}\n" for k in range(n))


# ----------------------------------------------------------------------------- -i any


@needs_capture
@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump (the peer of -i any) is not installed")
def test_any_captures_what_tcpdump_captures(sender: Sender, tmp_path: Path) -> None:
    """``-i any``: every interface at once, behind Linux cooked v2 headers, each packet once (lo's outgoing
    copy dropped), with the filter in the kernel: byte for byte what ``tcpdump -i any -y LINUX_SLL2``
    captures of the same packets at the same time; tshark reads our file as SLL2 on lo."""
    n = 3
    theirs = tmp_path / "tcpdump.pcap"
    tcpdump = subprocess.Popen(["tcpdump", "-i", "any", "-y", "LINUX_SLL2", "-U", "-w", str(theirs), "-c", str(n),
                                sender.filter], stderr=subprocess.PIPE)
    assert tcpdump.stderr is not None
    said = b""
    while b"listening on any" not in said:  # after "data link type LINUX_SLL2": its filter is in
        ready, _, _ = select.select([tcpdump.stderr], [], [], GUARD)
        assert ready, "tcpdump did not start"
        chunk = os.read(tcpdump.stderr.fileno(), 4096)  # unbuffered: both lines may come in one read
        assert chunk, f"tcpdump ended before it listened: {said!r}"
        said += chunk
    payloads = _roce(n)
    with LiveCapture("any", bpf=sender.filter) as cap:
        assert cap.linktype == 276
        sender.send([b"other port"], port=4792)
        sender.send(payloads)
        ours = list(cap.packets(Stop(packets=n, duration=GUARD)))
        assert cap.stats() == (n, 0)  # the outgoing copies are rejected in the kernel, as on -i lo
    assert tcpdump.wait(GUARD) == 0
    want = [cp.packet.data for cp in read(theirs)]
    assert [data for _ts, data, _wire in ours] == want
    assert [wire for _ts, _data, wire in ours] == [len(d) for d in want]
    lo = socket.if_nametoindex("lo")
    assert [data[:12] for _ts, data, _w in ours] == [bytes.fromhex(f"08000000{lo:08x}03040006")] * n
    out = tmp_path / "any.pcapng"
    proc = subprocess.Popen([sys.executable, "-m", "rdmalab", "capture", "-i", "any", "-w", str(out), "-f",
                             sender.filter, "-c", str(n)], stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], GUARD)
    assert ready and proc.stderr.readline() == b"Capturing on 'any'\n"
    sender.send(payloads)
    assert proc.wait(GUARD) == 0
    pkts = list(read(out))
    assert [cp.packet.encap for cp in pkts] == ["rocev2"] * n
    assert [cp.rdma[0].get(BTH).psn for cp in pkts] == [100, 101, 102]
    if shutil.which("tshark"):
        got = subprocess.run(["tshark", "-r", str(out), "-T", "fields", "-e", "sll.ifindex", "-e", "sll.pkttype",
                              "-e", "infiniband.bth.psn"], capture_output=True, text=True, check=True).stdout
        assert got == "".join(f"{lo}\t0\t{100 + k}\n" for k in range(n))


@needs_capture
def test_any_refuses_a_filter_on_the_cooked_header() -> None:
    """A filter that reads bytes of the cooked header other than its fields cannot run in the kernel on
    ``any``: one sentence, naming the filter and the byte."""
    with pytest.raises(SniffError, match=r"-f 'link\[2\] = 1': on -i any the filter reads byte 2 of the cooked"):
        LiveCapture("any", bpf="link[2] = 1")
