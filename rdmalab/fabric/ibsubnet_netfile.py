"""ibsim's topology file ("net file"), parsed: node records, their ports and links, with errors naming file:line.

The format is ibsim's (ibsim/sim_net.c; examples in ``/usr/share/doc/ibsim-utils/net-examples/``), which
reads ibnetdiscover's output too::

    Switch  8 "Switch1"            # "a description"   (type, number of ports, node id)
    [1]     "Hca1"[1]              (local port, remote node id, remote port; [1] when left out)
    [3]     "Switch2"[3]  w=2 s=1  (options: enabled link width w=, speed s=, extended speed e=)

    Hca     2 "Hca1"
    [1]     "Switch1"[1]

A record is a header line (``Switch``, ``Hca``/``Ca``, ``Rt``) and its port lines (a line starting with
``[``); the record ends at the first other line.  A line starting with ``#`` is a comment; ``#`` after a
header gives the node's description (quoted, or up to `` lid ``).  Settings between records, as ibsim takes
them: ``switchguid=``/``caguid=``/``hcaguids=``/``rtguid=`` (the next GUIDs; ``+N`` relative),
``vendid=``, ``devid=``, ``sysimgguid=`` (the next node's only), ``width=``, ``speed=``, ``extspeed=``.
Other lines are ignored, as ibsim ignores them.  Not supported (a clear error): ``include``, ``module``,
``do`` and port aliases (``@``).

Errors are :class:`NetFileError`, ``FILE:LINE: what``: a syntax error, a port number out of range, a port
listed twice, a link to an unknown node or to a port the other side does not list back (a dangling port).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rdmalab.wire.errors import RdmalabError

# Node types (ibsim's enum NODE_TYPES, which is NodeInfo.NodeType, IBA 14.2.5.3)
HCA = 1
SWITCH = 2
ROUTER = 3
TYPE_NAMES = {HCA: "Hca", SWITCH: "Switch", ROUTER: "Rt"}

# Link widths and speeds as PortInfo encodes them (IBA 14.2.5.6), ibsim's defaults (sim.h)
WIDTH_1X, WIDTH_4X, WIDTH_8X, WIDTH_12X, WIDTH_2X = 1, 2, 4, 8, 16
SPEED_SDR, SPEED_DDR, SPEED_QDR = 1, 2, 4
EXT_FDR, EXT_EDR, EXT_HDR = 1, 2, 4
DEFAULT_WIDTH_ENABLED = WIDTH_4X
DEFAULT_SPEED_ENABLED = SPEED_SDR
FIRST_GUID = {HCA: 0x100000, SWITCH: 0x200000, ROUTER: ~0 & 0xFFFFFFFFFFFFFFFF}


class NetFileError(RdmalabError, ValueError):
    """A topology file that cannot be read: ``FILE:LINE: what was wrong``."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


@dataclass
class PortSpec:
    """A port line: the local port, the remote node id and port, options, and the line it came from."""

    num: int
    remote: str
    remote_port: int
    line: int
    width_enabled: int | None = None
    speed_enabled: int | None = None
    speed_ext_enabled: int | None = None


@dataclass
class NodeSpec:
    """A node record: type, number of ports, id, description, GUID, and its port lines by port number."""

    type: int
    num_ports: int
    nodeid: str
    description: str
    guid: int
    line: int
    vendor_id: int = 0
    device_id: int = 0
    system_image_guid: int = 0
    width_enabled: int = DEFAULT_WIDTH_ENABLED
    speed_enabled: int = DEFAULT_SPEED_ENABLED
    speed_ext_enabled: int = 0
    lid: int = 0
    lmc: int = 0
    enhanced_port0: int = 0  # 1 "enhanced port 0", -1 "base port 0", 0 not said
    ports: dict[int, PortSpec] = field(default_factory=dict)


_HEADER = re.compile(r"^(Switch|Hca|Ca|Rt)\b")
_SETTING = re.compile(r"^(switchguid|hcaguids|caguid|rtguid|vendid|devid|sysimgguid|width|speed|extspeed)\b")
_UNSUPPORTED = re.compile(r"^(include|module|do\b|pdebug)")
_PORT = re.compile(r'^\[(\d+)\]\s*(?:\([0-9a-fA-Fx]+\))?\s*"([^"]*)"\s*(?:\[(\d+)\])?(.*)$')


