"""``rdmalab.wire`` and ``rdmalab.fabric`` load their names on first use (PEP 562): each name they
list resolves to the object of its module, and importing one submodule loads no other codec."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rdmalab.fabric
import rdmalab.wire
from rdmalab.fabric import sim


def test_every_listed_name_resolves_to_its_module_object() -> None:
    assert sorted(rdmalab.wire.__all__) == sorted(rdmalab.wire._FROM)
    for name in rdmalab.wire.__all__:
        module = sys.modules.get(f"rdmalab.wire.{rdmalab.wire._FROM[name]}") or __import__(
            f"rdmalab.wire.{rdmalab.wire._FROM[name]}", fromlist=[name])
        assert getattr(rdmalab.wire, name) is getattr(module, name), name
    for name in rdmalab.fabric.__all__:
        assert getattr(rdmalab.fabric, name) is getattr(sim, name)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_codec"):
        rdmalab.wire.no_such_codec  # noqa: B018
    with pytest.raises(AttributeError, match="Nope"):
        rdmalab.fabric.Nope  # noqa: B018


def test_importing_the_crc_loads_no_frame_decoder() -> None:
    code = ("import sys, rdmalab.wire.crc\n"
            "print(sorted(m for m in ('rdmalab.wire.frame', 'rdmalab.wire.cm', 'rdmalab.wire.mad', 'rdmalab.wire.mpa')"
            " if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
