"""First audio with long-term memory on (1,000 memories in the scope) vs off, sessions alternating on one server.

The server (``--engines`` default, in a subprocess) gets a data directory whose SQLite memory holds 1,000 facts in
the local scope, so every reply with memory on carries recalled notes (the full token budget); sessions with memory
off ask for it with ``session.update`` ``memory: false``. Both conditions speak the same clips through
``bench/harness/spoken_session.py``, in alternating rounds, so load drifts hit both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
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
    """Each turn's ASR final, LLM first token and prompt tokens (of which cached), from ``bargein.turn.metrics``."""
    return "; ".join(f"asr {m.get('asr_final_ms')} llm {m.get('llm_first_token_ms')} ms, prompt "
                     f"{m.get('prompt_tokens')} ({m.get('cached_tokens')} cached)"
                     for m in metrics if m.get("response_id"))


def _p50(results: list[TurnResult]) -> tuple[float, int]:
    values = [r.first_audio_ms for r in results if r.first_audio_ms is not None]
    return (statistics.median(values) if values else float("nan")), len(values)


async def compare(turns: int, engines: str = "default", rounds: int = 2) -> None:
    """Alternate ``rounds`` sessions of each condition, ``turns`` turns in all per condition; print p50s.

    An unmeasured one-turn session first leaves the instructions and tools every session shares in the model's
    cache (else the first measured session alone pays for them), and the order alternates by round (on, off;
    off, on; ...) so neither condition always follows the other."""
    with tempfile.TemporaryDirectory() as directory:
        await fill(Path(directory) / "memory.sqlite3")
        on: list[TurnResult] = []
        off: list[TurnResult] = []
        with ServerProcess(engines, extra_args=["--memory", "--data-dir", directory]) as server:
            print(f"server on {server.host_port}, {MEMORIES} memories in the local scope; "
                  f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
            await run_session(server.host_port, _args(1, {"memory": False}))  # the warm-up, not measured
            for round_index in range(rounds):
                order = ((on, None), (off, {"memory": False}))
                for results, session in order if round_index % 2 == 0 else order[::-1]:
                    found, observer, _silence = await run_session(server.host_port, _args(turns // rounds, session))
                    results.extend(found)
                    print(f"memory {'on' if session is None else 'off'}: first audio "
                          f"{[round(r.first_audio_ms or 0) for r in found]} ms; {_stages(observer.turn_metrics)}",
                          flush=True)
        (p50_on, n_on), (p50_off, n_off) = _p50(on), _p50(off)
        change = 100.0 * (p50_on - p50_off) / p50_off if p50_off else float("nan")
        print(f"first audio p50: memory on {p50_on:.0f} ms ({n_on} turns), off {p50_off:.0f} ms ({n_off} turns): "
              f"{change:+.1f} %; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")



if __name__ == "__main__":
    asyncio.run(compare(20))
