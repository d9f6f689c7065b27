"""``python -m bargein`` is ``bargein``."""

from __future__ import annotations

import sys

from bargein.cli import main

sys.exit(main())
