"""The benches' plots: matplotlib drawing to files, where it is installed (it is optional)."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None (and a line saying so) where matplotlib is not
    installed: a bench's figures never depend on it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); no plot drawn")
        return None
    return plt
