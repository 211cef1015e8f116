"""judge: the referee for GPU-kernel optimization contests.

Use it as a library (``from judge import ledger, rounds``) or through the ``judge`` CLI.
"""

__version__ = "0.1.0"
