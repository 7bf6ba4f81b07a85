"""``rdmalab perftest``'s options: :class:`PerftestOptions` (with perftest's defaults per test,
``src/perftest_parameters.c``), the tests it knows (``VERBS``, with perftest's names and numbers),
the limits (``MAX_SIZE``; ``OUT_READS``: the device's max_qp_rd_atom), ``ATOMIC_IWARP`` (why
``atomic`` has no iWARP peer), and the errors the tool raises (:class:`PerftestError`: what perftest would print before
exiting 1; :class:`Rejected`: the peer's CM refused the connection).
"""

from __future__ import annotations

from dataclasses import dataclass

VERBS = ("write", "read", "send", "atomic")
TEST_NAME = {"send": "Send", "write": "RDMA_Write", "read": "RDMA_Read", "atomic": "Atomic"}
VERB_NUM = {"send": 0, "write": 1, "read": 2, "atomic": 3}
MAX_SIZE = 8388608
OUT_READS = 128  # the device's max_qp_rd_atom (rxe and the soft engine: 128)
ATOMIC_IWARP = ("atomic over iWARP: RDMAP (RFC 5040) as kernel siw implements it has no atomic operations "
                "(siw 6.1 answers any opcode above Terminate with a TERMINATE), so ib_atomic_bw has no iWARP peer")


class PerftestError(Exception):
    """What perftest would print before exiting 1 (one sentence)."""


class Rejected(PerftestError):
    """The peer's CM answered the REQ with a REJ."""


@dataclass
class PerftestOptions:
    verb: str = "write"
    server: str | None = None
    port: int = 18515
    ifname: str | None = None
    ib_port: int = 1
    size: int | None = None
    iters: int | None = None
    duration: float | None = None
    all_sizes: bool = False
    gid_idx: int | None = None
    mtu: int | None = None
    report_gbits: bool = False
    atomic_type: str = "FETCH_AND_ADD"
    tx_depth: int = 128
    rx_depth: int = 512
    cq_mod: int = 100
    num_qps: int = 1
    timeout: float = 60.0
    pcap: str | None = None
    rdma_cm: bool = False  # -R: both QPs connected by rdma_cm, the exchange over the first one
    #: "auto" (the device's), "roce" or "iwarp": the transport of the device -R uses; with ``ifname`` the
    #: device made on that interface has it, without, a linked device of that transport is taken
    transport: str = "auto"
    mpa_crc: bool = False  # iWARP: ask for MPA CRC32c in the MPA Request/Reply (the C flag)

    def __post_init__(self) -> None:
        if self.size is None:
            self.size = 8 if self.verb == "atomic" else 65536
        if self.iters is None:
            self.iters = 5000 if self.verb == "write" else 1000
