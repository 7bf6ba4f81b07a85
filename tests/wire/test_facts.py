"""The protocol facts ``rdmalab.wire`` keeps once: PSN and TCP sequence arithmetic (with their wraps), the
IB MTU codes, the 4.096 us x 2^n timeout, the request/response opcode sets, TCP flag names, and MPA's
ULPDU_Length and FPDU size."""

from __future__ import annotations

import pytest

import rdmalab.wire as wire
from rdmalab.wire.cm import cm_timeout_seconds
from rdmalab.wire.errors import TruncatedError
from rdmalab.wire.ib import (
    ACK_OPCODE,
    CNP_OPCODE,
    IB_MTUS,
    OPCODES,
    PSN_HALF,
    PSN_MASK,
    PSN_MOD,
    REQUEST_OPCODES,
    RESPONSE_OPCODES,
    Op,
    Transport,
    check_mtu,
    mtu_bytes,
    mtu_code,
    psn_add,
    psn_diff,
    psn_unwrap,
    timeout_ns,
)
from rdmalab.wire.mpa import (
    MARKER_INTERVAL,
    fpdu_length,
    fpdu_wire_length,
    frame_fpdu,
    pad_length,
    ulpdu_length_at,
)
from rdmalab.wire.net import (
    SEQ_MASK,
    TCP,
    is_retransmission,
    seq_add,
    seq_diff,
    seq_max,
    tcp_flag_names,
)

# ------------------------------------------------------------------------------------------ PSN


def test_psn_space_is_24_bits() -> None:
    assert (PSN_MOD, PSN_MASK, PSN_HALF) == (1 << 24, 0xFFFFFF, 1 << 23)


@pytest.mark.parametrize(("psn", "n", "want"), [
    (0, 1, 1), (0xFFFFFF, 1, 0), (0xFFFFFE, 5, 3), (0, -1, 0xFFFFFF), (5, -10, 0xFFFFFB), (7, PSN_MOD, 7),
])
def test_psn_add_wraps_at_2_to_the_24(psn: int, n: int, want: int) -> None:
    assert psn_add(psn, n) == want


@pytest.mark.parametrize(("a", "b", "want"), [
    (5, 3, 2), (3, 5, -2), (0, 0xFFFFFF, 1), (0xFFFFFF, 0, -1), (2, 0xFFFFFE, 4), (0xFFFFFE, 2, -4),
    (PSN_HALF - 1, 0, PSN_HALF - 1),  # the furthest "after"
    (PSN_HALF, 0, -PSN_HALF),  # exactly half the space away: "before" (rxe's psn_compare)
    (0, PSN_HALF, -PSN_HALF), (1, 1, 0),
])
def test_psn_diff_is_signed_within_half_the_space(a: int, b: int, want: int) -> None:
    assert psn_diff(a, b) == want
    assert -PSN_HALF <= psn_diff(a, b) < PSN_HALF


def test_psn_diff_undoes_psn_add_on_both_sides_of_the_wrap() -> None:
    for base in (0, 1, PSN_HALF, PSN_MASK - 3, PSN_MASK):
        for n in (-PSN_HALF, -100, -1, 0, 1, 100, PSN_HALF - 1):
            assert psn_diff(psn_add(base, n), base) == n


def test_psn_unwrap_puts_a_psn_on_a_line_that_does_not_wrap() -> None:
    assert psn_unwrap(2, 0xFFFFFF) == PSN_MOD + 2  # after the wrap: beyond 2^24
    assert psn_unwrap(0xFFFFFE, PSN_MOD + 2) == PSN_MOD - 2  # going back over it
    assert psn_unwrap(10, 5) == 10 and psn_unwrap(5, 10) == 5
    assert psn_unwrap(3, 3 * PSN_MOD + 1) == 3 * PSN_MOD + 3


# ------------------------------------------------------------------------------------------ MTU


