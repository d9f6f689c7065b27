"""Every test server keeps its data (the long-term memory's SQLite file) in a private temporary directory, never in
the user's own data directory, so no test reads what another run remembered."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("BARGEIN_DATA_DIR", tempfile.mkdtemp(prefix="bargein-test-data-"))
