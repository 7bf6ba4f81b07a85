"""``rdmalab COMMAND ...`` registers and imports only COMMAND's module, and parses as the full parser does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rdmalab.cli import build_parser


@pytest.mark.parametrize("argv", [
    ["decode", "-T", "fields", "-e", "ip.src", "-e", "infiniband.bth.psn", "-r", "x.pcap", "-E", "quote=d"],
    ["decode", "--strict", "-V", "x.pcapng", "-c", "5"],
    ["stats", "-r", "x.pcap"],
    ["crosscheck", "x.pcap", "-v"],
])
def test_one_command_parses_as_all(argv: list[str]) -> None:
    assert vars(build_parser(argv[0]).parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_a_command_imports_no_other_command_module() -> None:
    code = ("import sys\nfrom rdmalab.cli import main\n"
            "rc = main(['decode', '-r', '/nonexistent/x.pcap'])\n"
            "print(rc, sorted(m for m in sys.modules if m.startswith('rdmalab.cli.')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split(None, 1) == ["1", "['rdmalab.cli.decode']\n"]
    assert "/nonexistent/x.pcap" in run.stderr
