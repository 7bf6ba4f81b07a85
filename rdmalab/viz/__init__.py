"""Visualisations: coloured hex dumps, CRC walkthroughs, ladder diagrams, PSN/time plots, widgets.

Everything here renders statically (``_repr_html_`` / ``_repr_svg_``), so the same output shows
in JupyterLab, in nbconvert output and in the Jupyter Book.  The widgets in
:mod:`rdmalab.viz.widgets` are thin layers over these render functions (import it explicitly;
it needs ipywidgets).
"""

from rdmalab.viz.compare import WireComparison, compare_wires, frame_spans, wire_hexdump
from rdmalab.viz.crcsteps import Crc32cSteps, IcrcSteps, crc32c_steps, icrc_steps
from rdmalab.viz.hexdump import FieldTable, HexDump, Mark, field_table, hexdump, layer_colour
from rdmalab.viz.ladder import Arrow, Ladder, Marker, from_capture, from_trace, ladder
from rdmalab.viz.plots import Plot, opcode_counts, psn_time, tcp_seq_time, throughput
from rdmalab.viz.states import (
    StateDiagram,
    cm_state_diagram,
    cmid_state_diagram,
    mpa_state_diagram,
    qp_state_diagram,
    state_diagram,
)

__all__ = [
    "Arrow", "Crc32cSteps", "WireComparison", "compare_wires", "frame_spans", "wire_hexdump", "FieldTable", "HexDump", "IcrcSteps", "Ladder", "Mark", "Marker", "Plot",
    "StateDiagram", "crc32c_steps", "field_table", "from_capture", "from_trace", "hexdump", "icrc_steps",
    "ladder", "layer_colour", "opcode_counts", "psn_time", "qp_state_diagram", "state_diagram", "tcp_seq_time",
    "throughput",
    "cm_state_diagram", "cmid_state_diagram", "mpa_state_diagram",
]