@pytest.mark.parametrize(("code", "nbytes"), [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)])
def test_every_mtu_code_and_its_bytes(code: int, nbytes: int) -> None:
    assert mtu_bytes(code) == nbytes
    assert mtu_code(nbytes) == code
    assert check_mtu(nbytes) == nbytes
    assert nbytes in IB_MTUS


@pytest.mark.parametrize("code", [0, 6, -1, 7, 256])
def test_a_bad_mtu_code_is_refused_naming_it(code: int) -> None:
    with pytest.raises(ValueError, match=rf"MTU code {code} is not an IB MTU code: 1\.\.5"):
        mtu_bytes(code)


@pytest.mark.parametrize("nbytes", [0, 1000, 1500, 8192, 255, 4097])
def test_bytes_that_are_no_ib_mtu_are_refused_naming_them(nbytes: int) -> None:
    with pytest.raises(ValueError, match=rf"^{nbytes} bytes is not an IB MTU \(256, 512, 1024, 2048 or 4096\)$"):
        mtu_code(nbytes)
    with pytest.raises(ValueError, match=rf"^payload must be an IB MTU \(256, 512, 1024, 2048 or 4096 bytes\), "
                                         rf"not {nbytes}$"):
        check_mtu(nbytes, "payload")


# ------------------------------------------------------------------------------------------ timeouts


@pytest.mark.parametrize(("code", "ns"), [(0, 4096), (1, 8192), (14, 67_108_864), (31, 4096 << 31)])
def test_timeout_is_4_096_us_times_2_to_the_code(code: int, ns: int) -> None:
    assert timeout_ns(code) == ns
    assert cm_timeout_seconds(code) == pytest.approx(4.096e-6 * 2 ** code, rel=1e-15)


@pytest.mark.parametrize("code", [-1, 32, 40])
def test_a_timeout_code_outside_5_bits_is_refused_naming_it(code: int) -> None:
    with pytest.raises(ValueError, match=rf"timeout code {code} is not a 5-bit code"):
        timeout_ns(code)


# ------------------------------------------------------------------------------------------ opcodes


def test_request_and_response_opcodes_come_from_the_table() -> None:
    assert ACK_OPCODE == 0x11 and OPCODES[ACK_OPCODE].op is Op.ACKNOWLEDGE
    assert REQUEST_OPCODES.isdisjoint(RESPONSE_OPCODES)
    assert CNP_OPCODE not in REQUEST_OPCODES | RESPONSE_OPCODES
    assert REQUEST_OPCODES | RESPONSE_OPCODES | {CNP_OPCODE} == set(OPCODES)
    assert {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12} <= RESPONSE_OPCODES  # READ responses, ACK, ATOMIC ACK
    assert {0x00, 0x06, 0x0A, 0x0C, 0x13, 0x14, 0x16, 0x17, 0x24, 0x64} <= REQUEST_OPCODES  # UC and UD too
    assert all(OPCODES[c].transport is not Transport.CNP for c in REQUEST_OPCODES)


# ------------------------------------------------------------------------------------------ TCP


def test_tcp_flag_names_lowest_bit_first() -> None:
    assert tcp_flag_names(TCP.SYN | TCP.ACK) == ["SYN", "ACK"]
    assert tcp_flag_names(TCP.FIN | TCP.PSH | TCP.ACK) == ["FIN", "PSH", "ACK"]
    # (the ninth bit is AE in tshark 4.0.17's line, "[SYN, AE]"; the reserved bits before it "Reserved")
    assert tcp_flag_names(0x1FF) == ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "AE"]
    assert tcp_flag_names(0xE02) == ["SYN", "Reserved"]
    assert tcp_flag_names(0) == []


@pytest.mark.parametrize(("a", "b", "want"), [
    (5, 3, 2), (0, SEQ_MASK, 1), (SEQ_MASK, 0, -1), (10, SEQ_MASK - 9, 20), (1 << 31, 0, -(1 << 31)),
])
def test_seq_diff_wraps_at_2_to_the_32(a: int, b: int, want: int) -> None:
    assert seq_diff(a, b) == want