def _number(text: str, path: str, lineno: int, what: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise NetFileError(path, lineno, f"{what}: {text.strip()!r} is not a number") from None


def _description(rest: str) -> str:
    """The description after a header's ``#``: quoted, or up to `` lid ``/`` base port ``... (sim_net.c)."""
    if "#" not in rest:
        return ""
    s = rest.split("#", 1)[1].lstrip()
    if s.startswith('"'):
        return s[1:].split('"', 1)[0]
    for stop in (" enhanced port ", " base port ", " lid ", " lmc "):
        if stop in s:
            return s.split(stop, 1)[0]
    return s


def parse_netfile(text: str, path: str = "<net>") -> list[NodeSpec]:
    """The node records of a net file's ``text`` (``path`` names it in errors), checked: every link listed
    on both sides, every remote node known, no port twice.  Raises :class:`NetFileError`."""
    nodes: list[NodeSpec] = []
    by_id: dict[str, NodeSpec] = {}
    guids = dict(FIRST_GUID)
    abs_guids = dict(FIRST_GUID)
    vendid = devid = sysimg = 0
    width, speed, extspeed = DEFAULT_WIDTH_ENABLED, DEFAULT_SPEED_ENABLED, 0
    current: NodeSpec | None = None
    used_guids: set[int] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if current is not None:
            if line.startswith("#"):
                continue
            if line.startswith("["):
                if len(current.ports) >= current.num_ports:
                    raise NetFileError(path, lineno, f'node "{current.nodeid}" has {current.num_ports} ports; '
                                                     f"this is port line {len(current.ports) + 1}")
                _port_line(current, line, path, lineno)
                continue
            if line.startswith("@"):
                raise NetFileError(path, lineno, "port aliases (@) are not supported")
            current = None
            if _HEADER.match(line):
                raise NetFileError(path, lineno, "a node record must be separated from the previous one by a "
                                                 "blank line (ibsim would take this header as the end of the record)")
            continue
        if not line.strip() or line.startswith("#"):
            continue
        m = _HEADER.match(line)
        if m:
            kind = m.group(1)
            ntype = SWITCH if kind == "Switch" else ROUTER if kind == "Rt" else HCA
            q = re.search(r'"([^"]*)"', line)
            nports_text = line[len(kind):q.start() if q else len(line)].strip()
            if not q:
                raise NetFileError(path, lineno, f'{kind} record without a quoted node id ("name")')
            nodeid = q.group(1)
            if not nodeid:
                raise NetFileError(path, lineno, "empty node id")
            if "#" in nodeid or "@" in nodeid:
                raise NetFileError(path, lineno, f'node id "{nodeid}": "#" and "@" are reserved')
            nports = _number(nports_text, path, lineno, "number of ports") if nports_text else 0
            if not 1 <= nports <= 254:
                raise NetFileError(path, lineno, f"number of ports {nports_text or '(none)'}: expected 1..254")
            if nodeid in by_id:
                raise NetFileError(path, lineno, f'node id "{nodeid}" already used on line {by_id[nodeid].line}')
            if guids[ntype] in used_guids:
                raise NetFileError(path, lineno, f"node GUID 0x{guids[ntype]:x} already used")
            rest = line[q.end():]
            desc = _description(rest) or nodeid
            node = NodeSpec(ntype, nports, nodeid, desc, guids[ntype], lineno, vendid, devid, sysimg,
                            width, speed, extspeed)
            lid = re.search(r"\blid (\d+)", rest.split('"')[-1] if '"' in rest else rest)
            if ntype == SWITCH and lid:
                node.lid = int(lid.group(1))
            node.enhanced_port0 = 1 if "enhanced port 0" in rest else -1 if "base port 0" in rest else 0
            used_guids.add(guids[ntype])
            guids[ntype] += 1 if ntype == SWITCH else nports + 1
            vendid = sysimg = 0
            nodes.append(node)
            by_id[nodeid] = node
            current = node
            continue
        m = _SETTING.match(line)
        if m:
            key = m.group(1)
            sep = "=" if "=" in line else "+" if key.endswith(("guid", "guids")) and "+" in line else None
            if sep is None:
                raise NetFileError(path, lineno, f"{key}: missing '='")
            value = _number(line.split(sep, 1)[1].split("#")[0], path, lineno, key)
            if key in ("switchguid", "hcaguids", "caguid", "rtguid"):
                t = SWITCH if key == "switchguid" else ROUTER if key == "rtguid" else HCA
                if sep == "=":
                    abs_guids[t] = value
                    guids[t] = value
                else:
                    guids[t] = abs_guids[t] + value
            elif key == "vendid":
                vendid = value
            elif key == "devid":
                devid = value
            elif key == "sysimgguid":
                sysimg = value
            elif key == "width":
                if not 1 <= value <= 31:
                    raise NetFileError(path, lineno, f"width={value}: expected 1..31")
                width = value
            elif key == "speed":
                if not 1 <= value <= 7:
                    raise NetFileError(path, lineno, f"speed={value}: expected 1..7")
                speed = value
            else:
                if not 0 <= value <= 7:
                    raise NetFileError(path, lineno, f"extspeed={value}: expected 0..7")
                extspeed = value
            continue
        if _UNSUPPORTED.match(line):
            raise NetFileError(path, lineno, f"'{line.split()[0]}' lines are not supported here")
        if line.startswith("["):
            raise NetFileError(path, lineno, "a port line outside a node record")
        # any other line is ignored, as ibsim ignores it
    _check_links(nodes, by_id, path)
    return nodes


def _port_line(node: NodeSpec, line: str, path: str, lineno: int) -> None:
    m = _PORT.match(line)
    if not m:
        raise NetFileError(path, lineno, f'port line: expected [port] "remote node"[remote port], got {line.strip()!r}')
    num = int(m.group(1))
    if not 1 <= num <= node.num_ports:  # (ibsim refuses port 0 in a file too: it is the switch's own)
        raise NetFileError(path, lineno, f'port {num} of "{node.nodeid}": expected 1..{node.num_ports}')
    if num in node.ports:
        raise NetFileError(path, lineno, f'port {num} of "{node.nodeid}" is listed twice '
                                         f"(also on line {node.ports[num].line})")
    remote_port = int(m.group(3)) if m.group(3) is not None else 1
    if remote_port <= 0:
        raise NetFileError(path, lineno, f"remote port {remote_port}: expected 1 or more")
    spec = PortSpec(num, m.group(2), remote_port, lineno)
    for key, value in re.findall(r"\b([wse])=(\S+)", m.group(4).split("#")[0]):
        v = _number(value, path, lineno, f"option {key}=")
        if key == "w":
            if not 1 <= v <= 31:
                raise NetFileError(path, lineno, f"w={v}: expected 1..31")
            spec.width_enabled = v
        elif key == "s":
            if not 0 <= v <= 7:
                raise NetFileError(path, lineno, f"s={v}: expected 0..7")
            spec.speed_enabled = v or SPEED_QDR
        else:
            if not 0 <= v <= 7:
                raise NetFileError(path, lineno, f"e={v}: expected 0..7")
            spec.speed_ext_enabled = v
    node.ports[num] = spec


def _check_links(nodes: list[NodeSpec], by_id: dict[str, NodeSpec], path: str) -> None:
    for node in nodes:
        for spec in node.ports.values():
            remote = by_id.get(spec.remote)
            if remote is None:
                raise NetFileError(path, spec.line, f'port {spec.num} of "{node.nodeid}" is linked to unknown node '
                                                    f'"{spec.remote}"')
            if spec.remote_port > remote.num_ports:
                raise NetFileError(path, spec.line, f'port {spec.num} of "{node.nodeid}" is linked to port '
                                                    f'{spec.remote_port} of "{remote.nodeid}", which has '
                                                    f"{remote.num_ports} ports")
            back = remote.ports.get(spec.remote_port)
            if back is None or back.remote != node.nodeid or back.remote_port != spec.num:
                said = "lists no link" if back is None else f'is linked to "{back.remote}"[{back.remote_port}]'
                raise NetFileError(path, spec.line, f'dangling port: port {spec.num} of "{node.nodeid}" is linked to '
                                                    f'"{remote.nodeid}"[{spec.remote_port}], but that port {said} '
                                                    f"(line {back.line if back else remote.line})")


def read_netfile(path: str | Path) -> list[NodeSpec]:
    """:func:`parse_netfile` of a file; a file that cannot be read is a :class:`NetFileError` too."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NetFileError(name, None, f"cannot read: {exc.strerror or exc}") from None
    return parse_netfile(text, name)
