"""Captures: pcap/pcapng in and out, frame -> packet dissection, JSON, the Wireshark cross-check.

>>> from rdmalab import capture
>>> for cp in capture.read("captures/synthetic_rocev2.pcap"):   # doctest: +SKIP
...     print(cp.frame_number, cp.packet.summary())
"""

from rdmalab.capture.fields import frame_fields, to_json
from rdmalab.capture.linktypes import decode_frame
from rdmalab.capture.reader import CapturedPacket, CaptureError, RawRecord, decode_record, read, records, write_pcap

__all__ = [
    "CaptureError", "CapturedPacket", "RawRecord",
    "decode_frame", "decode_record", "frame_fields", "read", "records", "to_json", "write_pcap",
]
