"""The exercises' checkers, one module per notebook.  Importing this package registers them all.

Checkers compute the expected answer with rdmalab itself, from the same capture, bytes or
engine run the notebook shows, so an exercise cannot drift from its notebook.
"""

from rdmalab.lab.checkers import (  # noqa: F401
    captures,
    cm,
    congestion,
    dma,
    infiniband,
    kv,
    live,
    reliability,
    security,
    verbs,
    welcome,
    wires,
)
