"""Summaries of the embedded LLM's per-job trace lines (``BARGEIN_LLM_TRACE=1``) in a server's log.

Each finished job of the one-at-a-time engine logs its session, kind (reply, tool call, prefill), how
it ended, how long it waited before the model thread first worked on it, its first token and first
clause times, and how much of its prompt was reused. :func:`summarise` turns the lines logged since a
byte offset into one line per kind and ending: count, median and max wait and first clause, mean new
prompt tokens: what a slow turn waited on.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

_JOB = re.compile(r" job session=(\S+) kind=(\S+) end=(\S+) held=(\d+) waited_ms=(\S+) first_token_ms=(\S+) "
                  r"first_clause_ms=(\S+) total_ms=(\S+) prompt=(\d+) reused=(\d+)")


def log_size(path: Path | None) -> int:
    """The log's length now (where the next step's lines start)."""
    return path.stat().st_size if path is not None and path.exists() else 0


def summarise(path: Path | None, since: int = 0) -> list[str]:
    """One line per (kind, ending) for the jobs logged after byte ``since``."""
    if path is None or not path.exists():
        return []
    with path.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode("utf-8", "replace")
    groups: dict[tuple[str, str], list[tuple[float | None, float | None, int]]] = {}
    for match in _JOB.finditer(text):
        kind, end = match[2], match[3]
        groups.setdefault((kind, end), []).append(
            (_number(match[5]), _number(match[7]), int(match[9]) - int(match[10])))
    lines = []
    for (kind, end), jobs in sorted(groups.items()):
        waits = [w for w, _, _ in jobs if w is not None]
        clauses = [c for _, c, _ in jobs if c is not None]
        line = f"{kind:8s} {end:10s} {len(jobs):3d} jobs, waited median {_ms(waits)} max {_ms(waits, max)}"
        if clauses:
            line += f", first clause median {_ms(clauses)} max {_ms(clauses, max)}"
        line += f", new prompt tokens mean {statistics.mean(n for _, _, n in jobs):.0f}"
        lines.append(line)
    return lines


def _number(text: str) -> float | None:
    return None if text == "-" else float(text)


def _ms(values: list[float], pick: object = statistics.median) -> str:
    if not values:
        return "-"
    assert callable(pick)
    return f"{pick(values):5.0f} ms"
