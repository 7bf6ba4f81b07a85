"""Devices found as libibverbs finds them: no carrier import, providers loaded on first use, linked devices."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import rdmalab.verbs.pyverbs_alias as alias_module
from rdmalab.cli import main as cli_main
from rdmalab.fabric import links
from rdmalab.verbs import providers
from rdmalab.verbs.device import Context, get_device_list
from rdmalab.verbs.pyverbs_error import PyverbsRDMAError

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter (nothing of rdmalab imported yet), links file out of the way."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("RDMALAB_LINK")}
    e.update({"RDMALAB_LINK_FILE": "/nonexistent/rdmalab-links.json", "PYTHONPATH": str(ROOT)}, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_get_device_list_needs_no_other_import() -> None:
    r = _fresh("import sys\n"
               "from rdmalab.verbs.device import get_device_list, Context\n"
               "assert 'rdmalab.fabric' not in sys.modules, 'the verbs layer imported a carrier by itself'\n"
               "print([d.name for d in get_device_list()])\n"
               "ctx = Context(name='soft1'); print(ctx.query_gid(1, 1).gid)\n")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[b'soft0', b'soft1']"
    assert lines[1] == "0000:0000:0000:0000:0000:ffff:0a00:0002"


def test_the_pyverbs_alias_docstring_example_runs_as_written() -> None:
    doc = alias_module.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n")[1]
    code = "\n".join(line[4:] for line in block.splitlines())
    assert "pyverbs.device" in code and "rdmalab.fabric" not in code
    r = _fresh(code + "\nprint(ctx.name, ctx.query_port(1).state)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["soft0", "4"]


def test_the_providers_are_the_ones_pyproject_declares() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."rdmalab.verbs.providers"]', 1)[1].split("\n\n", 1)[0]
    declared = dict(line.replace('"', "").split(" = ") for line in section.strip().splitlines())
    assert declared == providers.BUILTIN
    assert providers.declared() == providers.BUILTIN  # the installed metadata says the same


def test_a_provider_that_cannot_load_is_named() -> None:
    with pytest.raises(providers.ProviderError, match=r"'broken' \(no_such_module:f\) cannot be loaded"):
        providers._load("broken", "no_such_module:f")


def test_links_env_with_a_missing_interface_is_a_clear_error() -> None:
    r = _fresh("from rdmalab.verbs.device import get_device_list\n"
               "try:\n    get_device_list()\nexcept Exception as e:\n    print(type(e).__name__, e)\n",
               RDMALAB_LINKS="soft7=nosuchif0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PyverbsRDMAError")
    assert "soft7" in r.stdout and "nosuchif0" in r.stdout and "no network interface" in r.stdout


def test_links_env_that_is_not_name_equals_netdev_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RDMALAB_LINKS", "soft0=veth1,soft1")
    with pytest.raises(links.LinkError, match=r"item 2 \('soft1'\) is not NAME=NETDEV"):
        links.read_links()


def test_link_add_show_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "links.json"
    monkeypatch.setenv("RDMALAB_LINK_FILE", str(f))
    monkeypatch.delenv("RDMALAB_LINKS", raising=False)
    assert cli_main(["link", "add", "soft5", "netdev", "nosuchif0"]) == 1
    assert "no network interface named 'nosuchif0'" in capsys.readouterr().err
    assert not f.exists()
    assert cli_main(["link", "add", "soft5", "netdev", "lo"]) == 0
    assert json.loads(f.read_text()) == {"soft5": {"netdev": "lo"}}
    assert cli_main(["link", "add", "soft6", "netdev", "lo"]) == 1
    assert "lo already carries soft5" in capsys.readouterr().err
    assert cli_main(["link", "show"]) == 0
    out = capsys.readouterr().out
    assert "soft5" in out and "netdev lo" in out and "127.0.0.1" in out
    assert cli_main(["link", "delete", "soft5"]) == 0
    assert json.loads(f.read_text()) == {}
    assert cli_main(["link", "delete", "soft5"]) == 1
    assert "no link named soft5" in capsys.readouterr().err


def _can_raw() -> bool:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP).close()
    except PermissionError:
        return False
    return True


@pytest.mark.skipif(not _can_raw(), reason="a linked device opens a raw socket: needs root or CAP_NET_RAW")
def test_a_linked_device_is_found_with_its_interface_and_address_and_replaces_the_simulated_ones() -> None:
    code = ("from rdmalab.verbs.device import get_device_list, Context\n"
            "names = [d.name for d in get_device_list()]\n"
            "ctx = Context(name='soft0')\n"
            "print(names, ctx.device.ifname, ctx.query_gid(1, 1).gid, type(ctx.device.carrier).__name__)\n"
            "try:\n    Context(name='soft1')\nexcept Exception as e:\n    print(e)\n")
    r = _fresh(code, RDMALAB_LINKS="soft0=lo")
    if "cannot bind UDP 127.0.0.1:4791" in r.stderr + r.stdout:
        pytest.skip("UDP 4791 on lo is taken on this machine")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == "[b'soft0'] lo 0000:0000:0000:0000:0000:ffff:7f00:0001 UdpFabric"
    assert "soft1: not found (have ['soft0'])" in second


def test_context_of_an_unknown_device_names_what_there_is() -> None:
    with pytest.raises(PyverbsRDMAError, match=r"soft9: not found \(have \['soft0', 'soft1'"):
        Context(name="soft9")
    assert [d.name for d in get_device_list()][:2] == [b"soft0", b"soft1"]


@pytest.mark.skipif(not _can_raw(), reason="a linked device opens a raw socket: needs root or CAP_NET_RAW")
def test_a_linked_device_leaves_sigio_ignored_at_exit() -> None:
    # SIGIO answers packets while the program waits elsewhere (rdmalab.fabric.background); the
    # interpreter puts SIGIO's default action (terminate) back while it shuts down, so a late packet
    # would kill a program that ended well: at exit SIGIO must be ignored and the socket not signal.
    code = ("import atexit, signal\n"
            "atexit.register(lambda: print('at exit:', signal.getsignal(signal.SIGIO) == signal.SIG_IGN))\n"
            "from rdmalab.verbs.device import Context\n"
            "ctx = Context(name='soft0')\n"
            "print('during:', signal.getsignal(signal.SIGIO).__name__)\n")
    r = _fresh(code, RDMALAB_LINKS="soft0=lo")
    if "cannot bind UDP 127.0.0.1:4791" in r.stderr + r.stdout:
        pytest.skip("UDP 4791 on lo is taken on this machine")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["during: _on_sigio", "at exit: True"]


def test_link_add_keeps_the_files_links_when_rdmalab_links_is_set(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "links.json"
    f.write_text(json.dumps({"soft3": {"netdev": "nosuchif9"}}))
    monkeypatch.setenv("RDMALAB_LINK_FILE", str(f))
    monkeypatch.setenv("RDMALAB_LINKS", "soft0=eth9")  # what a program would use; `rdmalab link` edits the file
    assert cli_main(["link", "add", "soft5", "netdev", "lo"]) == 0
    assert json.loads(f.read_text()) == {"soft3": {"netdev": "nosuchif9"}, "soft5": {"netdev": "lo"}}
    assert links.read_links() == {"soft0": "eth9"}
