"""Captures: pcap/pcapng in and out, frame -> packet dissection, JSON, the Wireshark cross-check.

>>> from rdmalab import capture
>>> for cp in capture.read("captures/synthetic_rocev2.pcap"):   # doctest: +SKIP
...     print(cp.frame_number, cp.packet.summary())

The names below load on first use, so that importing one light module of this package (the
capture writer, which the fabrics' taps use) does not load the decoders and numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdmalab.capture.fields import frame_fields, to_json
    from rdmalab.capture.linktypes import decode_frame
    from rdmalab.capture.pcapwriter import CaptureWriter, write_capture
    from rdmalab.capture.reader import CapturedPacket, CaptureError, RawRecord, decode_record, read, records, write_pcap

__all__ = [
    "CaptureError", "CaptureWriter", "CapturedPacket", "RawRecord",
    "decode_frame", "decode_record", "frame_fields", "read", "records", "to_json", "write_capture", "write_pcap",
]

_HOME = {"frame_fields": "fields", "to_json": "fields", "decode_frame": "linktypes",
         "CaptureWriter": "pcapwriter", "write_capture": "pcapwriter"}


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME.get(name, 'reader')}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
