"""Checkers for 01-dma-to-rdma."""

from __future__ import annotations

from typing import Any

from rdmalab.lab.core import Wrong, exercise
from rdmalab.lab.feedback import as_int, plain

NB = "01-dma-to-rdma"


@exercise("dma.copies", "Count the user/kernel copies of a socket transfer", notebook=NB, hints=(
    "wchar counts bytes the thread handed to the kernel in write-like calls; rchar bytes it got back in read-like calls.",
    "Divide the bytes that crossed the user/kernel boundary by the size of the message.",
))
def _copies(answer: Any) -> str:
    got = as_int(answer, "a number of copies", field="copies")
    expected = "how many times the message crossed the user/kernel boundary: (wchar + rchar) / message size"
    if got == 2:
        return "Two: sender user buffer -> kernel socket buffer, and kernel socket buffer -> receiver user buffer."
    if got == 1:
        raise Wrong("One crossing is not all: the message crossed the boundary in another place too. Add up what "
                    "both threads handed to the kernel (wchar) and took from it (rchar).", field="copies",
                    expected=expected, given=plain(got))
    if got == 0:
        raise Wrong("Zero would mean the message never passed through the kernel, and a socket's data does: look at "
                    "wchar and rchar.", field="copies", expected=expected, given=plain(got))
    raise Wrong(f"{got} copies through system calls would move {got} times the message; look at rchar and wchar.",
                field="copies", expected=expected, given=plain(got))


@exercise("dma.syscalls", "System calls on the RDMA data path", notebook=NB, hints=(
    "The cell of the WRITE kept the change of the thread's counters across it in the variable engine.",
    "syscr counts the thread's read-like system calls, syscw its write-like ones.",
))
def _syscalls(answer: Any) -> str:
    got = as_int(answer, "a number of system calls", field="syscalls")
    if got == 0:
        return "None: posting the work request and polling the CQ stay in user space (kernel bypass)."
    raise Wrong(f"{got} system calls? Compare the syscr/syscw counters before and after the engine's transfer.",
                field="syscalls", expected="the change in syscr + syscw across the RDMA transfer")
