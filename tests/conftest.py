"""Every test's servers keep their data (the long-term memory's SQLite file) in a directory of the test's own, never
in the user's data directory, so no test reads what another test (or an earlier run) remembered."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BARGEIN_DATA_DIR`` for this test (servers started in subprocesses inherit it)."""
    monkeypatch.setenv("BARGEIN_DATA_DIR", str(tmp_path_factory.mktemp("bargein-data")))
