"""First audio with long-term memory on (1,000 memories in the scope) vs off, sessions interleaved on one server.

The server (``--engines`` default, in a subprocess) gets a data directory whose SQLite memory holds 1,000 facts in
the local scope, so every reply with memory on carries recalled notes (the full token budget); sessions with memory
off ask for it with ``session.update`` ``memory: false``. Both conditions speak the same clips in the same order
through ``bench/harness/spoken_session.py``, one session of each per round, in the order on, off; off, on; ...
(A/B/B/A), so load drifts hit both alike.

The figure is issue 46's: first audio p50 with memory on against off. Beside it, like with like: turn ``i`` of a
round's memory-on session is paired with turn ``i`` of the same round's memory-off session (the same clip, spoken
minutes apart at most), and the median of those paired differences is printed. Each turn's endpoint (speech end
to the commit, from the server's ``bargein.turn.metrics``) is printed too: the default endpoint waits 0.5 s of
silence or 1.5 s (when the guess's words lead on or come back late), a choice memory does not enter, and it splits
the turns of both conditions into two groups a second apart; what follows the commit is where memory can act.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bargein.memory.sqlite_store import SqliteMemoryStore
from bargein.memory.store import LOCAL_SCOPE
from bench.harness.realtime_harness import ServerProcess
from bench.harness.session_observer import TurnResult
from bench.harness.spoken_session import run_session

MEMORIES = 1000
_SUBJECTS = ("the garden", "a trip to the coast", "the old house", "music lessons", "the office", "a neighbour",
             "breakfast", "the library", "a long walk", "the river", "an old friend", "the market")
LONG_ENDPOINT_MS = 1000.0
"""An endpoint at least this long waited the long silence (or the guess's words)."""


@dataclass(frozen=True)
class Turn:
    """One measured turn: its clip, first audio at the client, and the server's endpoint and after-commit time."""

    clip: str
    first_audio_ms: float | None
    endpoint_ms: float | None = None
    after_commit_ms: float | None = None
    """The server's ledger: the commit to the first delta sent (its first audio less its endpoint)."""


@dataclass(frozen=True)
class Session:
    """One measured session: its round, its condition and its turns in order."""

    round: int
    memory: bool
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Figures:
    """The comparison: p50s and their change (the target), and the paired per-turn differences."""

    p50_on: float
    p50_off: float
    count_on: int
    count_off: int
    paired_ms: tuple[float, ...]
    """First audio, on minus off, per pair of turns (same round, same position, same clip)."""
    paired_after_commit_ms: tuple[float, ...]
    """The same pairs' commit to first delta (the server's), on minus off."""
    after_commit_on: float
    after_commit_off: float
    long_on: int
    long_off: int

    @property
    def change(self) -> float:
        """The p50 change, in percent of memory off's (the target: within +5 %)."""
        return 100.0 * (self.p50_on - self.p50_off) / self.p50_off if self.p50_off else float("nan")

    @property
    def ratio(self) -> float:
        """The p50 ratio, on over off."""
        return self.p50_on / self.p50_off if self.p50_off else float("nan")

    @property
    def paired_median_ms(self) -> float:
        """The median of the paired first audio differences (on minus off)."""
        return _median(list(self.paired_ms))


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def figures(sessions: list[Session]) -> Figures:
    """The p50s of first audio per condition, and turn ``i`` of each round's two sessions paired (when the clips
    match and both turns were heard)."""
    def first(memory: bool) -> list[float]:
        return [t.first_audio_ms for s in sessions if s.memory is memory for t in s.turns
                if t.first_audio_ms is not None]

    def after(memory: bool) -> list[float]:
        return [t.after_commit_ms for s in sessions if s.memory is memory for t in s.turns
                if t.after_commit_ms is not None]

    def long(memory: bool) -> int:
        return sum(1 for s in sessions if s.memory is memory for t in s.turns
                   if t.endpoint_ms is not None and t.endpoint_ms >= LONG_ENDPOINT_MS)

    on_values, off_values = first(True), first(False)
    return Figures(_median(on_values), _median(off_values), len(on_values), len(off_values),
                   _paired(sessions, "first_audio_ms"), _paired(sessions, "after_commit_ms"),
                   _median(after(True)), _median(after(False)), long(True), long(False))


def _paired(sessions: list[Session], figure: str) -> tuple[float, ...]:
    """On minus off of ``figure``, turn ``i`` of a round's memory-on session against turn ``i`` of its memory-off
    one (where the clips match and both have the figure)."""
    differences: list[float] = []
    for round_index in sorted({s.round for s in sessions}):
        on = [s for s in sessions if s.round == round_index and s.memory]
        off = [s for s in sessions if s.round == round_index and not s.memory]
        for a, b in zip(on, off, strict=False):
            for x, y in zip(a.turns, b.turns, strict=False):
                mine, theirs = getattr(x, figure), getattr(y, figure)
                if x.clip == y.clip and mine is not None and theirs is not None:
                    differences.append(mine - theirs)
    return tuple(differences)


async def fill(path: Path, count: int = MEMORIES) -> None:
    """``count`` memories in the local scope, worded to match everyday speech (so recall always finds some)."""
    store = SqliteMemoryStore(str(path))
    for index in range(count):
        subject = _SUBJECTS[index % len(_SUBJECTS)]
        await store.remember(LOCAL_SCOPE, f"note {index}", f"The user once mentioned {subject} (note {index}).")
    await store.close()


def _args(turns: int, session: dict[str, object] | None) -> argparse.Namespace:
    return argparse.Namespace(turns=turns, barge_every=0, silence_ms=None, semantic=False, reply_timeout_s=60.0,
                              max_reply_s=12.0, clips="librivox", session=session)


def _stages(metrics: list[dict[str, Any]]) -> str:
    """Each turn's endpoint, the guess's words back (after the speech end), the LLM's first token and the commit to
    the first delta sent, from ``bargein.turn.metrics`` (ms)."""
    def cell(m: dict[str, Any], key: str) -> str:
        return "-" if m.get(key) is None else f"{m[key]:.0f}"

    return "; ".join(f"endpoint {cell(m, 'endpoint_ms')} guess {cell(m, 'guess_ms')} "
                     f"llm {cell(m, 'llm_first_token_ms')} delta {cell(m, 'first_delta_sent_ms')}"
                     for m in metrics if m.get("response_id"))


def turns_of(found: list[TurnResult], metrics: list[dict[str, Any]]) -> tuple[Turn, ...]:
    """The session's turns, each with its reply's ledger figures (matched by response id)."""
    ledger = {m["response_id"]: m for m in metrics if m.get("response_id")}
    turns = []
    for result in found:
        m = ledger.get(result.response_id or "", {})
        endpoint, first = m.get("endpoint_ms"), m.get("first_audio_ms")
        turns.append(Turn(result.clip, result.first_audio_ms, endpoint,
                          first - endpoint if endpoint is not None and first is not None else None))
    return tuple(turns)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def report(result: Figures) -> None:
    """Print the figures: the target's p50s first, then the paired differences and the endpoints."""
    print(f"first audio p50: memory on {result.p50_on:.0f} ms ({result.count_on} turns), off {result.p50_off:.0f} "
          f"ms ({result.count_off} turns): {result.change:+.1f} % (p50 ratio {result.ratio:.3f})")
    share = 100.0 * result.paired_median_ms / result.p50_off if result.p50_off else float("nan")
    print(f"paired (same round, same clip; {len(result.paired_ms)} pairs): median of on minus off "
          f"{result.paired_median_ms:+.0f} ms ({share:+.1f} % of off's p50); commit to first delta (server) "
          f"{_median(list(result.paired_after_commit_ms)):+.0f} ms")
    print(f"long endpoints (>= {LONG_ENDPOINT_MS:.0f} ms): {result.long_on} turns on, {result.long_off} off; "
          f"commit to first delta p50 (server): on {result.after_commit_on:.0f} ms, "
          f"off {result.after_commit_off:.0f} ms")


async def compare(turns: int, engines: str = "default", rounds: int = 2) -> Figures:
    """``rounds`` rounds of one session of each condition (on, off; off, on; ...), ``turns`` turns in all per
    condition; print each session's turns and the figures.

    An unmeasured one-turn session first leaves the instructions and tools every session shares in the model's
    cache (else the first measured session alone pays for them)."""
    sessions: list[Session] = []
    with tempfile.TemporaryDirectory() as directory:
        await fill(Path(directory) / "memory.sqlite3")
        with ServerProcess(engines, extra_args=["--memory", "--data-dir", directory]) as server:
            print(f"server on {server.host_port}, {MEMORIES} memories in the local scope; load average {_load()}",
                  flush=True)
            await run_session(server.host_port, _args(1, {"memory": False}))  # the warm-up, not measured
            for round_index in range(rounds):
                order = (True, False) if round_index % 2 == 0 else (False, True)
                for memory in order:
                    session = None if memory else {"memory": False}
                    found, observer, _silence = await run_session(server.host_port, _args(turns // rounds, session))
                    sessions.append(Session(round_index, memory, turns_of(found, observer.turn_metrics)))
                    print(f"round {round_index} memory {'on' if memory else 'off'}: first audio "
                          f"{[round(r.first_audio_ms or 0) for r in found]} ms; {_stages(observer.turn_metrics)}",
                          flush=True)
    result = figures(sessions)
    report(result)
    print(f"load average {_load()}")
    return result


if __name__ == "__main__":
    asyncio.run(compare(20))
