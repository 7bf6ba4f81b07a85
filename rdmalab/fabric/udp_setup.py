"""The UDP carrier's set-up: interfaces, permission, and the sockets' classic BPF filters.

What :class:`rdmalab.fabric.udp.UdpFabric` needs before its event loop can run: the address,
MAC and MTU of a network interface (``ioctl``), rxe's port MTU for it, the kernel's ARP entry
for a peer, whether this process may open a raw socket, and the socket filters (why a raw
socket, and what the filters keep: :mod:`rdmalab.fabric.udp`).
"""

from __future__ import annotations

import errno
import socket
import struct

from rdmalab.wire.errors import Picklable

RXE_MAX_HDR_LENGTH = 80  # rxe_param.h: Ethernet + IP + UDP + BTH and extension headers, ICRC

_SIOCGIFADDR = 0x8915
_SIOCGIFHWADDR = 0x8927
_SIOCGIFMTU = 0x8921
_SO_ATTACH_FILTER = 26


class CarrierError(Picklable, Exception):
    """The carrier cannot start: no such interface or address, no permission, port taken."""

    def __init__(self, errno_: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno_


NO_RAW_SOCKET = ("rdmalab's UDP carrier needs a raw socket (to choose the IP Identification the ICRC covers, and to "
                 "see it on receive): run as root, or give the interpreter CAP_NET_RAW "
                 "(sudo setcap cap_net_raw+ep \"$(readlink -f \"$(which python3)\")\")")


def check_permission() -> None:
    """Raise :class:`CarrierError` now if this process may not open the raw socket the carrier needs."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP).close()
    except PermissionError:
        raise CarrierError(errno.EPERM, NO_RAW_SOCKET) from None


# ---------------------------------------------------------------------- interfaces
def _ifreq(ifname: str, request: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            import fcntl  # (here, as ctypes below: not needed to listen)

            return fcntl.ioctl(s.fileno(), request, struct.pack("256s", ifname.encode()[:15]))
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                raise CarrierError(exc.errno, f"no network interface named {ifname!r} "
                                   f"(have: {', '.join(n for _, n in socket.if_nameindex())})") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise CarrierError(exc.errno, f"interface {ifname!r} has no IPv4 address") from None
            raise


def interface_ipv4(ifname: str) -> str:
    """The (first) IPv4 address of ``ifname``."""
    return socket.inet_ntoa(_ifreq(ifname, _SIOCGIFADDR)[20:24])


def interface_mac(ifname: str) -> int:
    return int.from_bytes(_ifreq(ifname, _SIOCGIFHWADDR)[18:24], "big")


def interface_mtu(ifname: str) -> int:
    return int(struct.unpack_from("i", _ifreq(ifname, _SIOCGIFMTU), 16)[0])


def interface_of(ip: str) -> str:
    """The interface that holds the IPv4 address ``ip`` (in this network namespace)."""
    for _, name in socket.if_nameindex():
        try:
            if interface_ipv4(name) == ip:
                return name
        except OSError:
            continue
    raise CarrierError(errno.EADDRNOTAVAIL, f"no interface in this network namespace has the address {ip}")


def ib_mtu_for(netdev_mtu: int) -> int:
    """rxe's port MTU for a netdev MTU: ``mtu - 80`` rounded down to an IB MTU, at least 256."""
    from rdmalab.wire.ib import IB_MTUS  # (here: the live tools check permission before they load the codecs)

    room = netdev_mtu - RXE_MAX_HDR_LENGTH
    return max((m for m in IB_MTUS if m <= room), default=256)


def neighbour_mac(ip: str) -> int | None:
    """The MAC the kernel's ARP table has for ``ip``, if any (``/proc/net/arp``)."""
    try:
        with open("/proc/net/arp") as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if len(cols) >= 4 and cols[0] == ip and cols[3] != "00:00:00:00:00:00":
                    return int(cols[3].replace(":", ""), 16)
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------- socket filters (classic BPF)
def _attach_filter(sock: socket.socket, prog: list[tuple[int, int, int, int]]) -> None:
    # setsockopt(SO_ATTACH_FILTER) takes a struct sock_fprog pointing at the instructions
    # (include/uapi/linux/filter.h); Python's socket module has no helper for it.  The kernel
    # copies the program during the call (sk_attach_filter), so the ctypes memory may go after.
    import ctypes  # (here: the live tools check the permission and listen before they open the carrier)

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]

    arr = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(SockFilter)))
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, bytes(ctypes.string_at(ctypes.addressof(fprog),
                                                                                 ctypes.sizeof(fprog))))


def _rocev2_filter(ipv4: int, groups: tuple[int, ...] = ()) -> list[tuple[int, int, int, int]]:
    # On a raw IPv4 socket the filter sees the packet from the IP header.  Accept UDP (already
    # guaranteed by IPPROTO_UDP) to our address, or to a multicast group joined, and port 4791,
    # whatever the IP header length.
    from rdmalab.wire.net import ROCEV2_PORT  # (here: as IB_MTUS above, the live tools start before the codecs load)

    ld_w, ld_b_msh, ldx_h, jeq, ret = 0x20, 0xB1, 0x48, 0x15, 0x06
    addrs = (ipv4, *groups)
    prog = [(ld_w, 0, 0, 16)]                              # A = ip.dst
    for i, a in enumerate(addrs):                          # if A is ours or a group's: check the port
        prog.append((jeq, len(addrs) - i, 0, a))
    prog += [
        (ret, 0, 0, 0),                 # reject
        (ld_b_msh, 0, 0, 0),            # X = IHL * 4
        (ldx_h, 0, 0, 2),               # A = udp.dport (half word at X + 2)
        (jeq, 1, 0, ROCEV2_PORT),       # if A == 4791: accept
        (ret, 0, 0, 0),                 # reject
        (ret, 0, 0, 0x40000),           # accept the whole packet
    ]
    return prog


_DROP_ALL = [(0x06, 0, 0, 0)]
