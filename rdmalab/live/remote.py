"""Kernel rxe objects driven call by call from this process: the live side of ``Pair(backend="rxe")``.

pyverbs imports only under Debian's ``/usr/bin/python3``, and where the host has no rxe device
the devices live in the lab VM.  So a small server (:mod:`rdmalab.live.programs.verbs_server`)
runs next to the devices and owns the real PDs, CQs, MRs and QPs; this module talks to it through
one JSON file per request in a shared directory and hands the notebooks proxies with the
attributes and methods they use on the soft engine::

    server = shared_server()                  # in the lab VM (booted once per process) or on the host
    a, b, t0 = server.pair(mtu=1024)          # two RC endpoints on rxe1 and rxe2, connected, in RTS
    b.qp.post_recv(RecvWR(...)); a.qp.post_send(SendWR(...))   # rdmalab.verbs WR objects
    a.poll()                                  # an rdmalab.verbs.cq.WC filled from the kernel's completion
    b.mr.read(20, 0)                          # the bytes in the kernel-registered buffer
    server.capture()                          # the pcap tcpdump took on veth2 so far (VM only)

Addresses are real: ``mr.buf`` is the buffer's virtual address in the server process, and an
SGE or a remote address the learner computes from it goes to the kernel unchanged, so rxe does
every key and bounds check itself.
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import rdmalab.verbs.enums as e
from rdmalab.fabric.shared import pid_alive
from rdmalab.live.errors import VMError
from rdmalab.live.labruns import host_rxe_pair, shared_vm
from rdmalab.live.vm import VM, Job
from rdmalab.verbs.cq import WC
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.wr import SGE, RecvWR, SendWR

PROGRAM = Path(__file__).parent / "programs" / "verbs_server.py"
PYVERBS_PYTHON = "/usr/bin/python3"
__all__ = ["RemoteEndpoint", "RemoteMR", "RemoteQP", "VerbsServer", "shared_server"]


class VerbsServer:
    """One running verbs server: in the lab VM (``vm``) or on the host (``host_devices``)."""

    def __init__(self, *, vm: VM | None = None, host_devices: tuple[str, str] | None = None,
                 start_timeout: float = 300.0) -> None:
        self.vm = vm
        self.job: Job | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.seq = 0
        self.loss = 0.0   # the netem loss rate now on the wire (set_loss)
        if vm is not None:
            self.devices = ("rxe1", "rxe2")
            self.where = f"VM ({'KVM' if vm.kvm else 'TCG'}) rxe1/rxe2"
            script = ("exec $PYVERBS_PYTHON verbs_server.py \"$RDMALAB_JOB\" --dev-a $KA_DEV --dev-b $KB_DEV "
                      "--netdev-a $KA_NETDEV --netdev-b $KB_NETDEV --capture $KA_NETDEV")
            _stop_orphans(vm)
            # the agent's own capture stays off: the server runs tcpdump for its whole life
            self.job = vm.submit(script, files={"verbs_server.py": PROGRAM}, timeout=6 * 3600, capture=False,
                                 name="verbs-server")
            self.dir = self.job.dir
            (self.dir / "owner").write_text(f"{os.getpid()}\n")
        elif host_devices is not None:
            self.devices = host_devices
            self.where = f"host {host_devices[0]}/{host_devices[1]}"
            self.dir = Path(tempfile.mkdtemp(prefix="rdmalab-verbs-"))
            # no capture on the host: tcpdump there needs root (docs/live.md)
            cmd = [PYVERBS_PYTHON, str(PROGRAM), str(self.dir), "--dev-a", host_devices[0], "--dev-b", host_devices[1]]
            self.log = open(self.dir / "server.log", "wb")  # noqa: SIM115 - kept open while the server runs
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        else:
            raise ValueError("VerbsServer needs a VM or two host rxe devices")
        self.info = self._wait_ready(start_timeout)

    # ------------------------------------------------------------------ transport
    def _dead(self) -> str | None:
        if self.job is not None and self.job.done:
            r = self.job.wait(timeout=5)
            return f"the verbs server in the VM exited with status {r.rc}:\n{r.stderr[-2000:]}"
        if self.job is not None and not self.job.vm.running:
            return "the lab VM stopped"
        if self.proc is not None and self.proc.poll() is not None:
            log = (self.dir / "server.log").read_text(errors="replace")[-2000:]
            return f"the verbs server ({' '.join(map(shlex.quote, self.proc.args))}) exited:\n{log}"  # type: ignore[arg-type]
        return None

    def _wait_ready(self, timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        ready = self.dir / "server.ready"
        while not ready.exists():
            why = self._dead()
            if why:
                raise VMError(why)
            if time.monotonic() - t0 > timeout:
                raise VMError(f"the verbs server did not start within {timeout:.0f} s ({self.dir})")
            time.sleep(0.05)
        info: dict[str, Any] = json.loads(ready.read_text())
        return info

    @property
    def running(self) -> bool:
        return self._dead() is None

    def call(self, op: str, *, wait_s: float = 120.0, **args: Any) -> dict[str, Any]:
        """Send one request and wait for its answer; a failed verb raises ``PyverbsRDMAError``."""
        self.seq += 1
        req, resp = self.dir / "req", self.dir / "resp"
        req.mkdir(exist_ok=True)
        tmp = req / f"{self.seq:06d}.tmp"
        tmp.write_text(json.dumps({"op": op, **args}))
        tmp.rename(req / f"{self.seq:06d}.json")
        answer_path = resp / f"{self.seq:06d}.json"
        t0 = time.monotonic()
        delay = 0.002
        while not answer_path.exists():
            if time.monotonic() - t0 > 2:            # cheap checks first; a dead server only after a while
                why = self._dead()
                if why:
                    raise VMError(f"{op}: {why}")
            if time.monotonic() - t0 > wait_s:
                raise VMError(f"the verbs server did not answer {op!r} within {wait_s:.0f} s ({self.dir})")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)
        answer: dict[str, Any] = json.loads(answer_path.read_text())
        if not answer.get("ok"):
            raise PyverbsRDMAError(f"{op} on {self.where} failed: {answer.get('type')}: {answer.get('error')}")
        return answer

    def close(self) -> None:
        """Stop the server (its tcpdump too); the VM stays up."""
        if self._dead() is None:
            try:
                self.call("stop", wait_s=30)
            except VMError:
                pass
        if self.job is not None and self.job.vm.running:
            try:
                self.job.wait(timeout=30)
            except VMError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()

    # ------------------------------------------------------------------ objects
    def pair(self, *, size: int = 65536, access: int, qp_access: int, path_mtu: int, timeout: int, retry_cnt: int,
             rnr_retry: int, min_rnr_timer: int, max_rd_atomic: int, max_wr: int, cqe: int, psn: tuple[int, int],
             sq_sig_all: int = 1) -> tuple[RemoteEndpoint, RemoteEndpoint, float]:
        """Two RC endpoints (A on the first device, B on the second), connected and in RTS."""
        r = self.call("pair", size=size, access=access, qp_access=qp_access, path_mtu=path_mtu, timeout=timeout,
                      retry_cnt=retry_cnt, rnr_retry=rnr_retry, min_rnr_timer=min_rnr_timer,
                      max_rd_atomic=max_rd_atomic, max_wr=max_wr, cqe=cqe, psn=list(psn), sq_sig_all=sq_sig_all)
        return RemoteEndpoint(self, r["a"]), RemoteEndpoint(self, r["b"]), float(r["t"])

    def set_loss(self, percent: float) -> None:
        """netem loss on the wire, both directions (veth2 and veth3 egress); 0 removes it.  VM only."""
        if self.vm is None:
            raise VMError("packet loss needs the lab VM (tc netem on its veth); the host's rxe devices have no loss knob")
        self.call("loss", percent=percent)
        self.loss = percent / 100.0

    def capture(self) -> Path | None:
        """A consistent copy of everything captured on the wire so far (``None`` without a capture)."""
        r = self.call("capture")
        return self.dir / r["path"] if r.get("path") else None


def _stop_orphans(vm: VM) -> None:
    """Stop verbs servers whose host process died without stopping them (a killed notebook kernel).

    The guest runs one job at a time, so an orphan would hold up every later job in a shared VM.
    """
    for owner in (vm.workdir / "jobs").glob("*verbs-server/owner"):
        d = owner.parent
        try:
            pid = int(owner.read_text())
        except ValueError:
            continue
        if (d / "done").exists() or pid == os.getpid() or pid_alive(pid):
            continue
        seq = len(list((d / "resp").glob("*.json"))) + 1
        (d / "req").mkdir(exist_ok=True)
        (d / "req" / f"{seq:06d}.tmp").write_text(json.dumps({"op": "stop"}))
        (d / "req" / f"{seq:06d}.tmp").rename(d / "req" / f"{seq:06d}.json")


# ---------------------------------------------------------------------- proxies
class RemoteObject:
    def __init__(self, server: VerbsServer, oid: int) -> None:
        self.server, self.id = server, oid


class RemoteContext(RemoteObject):
    def __init__(self, server: VerbsServer, oid: int, name: str) -> None:
        super().__init__(server, oid)
        self.name = name

    def __repr__(self) -> str:
        return f"<Context {self.name} (kernel rxe, {self.server.where})>"


class RemotePD(RemoteObject):
    def __init__(self, server: VerbsServer, oid: int, ctx: RemoteContext) -> None:
        super().__init__(server, oid)
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"<PD on {self.ctx.name} (kernel rxe)>"


class RemoteMR(RemoteObject):
    """A memory region registered with the kernel: ``buf``, ``lkey``, ``rkey``, ``length``, read/write."""

    def __init__(self, server: VerbsServer, oid: int, info: dict[str, Any], pd: RemotePD | None = None) -> None:
        super().__init__(server, oid)
        self.buf, self.lkey, self.rkey, self.length = (int(info[k]) for k in ("buf", "lkey", "rkey", "length"))
        self.pd = pd

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if length > len(raw):
            raise PyverbsRDMAError(f"MR.write: {length} bytes asked, {len(raw)} given")
        self.server.call("mr_write", mr=self.id, hex=raw[:length].hex(), length=length, offset=offset)

    def read(self, length: int, offset: int = 0) -> bytes:
        return bytes.fromhex(self.server.call("mr_read", mr=self.id, length=length, offset=offset)["hex"])

    def __repr__(self) -> str:
        return f"<MR {self.length} bytes at {self.buf:#x}, lkey {self.lkey:#x}, rkey {self.rkey:#x} (kernel rxe)>"


def _sg(items: list[SGE] | None) -> list[dict[str, int]]:
    return [{"addr": int(s.addr), "length": int(s.length), "lkey": int(s.lkey)} for s in (items or [])]


def send_wr_dict(wr: SendWR) -> dict[str, Any]:
    """An ``rdmalab.verbs`` (or pyverbs-shaped) send WR as the server's JSON."""
    if getattr(wr, "next_wr", None) is not None:
        raise PyverbsRDMAError("post_send: chained work requests (next_wr) are not supported on the rxe backend")
    sg = list(wr.sg)[: int(wr.num_sge)] if wr.num_sge else []
    return {"wr_id": int(wr.wr_id), "opcode": int(wr.opcode), "send_flags": int(wr.send_flags),
            "imm_data": int(wr.imm_data) & 0xFFFFFFFF, "sg": _sg(sg), "rkey": int(getattr(wr, "rkey", 0)),
            "remote_addr": int(getattr(wr, "remote_addr", 0)), "compare_add": int(getattr(wr, "compare_add", 0)),
            "swap": int(getattr(wr, "swap", 0))}


