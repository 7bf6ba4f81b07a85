"""Classroom exercises and their checks, plus the helpers the lab notebooks share.

>>> from rdmalab import lab
>>> lab.check("wires.bth", my_bth_bytes)        # doctest: +SKIP
>>> lab.hint("wires.bth")                         # doctest: +SKIP

See :mod:`rdmalab.lab.core` for how checks report, :mod:`rdmalab.lab.generate` for the
student/instructor notebooks, and :mod:`rdmalab.lab.launch` for ``rdmalab lab``.
"""

from rdmalab.lab.core import ERROR, FAIL, NOT_YET, PASS, Result, check, exercises, hint, scenario, student
from rdmalab.lab.env import backend, capture_path, environment

__all__ = [
    "ERROR", "FAIL", "NOT_YET", "PASS", "Result", "backend", "capture_path", "check", "environment", "exercises",
    "hint", "scenario", "student",
]
