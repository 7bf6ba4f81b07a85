"""Run one submitted notebook: what ``rdmalab grade`` starts inside each submission's sandbox.

``python -m rdmalab.lab.runner NOTEBOOK OUTDIR --cell-timeout S`` executes the notebook in a fresh
kernel with nbclient, a time limit per cell (a cell that runs too long is interrupted and the run goes
on; a cell that raises does not stop it either), and writes ``OUTDIR/run.json``: the cells that raised
or timed out, and how the kernel ended.  The kernel's ``lab.check`` calls write their answers to
``$RDMALAB_CHECK_LOG``, which the grader points into ``OUTDIR``.

Everything here runs inside the sandbox, beside the submission's own code: ``run.json`` is only a
report of problems to show the instructor, never a grade.  The grader reads it and the check log
after the sandbox has ended and judges every answer again in its own process.

With ``--reap`` (the grader passes it inside a sandbox, where this process and its kernel are alone
in their PID namespace), every other process is killed after each cell: a cell that leaves a process
behind (a detached server, a fork bomb) leaves it only until its cell ends.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from queue import Empty
from typing import Any

#: the most ``run.json`` a grader reads (it is written inside the sandbox)
REPORT_LIMIT = 1 << 20
#: a kernel whose address space came this close to its limit had none left to work with
MEMORY_MARGIN = 64 << 20
#: how long a kernel interrupted at its cell's time limit is given to answer again (at least; twice the cell's
#: limit when that is longer) before the notebook is given up
ANSWER_SECONDS = 30


class Silent(Exception):
    """The kernel did not answer after a cell was interrupted at its time limit (:func:`answers`)."""


async def answers(client: Any, seconds: float) -> bool:
    """Whether the kernel of the nbclient ``client`` answers a ``kernel_info`` request within ``seconds``
    (the replies to earlier requests, an interrupted cell's late one, passed over).

    Why: a kernel can stop answering for good and stay alive: one that ran out of memory in a hog's cell was
    seen closing itself, stuck in zmq's ``Context.term``. nbclient would then give every cell after it its
    whole time limit (19 cells of 40 s and the output waits: 14 minutes, the test's own time limit)."""
    msg_id = client.kc.kernel_info()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await client.kc.shell_channel.get_msg(timeout=left)
        except Empty:
            return False
        if (msg.get("parent_header") or {}).get("msg_id") == msg_id:
            return True
    return False


def _reap(keep: set[int]) -> int:
    """Kill every process of this PID namespace but ``keep`` and our ancestors; how many there were."""
    me = os.getpid()
    ancestors = set()
    pid = me
    while pid > 1:
        ancestors.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == 1 or pid in ancestors or pid in keep:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except OSError:
            pass
    return n


def sliced(get_msg: Callable[..., Awaitable[Any]], step: float = 1.0) -> Callable[..., Awaitable[Any]]:
    """``get_msg(timeout=T)`` of a kernel client's channel, asked in slices of ``step`` seconds until ``T``.

    Why: with the Jupyter client stack this lab installs (nbclient 0.11, jupyter_client 8.10, pyzmq 27),
    the wait for a cell's execute reply sometimes does not wake when the reply arrives, after a cell that
    opened widget comms (about one run in four of the lab's widget cells): it wakes at the end of its
    timeout, reads the reply then and goes on, so a cell of a few seconds took the whole cell timeout
    (600 s in a test). Each slice's end looks at the socket again."""
    async def get(timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = step if deadline is None else min(step, max(0.0, deadline - time.monotonic()))
            try:
                return await get_msg(timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
    return get


def wake_for_replies(client: Any, step: float = 1.0) -> Any:
    """Have the nbclient ``client`` wait for each cell's reply in slices (:func:`sliced`), from the moment
    its kernel client exists (its ``on_notebook_start`` hook, any hook it had called after); ``client``."""
    before = client.on_notebook_start

    def start(**kw: Any) -> Any:
        chan = client.kc.shell_channel
        chan.get_msg = sliced(chan.get_msg, step)
        return before(**kw) if before is not None else None

    client.on_notebook_start = start
    return client


def watch_messages(client: Any, on_error: Callable[[], None]) -> Any:
    """Call ``on_error()`` when a message from the kernel of the nbclient ``client`` cannot be read, before
    the error goes on; ``client``.

    Why: a kernel that has used its whole address space (``RLIMIT_AS``, the sandbox's memory limit) can
    fail half-way through sending a message; the next message then arrives joined to the torn one and
    jupyter_client refuses it ("Invalid Signature"), and nbclient stops the notebook with that error.
    The kernel is still alive at that moment (it sent the message), so its memory can be looked at."""
    before = client.on_notebook_start

    def wrap(get_msg: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def get(*args: Any, **kw: Any) -> Any:
            try:
                return await get_msg(*args, **kw)
            except Empty:
                raise
            except Exception:
                on_error()
                raise
        return get

    def start(**kw: Any) -> Any:
        for chan in (client.kc.shell_channel, client.kc.iopub_channel):
            chan.get_msg = wrap(chan.get_msg)
        return before(**kw) if before is not None else None

    client.on_notebook_start = start
    return client


def _address_space(pid: int) -> dict[str, int]:
    """``VmPeak`` and ``VmSize`` of a process in bytes, from ``/proc/PID/status`` (``{}`` if it is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmSize") and value.split()[1:] == ["kB"]:
                out[key] = int(value.split()[0]) << 10
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _memory_used(peak: dict[str, int]) -> str:
    """`` (the kernel had used its whole memory limit ...)`` when the kernel's address space at its peak
    (``peak``: :func:`_address_space`'s) reached its limit (``RLIMIT_AS``, the kernel's own: it inherits
    this process's), else ``""``."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY or peak.get("VmPeak", 0) < limit - MEMORY_MARGIN:
        return ""
    return (f" (the kernel had used its whole memory limit, {peak['VmPeak'] >> 20} of {limit >> 20} MiB of "
            "address space, which leaves it none to send messages with)")


def _first_line(cell: Any) -> str:
    return next((x for x in str(cell.get("source", "")).splitlines() if x.strip()), "")[:50]


def execute(notebook: Path, outdir: Path, *, cell_timeout: int, reap: bool = False,
            kernel: str = "python3") -> dict[str, Any]:
    import nbclient  # optional: nbclient, nbformat (lab extra)
    import nbformat
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    report: dict[str, Any] = {"problems": [], "reaped": 0, "kernel": "ran"}
    nb = nbformat.read(notebook, as_version=4)  # type: ignore[no-untyped-call]
    # shutdown_kernel "immediate": the kernel is killed once the cells have run, not asked to shut down. A
    # kernel asked to has been seen to hang in its own close (ipykernel's IPKernelApp.close, in zmq's
    # Context.term) for 14 minutes after a hostile submission, and its outputs are all here already
    client = nbclient.NotebookClient(
        nb, timeout=cell_timeout, kernel_name=kernel, allow_errors=True, interrupt_on_timeout=True,
        shutdown_kernel="immediate",
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"ran longer than {cell_timeout} s",
                          "traceback": []},
        resources={"metadata": {"path": str(outdir)}})
    started: dict[str, float] = {}
    took: dict[str, float] = {}
    current: dict[str, Any] = {}  # the cell running now
    peak: dict[str, int] = {}  # the kernel's address space at its peak, when its messages broke
    timed_out: set[str] = set()  # the cells nbclient interrupted at their time limit

    def kernel_pid() -> set[int]:
        proc = getattr(getattr(client.km, "provisioner", None), "process", None)
        return {proc.pid} if proc is not None and proc.poll() is None else set()

    def on_start(cell: Any, cell_index: int) -> None:
        started[cell.get("id", "")] = time.monotonic()
        current["cell"] = cell

    def on_done(cell: Any, cell_index: int, execute_reply: Any) -> Awaitable[None] | None:
        took[cell.get("id", "")] = time.monotonic() - started.get(cell.get("id", ""), time.monotonic())
        if reap:
            report["reaped"] += _reap(kernel_pid())
        # nbclient's own reply for a cell it interrupted (error_on_timeout above): the cell ran too long even
        # when the kernel's KeyboardInterrupt is late (a busy kernel, a fork bomb) and the cell has no error output
        if ((execute_reply or {}).get("content") or {}).get("ename") == "CellTimeoutError":
            timed_out.add(cell.get("id", ""))
            return still_there()
        return None

    async def still_there() -> None:
        """After an interrupt: the notebook goes on only with a kernel that answers (:func:`answers`)."""
        wait = max(ANSWER_SECONDS, 2 * cell_timeout)
        if not await answers(client, wait):
            on_broken_message()  # (its address space, while it is alive)
            raise Silent(f"the kernel did not answer for {wait} s after the cell was interrupted")

    def on_broken_message() -> None:
        for pid in kernel_pid():  # still alive: it is the kernel that sent the message
            peak.update(_address_space(pid))

    client.on_cell_start = on_start
    client.on_cell_executed = on_done
    wake_for_replies(client)
    watch_messages(client, on_broken_message)
    try:
        client.execute()
    except DeadKernelError:
        report["kernel"] = "died"
    except CellExecutionError as err:  # only when allow_errors is overridden by a cell tag
        report["problems"].append(f"stopped: {getattr(err, 'ename', '')}: {getattr(err, 'evalue', '')}")
    except Silent as err:
        report["kernel"] = "silent"
        cell = current["cell"]
        report["problems"].append(f"cell {cell.get('id', '?')} ({_first_line(cell)!r}): {err}{_memory_used(peak)}; "
                                  "the cells after it were not run")
    except Exception as err:  # noqa: BLE001 - the kernel's messages could not be read (see watch_messages)
        if "cell" not in current:
            raise  # before the first cell: the kernel could not be started (main says so)
        report["kernel"] = "broke"
        cell = current["cell"]
        report["problems"].append(
            f"cell {cell.get('id', '?')} ({_first_line(cell)!r}): the kernel's messages could not be read any "
            f"more{_memory_used(peak)}: {type(err).__name__}: {str(err)[:60]}")
    interrupted = f"ran longer than {cell_timeout} s and was interrupted"
    for cell in nb.cells:
        said = f"cell {cell.get('id', '?')} ({_first_line(cell)!r})"
        errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
        stops = [out for out in errors if out.get("ename") in ("KeyboardInterrupt", "CellTimeoutError")]
        stopped = cell.get("id", "") in timed_out or bool(stops) and took.get(cell.get("id", ""), 0) >= cell_timeout
        if stopped:  # (said once, whatever the kernel's own error output)
            report["problems"].append(f"{said}: {interrupted}")
        for out in errors:
            if not (stopped and out in stops):
                report["problems"].append(f"{said}: {out.get('ename')}: {str(out.get('evalue', ''))[:120]}")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rdmalab.lab.runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--cell-timeout", type=int, default=60)
    ap.add_argument("--reap", action="store_true")
    args = ap.parse_args(argv)
    try:
        report = execute(args.notebook, args.outdir, cell_timeout=args.cell_timeout, reap=args.reap)
    except Exception as err:  # a notebook nbformat cannot read, a kernel that cannot start
        report = {"problems": [f"the notebook could not be run: {type(err).__name__}: {str(err)[:300]}"],
                  "kernel": "not started"}
    (args.outdir / "run.json").write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
