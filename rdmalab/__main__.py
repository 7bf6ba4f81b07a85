"""``python -m rdmalab`` runs the ``rdmalab`` command."""

import sys

from rdmalab.cli import command

sys.exit(command())
