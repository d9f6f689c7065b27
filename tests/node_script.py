"""Run a script of the page's JavaScript in Node, as the page tests do, and read the JSON it prints."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest


def run_node_json(script: str, *args: str) -> Any:
    """Run ``script`` as an ES module with ``args`` (``process.argv[1:]``) and parse its standard output as JSON;
    a missing Node fails the test (the test set-up installs it) rather than skipping it."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the test set-up installs it")
    out = subprocess.run([node, "--input-type=module", "-e", script, *args], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return json.loads(out)
