"""bargein: a real-time, wake-free, interruptible voice agent server."""

from __future__ import annotations

import os

# One BLAS thread unless the operator says otherwise, set before numpy loads: numpy's matrix products here are
# small (Smart Turn's mel filter bank, the listening model), and OpenBLAS's helper threads spin on the cores the
# event loop and the engines need, where the end-of-turn model's CPU accounting cannot see them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