def test_seq_add_and_seq_max_across_the_wrap() -> None:
    assert seq_add(SEQ_MASK, 1) == 0 and seq_add(SEQ_MASK - 9, 30) == 20 and seq_add(3, -5) == SEQ_MASK - 1
    assert seq_max(5, SEQ_MASK - 10) == 5  # 5 is past the wrap: later
    assert seq_max(SEQ_MASK - 10, 5) == 5
    assert seq_max(7, None) == 7 and seq_max(3, 9) == 9


def test_a_retransmission_ends_at_or_before_the_furthest_byte_seen() -> None:
    assert not is_retransmission(100, 50, None)  # nothing seen yet
    assert not is_retransmission(100, 0, 1000)  # no payload: never
    assert is_retransmission(100, 50, 150) and is_retransmission(100, 50, 200)
    assert not is_retransmission(100, 51, 150)


def test_retransmission_across_the_2_to_the_32_wrap() -> None:
    before_wrap = SEQ_MASK - 99  # 100 octets before the wrap
    sent = seq_add(before_wrap, 100)  # == 0: the segment ended exactly at the wrap
    assert sent == 0
    assert not is_retransmission(0, 100, sent)  # the next new bytes, after the wrap
    sent = seq_add(0, 100)
    assert is_retransmission(before_wrap, 100, sent)  # the old segment sent again: before the wrap
    assert is_retransmission(50, 50, sent)
    assert not is_retransmission(50, 51, sent)
    # what a comparison without the wrap said: 100 >= SEQ_MASK - 99 + 100 is false, so a resend of the
    # pre-wrap segment was new data, and the post-wrap one (0 + 100 <= 2^32) a retransmission
    assert not (sent >= before_wrap + 100)


# ------------------------------------------------------------------------------------------ MPA


def test_fpdu_length_is_length_field_ulpdu_pad_and_crc_for_every_ulpdu_length() -> None:
    for n in range(0x10000):
        assert fpdu_length(n) == 2 + n + pad_length(n) + 4, n
        assert fpdu_length(n) % 4 == 0 and 0 <= pad_length(n) <= 3


def test_ulpdu_length_at_reads_the_first_two_octets() -> None:
    fpdu = frame_fpdu(b"x" * 37)
    assert ulpdu_length_at(fpdu) == 37
    assert ulpdu_length_at(b"\0\0\0" + fpdu, 3) == 37
    assert fpdu_wire_length(fpdu) == fpdu_length(37) == len(fpdu)


def test_ulpdu_length_at_skips_a_marker_due_before_it() -> None:
    fpdu = frame_fpdu(b"y" * 300, markers=0)  # a marker at stream position 0: before the length field
    assert fpdu[4:6] == (300).to_bytes(2, "big")
    assert ulpdu_length_at(fpdu, 0, 0) == 300
    assert ulpdu_length_at(fpdu, 0, MARKER_INTERVAL) == 300  # the same position, a lap of markers later
    assert fpdu_wire_length(fpdu, 0, 0) == len(fpdu)


@pytest.mark.parametrize("buf", [b"", b"\x00"])
def test_ulpdu_length_at_a_truncated_buffer_is_a_truncated_error(buf: bytes) -> None:
    with pytest.raises(TruncatedError, match="ULPDU_Length"):
        ulpdu_length_at(buf)
    assert fpdu_wire_length(buf) is None


# ------------------------------------------------------------------------------------------ the package


def test_the_package_names_the_facts() -> None:
    assert wire.psn_diff is psn_diff and wire.seq_diff is seq_diff and wire.check_mtu is check_mtu
    assert wire.timeout_ns is timeout_ns and wire.tcp_flag_names is tcp_flag_names
