"""A server process's family and its figures, for tests that start the real CLI: which processes it runs
(from /proc) and one value of its ``/metrics``."""

from __future__ import annotations

from pathlib import Path

import httpx


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """``root``'s descendant processes: pid -> (parent pid, command line)."""
    every: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, ValueError, IndexError):
                continue
            every[int(entry.name)] = (parent, command)
    found: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, command) in every.items():
            if ppid == parent and pid not in found:
                found[pid] = (ppid, command)
                frontier.append(pid)
    return found


def metric(port: int, name: str) -> float | None:
    """The first sample of ``/metrics`` on ``port`` whose line starts with ``name`` (None: no such sample);
    an unreachable server raises ``httpx.HTTPError``."""
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line.startswith(name):
            return float(line.split()[-1])
    return None
