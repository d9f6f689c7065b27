"""The ledger export: what this server process's sessions cost since it started, as one JSON object.

Served at ``GET /v1/ledger/export`` (the operator's: the API key or the metrics key), it is what ``bargein capacity
--ledger FILE`` sizes pools from instead of its constants: CPU seconds per stage (:data:`~.cost_meter.STAGE_CPU`,
the workers' background included) beside the work they served (:data:`~.turn_cost.PROCESS_COST`: audio the VAD
heard, the user's speech, tokens generated, agent audio sent). :func:`stage_costs` turns them into per-unit costs.
Each server worker process keeps its own figures: with ``--workers N`` each answer is one worker's.

``server_cpu_s`` is this process's own CPU (every thread) since its first session began, start-up and warm-up left
out: less the stages measured in it (VAD, end of turn, see), it is the session workers' own work (the protocol,
the turn machine, resampling), per 20 ms of audio heard: ``session_us_per_20ms``. That remainder holds the
``session`` stage (each session's steps on the event loop, measured per session: :mod:`.loop_cpu`) and the little
no session's step holds (WebSocket frames parsed before a session reads them, the threads reading the engine
workers' pipes): the cores the session workers need run both, so the plan sizes them from the remainder, and from
the ``session`` stage alone only in an export without ``server_cpu_s``. (The ``session`` stage's ``requests`` are
the steps it metered.) Take the export after the run's sessions
have closed (a session's heard audio is counted when it closes).
"""

from __future__ import annotations

import time
from typing import Any

from bargein.metrics.cost_meter import STAGE_CPU
from bargein.metrics.turn_cost import PROCESS_COST

EXPORT_KIND = "bargein.ledger"
_STARTED = time.time()
IN_SERVER_STAGES = ("vad", "turn_end", "see")
"""The stages spent in the server process itself that are not the session workers' own work (the engines' workers
are processes of their own; ``session`` is the session workers' own work, measured)."""
_first_session_cpu: list[float] = []


def session_began() -> None:
    """A session starts: the first one marks where the server's own CPU starts counting."""
    if not _first_session_cpu:
        _first_session_cpu.append(time.process_time())


def ledger_export() -> dict[str, Any]:
    """The export (module docstring)."""
    return {"kind": EXPORT_KIND, "version": 1, "started_at": round(_STARTED, 3),
            "exported_at": round(time.time(), 3), "stages": STAGE_CPU.snapshot(),
            "totals": {name: round(value, 3) for name, value in PROCESS_COST.totals.items()},
            "server_cpu_s": round(time.process_time() - _first_session_cpu[0], 3) if _first_session_cpu else 0.0}


def _per_unit(export: dict[str, Any], stage: str, unit_total: float, scale: float) -> float | None:
    """A stage's CPU (background included) per unit of work, times ``scale``; None without both figures."""
    figures = export.get("stages", {}).get(stage)
    if not isinstance(figures, dict) or unit_total <= 0:
        return None
    cpu_s = float(figures.get("cpu_s", 0.0)) + float(figures.get("background_cpu_s", 0.0))
    return cpu_s / unit_total * scale if cpu_s > 0 else None


def stage_costs(export: dict[str, Any]) -> dict[str, float]:
    """The ``StageCosts`` fields (of :mod:`bargein.capacity_plan`) a ledger export measures: the VAD's CPU per
    20 ms heard, recognition's per 20 ms of speech (its partials and speculative guesses included), the LLM's per
    token generated (its prompts' share included), the voice's per 20 ms sent (a cut reply's unsent tail
    included). A stage the run did not exercise is left out (the constants stand)."""
    if export.get("kind") != EXPORT_KIND:
        raise ValueError("not a bargein ledger export (its kind is not bargein.ledger)")
    totals = export.get("totals", {})
    twenties = 1e6 * 0.02  # microseconds per 20 ms of audio, per second of it
    stages = export.get("stages", {})
    in_server = sum(float(stages[s].get("cpu_s", 0.0)) + float(stages[s].get("background_cpu_s", 0.0))
                    for s in IN_SERVER_STAGES if isinstance(stages.get(s), dict))
    listened = float(totals.get("listened_s", 0.0))
    own = float(export.get("server_cpu_s", 0.0)) - in_server
    found = {
        "session_us_per_20ms": own / listened * twenties if own > 0 and listened > 0
        else _per_unit(export, "session", listened, twenties),
        "vad_us_per_20ms": _per_unit(export, "vad", float(totals.get("listened_s", 0.0)), twenties),
        "asr_us_per_20ms_speech": _per_unit(export, "asr", float(totals.get("audio_in_s", 0.0)), twenties),
        "llm_us_per_token": _per_unit(export, "llm", float(totals.get("generated_tokens", 0.0)), 1e6),
        "tts_us_per_20ms": _per_unit(export, "tts", float(totals.get("audio_out_s", 0.0)), twenties),
    }
    return {name: round(value, 3) for name, value in found.items() if value is not None}