class RemoteQP(RemoteObject):
    """An RC QP in the kernel: ``qp_num``, ``post_send``, ``post_recv``, ``qp_state`` (queried)."""

    def __init__(self, server: VerbsServer, oid: int, qpn: int) -> None:
        super().__init__(server, oid)
        self.qp_num = qpn
        self.qp_type = e.IBV_QPT_RC

    def post_send(self, wr: SendWR, bad_wr: Any = None) -> None:
        self.server.call("post_send", qp=self.id, wr=send_wr_dict(wr))

    def post_recv(self, wr: RecvWR, bad_wr: Any = None) -> None:
        if getattr(wr, "next_wr", None) is not None:
            raise PyverbsRDMAError("post_recv: chained work requests (next_wr) are not supported on the rxe backend")
        sg = list(wr.sg)[: int(wr.num_sge)] if wr.num_sge else []
        self.server.call("post_recv", qp=self.id, wr={"wr_id": int(wr.wr_id), "sg": _sg(sg)})

    @property
    def qp_state(self) -> int:
        return int(self.server.call("qp_state", qp=self.id)["state"])

    @property
    def qp_state_name(self) -> str:
        return e.QP_STATE_NAMES.get(self.qp_state, "UNKNOWN")

    def __repr__(self) -> str:
        return f"<QP RC {self.qp_num:#x} (kernel rxe, {self.server.where})>"


