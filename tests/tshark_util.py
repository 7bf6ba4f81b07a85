"""Shared test helpers for the Wireshark oracle (a plain module: test files import it by name)."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import pytest

#: tshark 4.0's infiniband.* fields (abbreviation, FT_ type, label, base, mask), from the
#: shared reference vectors; used to type the values tshark prints.
FIELDS_TSV = Path(__file__).resolve().parent / "data" / "wireshark-infiniband-fields.tsv"


def tshark_path() -> str | None:
    return shutil.which("tshark")


requires_tshark = pytest.mark.skipif(tshark_path() is None, reason="tshark (Wireshark) is not installed")


def field_types() -> dict[str, str]:
    """Wireshark field name -> its FT_ type, for the infiniband.* fields."""
    out = {}
    for line in FIELDS_TSV.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) > 1:
            out[parts[0]] = parts[1]
    return out


def field_value(kind: str, text: str) -> int:
    """A value as tshark -T json prints it, as an integer according to its FT_ type."""
    if kind == "FT_IPv4":
        return int(ipaddress.IPv4Address(text))
    if kind == "FT_IPv6":
        return int(ipaddress.IPv6Address(text))
    if kind == "FT_BYTES":
        return int.from_bytes(bytes.fromhex(text.replace(":", "")), "big")
    return int(text, 16) if text.startswith("0x") else int(text)
