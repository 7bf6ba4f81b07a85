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


def test_link_add_makes_siw_and_rxe_devices_and_show_and_delete_handle_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "links.json"
    monkeypatch.setenv("RDMALAB_LINK_FILE", str(f))
    monkeypatch.delenv("RDMALAB_LINKS", raising=False)
    assert cli_main(["link", "add", "siw0", "type", "siw", "netdev", "lo"]) == 0
    assert capsys.readouterr().out == "link siw0 type siw netdev lo ip 127.0.0.1\n"
    assert json.loads(f.read_text()) == {"siw0": {"netdev": "lo", "type": "siw"}}
    assert links.configured() == {"siw0": links.Link("lo", "siw")}
    assert cli_main(["link", "add", "soft6", "type", "rxe", "netdev", "lo"]) == 1  # one device per interface
    assert "lo already carries siw0 (type siw)" in capsys.readouterr().err
    assert cli_main(["link", "add", "siw0", "type", "siw", "netdev", "lo"]) == 1
    assert "device siw0 already exists (type siw on lo)" in capsys.readouterr().err
    assert cli_main(["link", "show"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "link siw0 type siw netdev lo ip 127.0.0.1"
    assert cli_main(["link", "delete", "siw0"]) == 0
    assert json.loads(f.read_text()) == {}
    # type rxe said is the default said: the file reads as before the types
    assert cli_main(["link", "add", "soft6", "type", "rxe", "netdev", "lo"]) == 0
    assert capsys.readouterr().out == "link soft6 type rxe netdev lo ip 127.0.0.1\n"
    assert json.loads(f.read_text()) == {"soft6": {"netdev": "lo"}}
    assert cli_main(["link", "show"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "link soft6 type rxe netdev lo ip 127.0.0.1"
    assert cli_main(["link", "delete", "soft6"]) == 0


@pytest.mark.parametrize(("words", "error"), [
    (["type", "mlx5", "netdev", "lo"], "device type 'mlx5' is unknown: the types are rxe (RoCEv2 on UDP, as kernel "
                                       "rxe); siw (iWARP on the kernel's TCP, as kernel siw)"),
    (["type", "siw"], "link add: which interface? rdmalab link add NAME [type rxe|siw] netdev IFNAME"),
    (["netdev"], "link add: netdev needs a value"),
    (["netdev", "lo", "netdev", "lo"], "link add: netdev given twice"),
    (["dev", "lo"], "link add: 'dev' is not a keyword of rdmalab link add NAME [type rxe|siw] netdev IFNAME"),
])
def test_link_add_says_what_is_wrong_with_its_words(words: list[str], error: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "links.json"
    monkeypatch.setenv("RDMALAB_LINK_FILE", str(f))
    assert cli_main(["link", "add", "x0", *words]) == 1
    err = capsys.readouterr().err
    assert error in err and "Traceback" not in err, err
    assert not f.exists()


def test_links_env_and_file_take_a_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RDMALAB_LINKS", "soft0=veth1,siw0=siw:veth4,soft2=rxe:eth1")
    assert links.configured() == {"soft0": links.Link("veth1", "rxe"), "siw0": links.Link("veth4", "siw"),
                                  "soft2": links.Link("eth1", "rxe")}
    assert links.read_links() == {"soft0": "veth1", "siw0": "veth4", "soft2": "eth1"}
    monkeypatch.setenv("RDMALAB_LINKS", "siw0=iwarp:veth4")
    with pytest.raises(links.LinkError, match=r"item 1 \('siw0=iwarp:veth4'\): type 'iwarp' is unknown: the types "
                                              r"are rxe \(.*\); siw \("):
        links.configured()
    monkeypatch.setenv("RDMALAB_LINKS", "siw0=:veth4")
    with pytest.raises(links.LinkError, match=r"is not NAME=NETDEV or NAME=TYPE:NETDEV"):
        links.configured()
    monkeypatch.delenv("RDMALAB_LINKS")
    f = tmp_path / "links.json"
    monkeypatch.setenv("RDMALAB_LINK_FILE", str(f))
    f.write_text(json.dumps({"siw0": {"netdev": "veth4", "type": "roce"}}))
    with pytest.raises(links.LinkError, match=rf"{f}: device siw0: type 'roce' is unknown: the types are rxe"):
        links.configured()


def test_a_siw_link_is_found_by_a_pyverbs_program_as_an_iwarp_device() -> None:
    code = ("from rdmalab.verbs.device import get_device_list, Context\n"
            "devs = get_device_list()\n"
            "ctx = Context(name='siw0')\n"
            "print([d.name for d in devs], [d.transport_type for d in devs], ctx.device.ifname,\n"
            "      ctx.query_gid(1, 1).gid, type(ctx.device).__name__, type(ctx.device.carrier).__name__)\n")
    r = _fresh(code, RDMALAB_LINKS="siw0=siw:lo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[b'siw0']", "[1]", "lo", "0000:0000:0000:0000:0000:ffff:7f00:0001", "IwDevice",
                                "InterfaceTcp"]


def test_a_siw_link_that_cannot_be_made_names_the_device_and_interface() -> None:
    r = _fresh("from rdmalab.verbs.device import get_device_list\n"
               "try:\n    get_device_list()\nexcept Exception as e:\n    print(type(e).__name__, e)\n",
               RDMALAB_LINKS="siw7=siw:nosuchif0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PyverbsRDMAError")
    assert "a soft iWARP device on nosuchif0 (siw7, type siw): no network interface named 'nosuchif0'" in r.stdout


def test_the_tools_per_run_devices_are_made_as_links_make_them() -> None:
    # what --netdev IF --transport iwarp makes (cli/rping, tools/perftest): make_device's siw device, the default devices
    from rdmalab.verbs.device import set_default_devices

    fab = links.use_interface("lo", "rdmalab9", "siw", poll_wait=0.0)
    try:
        assert isinstance(fab, links.InterfaceTcp) and fab.device.ifname == "lo"
        assert [d.name for d in get_device_list()] == [b"rdmalab9"]
        assert Context(name="rdmalab9").device is fab.device
    finally:
        set_default_devices(None)
        fab.close()
    with pytest.raises(links.LinkError, match=r"MPA CRC is an option of iWARP \(type siw\)"):
        links.use_interface("lo", "rdmalab9", "rxe", mpa_crc=True)
    with pytest.raises(links.LinkError, match=r"device type 'ib' is unknown"):
        links.use_interface("lo", "rdmalab9", "ib")
