"""The plot of ``bench/capacity/sessions.py``'s ramp: lag p99 (and the measured barge-in stop p99), first audio p95,
CPU and RSS per session against the number of sessions N, one line per mode."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from bench.harness.plotting import pyplot


class StepFigures(Protocol):
    """What the plot reads of one ramp step (``bench.capacity.sessions.StepFigures``; read by name, as ``getattr``
    reads the plotted fields ``lag_p99``, ``first_audio_p95``, ``cpu_per_session`` and ``rss_per_session_mb``)."""

    mode: str
    sessions: int
    barge_p99: float
    barge_n: int
    lag_limit: float
    load_average: float


def plot(steps: Sequence[StepFigures], path: str, title: str) -> None:
    """lag p99, first audio p95, CPU and RSS per session against N."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = ((axes[0][0], "lag_p99", "inbound frame lag p99 and barge-in stop p99 (ms)"),
              (axes[0][1], "first_audio_p95", "first audio p95 (ms)"),
              (axes[1][0], "cpu_per_session", "server CPU per session (% of a core)"),
              (axes[1][1], "rss_per_session_mb", "server RSS per session (MB)"))
    for axis, field, label in panels:
        for mode in dict.fromkeys(s.mode for s in steps):
            points = [(s.sessions, getattr(s, field) * (100 if field == "cpu_per_session" else 1))
                      for s in steps if s.mode == mode and not math.isnan(getattr(s, field))]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=mode,
                          color="tab:blue" if mode == "listening" else "tab:orange")
        if field == "lag_p99":
            for mode in dict.fromkeys(s.mode for s in steps):
                barges = [(s.sessions, s.barge_p99) for s in steps if s.mode == mode and s.barge_n]
                if barges:
                    axis.plot(*zip(*barges, strict=True), marker="x", linestyle=":", label=f"{mode}: barge-in stop p99",
                              color="tab:blue" if mode == "listening" else "tab:orange")
            limit = steps[0].lag_limit
            axis.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"{limit:.0f} ms limit")
            axis.set_yscale("log")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent sessions N")
        axis.set_title(label, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(f"{title}; load average {min(s.load_average for s in steps):.1f} to "
                 f"{max(s.load_average for s in steps):.1f}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
