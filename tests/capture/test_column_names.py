"""The columnar decoder's column names are the names the header declarations give their fields.

Each header field's Wireshark name is declared once, in its ``LAYOUT`` (``rdmalab.wire``); the
scapy layers, the field dictionaries and the trees read it from there.  The column table of
:mod:`rdmalab.capture.columnar` lists which fields become columns; this test keeps every name in
it tied to a declaration, so a renamed or misspelt field cannot drift apart silently.
"""

from __future__ import annotations

import rdmalab.wire.cm
import rdmalab.wire.frame
import rdmalab.wire.iwarp
import rdmalab.wire.pfc  # noqa: F401 - imported for their Header subclasses
from rdmalab.capture.columnar import COLUMNS
from rdmalab.wire.header import Header

#: columns that are not one declared header field, and why
COMPUTED = {
    "tcp.len": "segment length: IP total length minus the IP and TCP headers",
    "infiniband.aeth.syndrome": "the whole syndrome byte; the declaration splits it into reserved/opcode/value",
    "infiniband.invariant.crc": "the ICRC trailer, not a header field",
    "iwarp_mpa.crc": "the MPA CRC32c trailer, not a header field",
    "iwarp_mpa.crc_check": "whether that trailer checks (computed)",
}


def _declared() -> set[str]:
    names: set[str] = set()
    todo = list(Header.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        lay = getattr(cls, "LAYOUT", None)
        if lay is not None:
            names.update(f.ws for f in lay.fields if f.ws)
    return names


def test_every_column_is_a_declared_field_or_a_named_computed_one() -> None:
    declared = _declared()
    for col in COLUMNS:
        if col.name.startswith(("frame.", "rdmalab.")):
            continue  # frame metadata and rdmalab's own (non-Wireshark) columns
        assert col.name in declared or col.name in COMPUTED, (
            f"column {col.name!r} is not declared by any header LAYOUT in rdmalab.wire")


def test_the_computed_list_holds_no_declared_name() -> None:
    declared = _declared()
    assert not declared & COMPUTED.keys()
    assert COMPUTED.keys() <= {c.name for c in COLUMNS}