class RemoteCQ(RemoteObject):
    def poll(self, num_entries: int = 1, timeout: float = 0.0) -> tuple[int, list[WC]]:
        """Like ``CQ.poll``; ``timeout`` s to wait for the entries (0: take what is there)."""
        wcs = [_wc(d) for d in self.server.call("poll", cq=self.id, n=num_entries, timeout=timeout)["wcs"]]
        return len(wcs), wcs

    def __repr__(self) -> str:
        return "<CQ (kernel rxe)>"


def _wc(d: dict[str, Any]) -> WC:
    return WC(wr_id=int(d["wr_id"]), status=int(d["status"]), opcode=int(d["opcode"]), vendor_err=int(d["vendor_err"]),
              byte_len=int(d["byte_len"]), qp_num=int(d["qp_num"]), src_qp=int(d["src_qp"]),
              imm_data=int(d["imm_data"]), wc_flags=int(d["wc_flags"]))


class RemoteEndpoint:
    """One side of a live pair, with the attributes of ``rdmalab.fabric.harness.Endpoint``."""

    #: how long ``poll()`` waits for a completion: past rxe's retransmission timer (timeout 14:
    #: about 67 ms per try) and an emulated VM's slowness, short enough to answer "none"
    POLL_S = 8.0
    #: how long ``completions()`` waits for stragglers
    SETTLE_S = 0.5

    def __init__(self, server: VerbsServer, info: dict[str, Any]) -> None:
        self.server = server
        self.name = str(info["dev"])
        self.ctx = RemoteContext(server, int(info["ctx"]), self.name)
        self.pd = RemotePD(server, int(info["pd"]), self.ctx)
        self.cq = RemoteCQ(server, int(info["cq"]))
        self.mr = RemoteMR(server, int(info["mr"]), info["mr_info"], self.pd)
        self.qp = RemoteQP(server, int(info["qp"]), int(info["qpn"]))
        self.psn = int(info["psn"])
        self.gid = str(info["gid"])
        self.srq = None
        self.extra: dict[str, Any] = {}

    def sge(self, offset: int = 0, length: int | None = None, mr: RemoteMR | None = None) -> SGE:
        mr = mr or self.mr
        return SGE(mr.buf + offset, mr.length - offset if length is None else length, mr.lkey)

    def recv(self, wr_id: int = 0, offset: int = 0, length: int | None = None, sges: list[SGE] | None = None) -> None:
        sg = sges if sges is not None else [self.sge(offset, length)]
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=len(sg), sg=sg))

    def poll(self, timeout: float | None = None) -> WC | None:
        """The next completion of this endpoint's CQ, waiting up to ``POLL_S`` s; ``None`` if none came."""
        n, wcs = self.cq.poll(1, self.POLL_S if timeout is None else timeout)
        return wcs[0] if n else None

    def completions(self) -> list[WC]:
        """Every completion that is there, or arrives within ``SETTLE_S`` s."""
        _, wcs = self.cq.poll(4096, self.SETTLE_S)
        return wcs

    def reg_mr(self, length: int, access: int, pd: RemotePD | None = None) -> RemoteMR:
        """Register ``length`` bytes more in ``pd`` (this endpoint's PD by default)."""
        pd = pd or self.pd
        r = self.server.call("mr", pd=pd.id, length=length, access=access)
        return RemoteMR(self.server, int(r["mr"]), r["mr_info"], pd)

    def alloc_pd(self) -> RemotePD:
        """A second protection domain on this endpoint's device."""
        return RemotePD(self.server, int(self.server.call("pd", ctx=self.ctx.id)["pd"]), self.ctx)

    def __repr__(self) -> str:
        return f"<{self.name}: QP {self.qp.qp_num:#x}, MR {self.mr.length} B rkey {self.mr.rkey:#x} ({self.server.where})>"


# ---------------------------------------------------------------------- one server per process
_SHARED: VerbsServer | None = None


def shared_server(**vm_options: Any) -> VerbsServer:
    """The process's verbs server: on the host's rxe devices if it has two, else in the shared lab VM.

    The VM is :func:`rdmalab.live.labruns.shared_vm` (booted on first use, with progress on
    stderr); the server and the VM stop when the interpreter exits.
    """
    global _SHARED
    if _SHARED is not None and _SHARED.running:
        return _SHARED
    host = host_rxe_pair()
    if host is not None:
        _SHARED = VerbsServer(host_devices=host)
    else:
        _SHARED = VerbsServer(vm=shared_vm(**vm_options))
    # atexit runs in reverse order: this one (registered after the VM's) stops the server first
    atexit.register(_SHARED.close)
    return _SHARED
