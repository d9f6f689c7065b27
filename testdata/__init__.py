"""Speech and sound sets that tests, benchmarks and training share: generators, voices, splits, recorded fixtures.

Nothing here imports ``bench``, ``training`` or ``tests``; all three import from here.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).parent
"""The folder of the fixed splits and recorded fixtures (``*.json``)."""
