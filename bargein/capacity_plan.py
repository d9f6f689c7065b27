"""``bargein capacity``: how many cores (replicas) each stage needs for N concurrent sessions.

From measured per-stage CPU costs (``python -m bench.capacity.stage_costs``; the defaults below are one run on
the 2-core development machine, see docs/scaling.md) and a traffic model (how often a session takes a
turn, how long users speak, how long replies are), each stage's pool is sized so that its utilisation
stays under ``--max-utilisation`` and the time a turn waits in its queue stays within the stage's share
of the first-audio budget at the 95th percentile. Queueing is modelled as M/M/c (Erlang C): Poisson
turn arrivals, one turn per replica at a time. That is pessimistic for the batched VAD and optimistic
for bursty arrivals; it is a sizing aid, to be checked with ``python -m bench.capacity.sessions``.

``--ledger FILE`` reads the per-stage CPU costs from a ledger export of a real run (``GET /v1/ledger/export``,
:mod:`bargein.metrics.ledger_export`): the CPU the workers measured per request over the work they served, and the
session workers' own CPU per 20 ms heard. A stage the run did not exercise and the wall-clock latencies keep the
constants; a ``--costs`` file overrides both.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from bargein.metrics.ledger_export import stage_costs


@dataclass(frozen=True)
class StageCosts:
    """CPU microseconds (of one core) per unit of work, per stage."""

    session_us_per_20ms: float = 380.0
    """A session's event-loop work per 20 ms: WebSocket, JSON, base64, resampling, the state machine, the
    wakeups (bench.capacity.sessions: 2 to 2.5 % of a core per listening session, less the VAD; in process, all
    sessions fed in one tick, the same path costs 92 us with the VAD)."""
    vad_us_per_20ms: float = 20.7
    """Silero in batches of 32 (bench.capacity.stage_costs)."""
    asr_us_per_20ms_speech: float = 954.0
    """Whisper tiny.en int8, CPU per 20 ms of speech recognised (bench.capacity.stage_costs --models)."""
    llm_us_per_token: float = 28_400.0
    """The embedded Qwen2.5-Coder-0.5B Q4_K_M, CPU per token including its share of the prompt
    (bench.capacity.stage_costs)."""
    llm_first_token_ms: float = 480.0
    """Prompt processing before the first token, warm, wall time (bench.latency.stages)."""
    tts_us_per_20ms: float = 145.0
    """Kokoro-82M, CPU per 20 ms of speech produced (bench.capacity.stage_costs --models)."""
    tts_first_audio_ms: float = 70.0
    """Kokoro's first chunk, wall time (bench.latency.stages)."""


@dataclass(frozen=True)
class Traffic:
    """What an average session does."""

    turns_per_minute: float = 4.0
    utterance_s: float = 3.0
    reply_tokens: float = 40.0
    reply_audio_s: float = 6.0
    endpoint_ms: float = 500.0
    first_clause_tokens: float = 6.0
    """Tokens the LLM writes before the first clause goes to the TTS."""


@dataclass(frozen=True)
class StagePlan:
    """The pool one stage needs."""

    stage: str
    replicas: int
    cores: float
    utilisation: float
    wait_p95_ms: float
    service_ms: float


def plan(sessions: int, p95_first_audio_ms: float, costs: StageCosts, traffic: Traffic,
         max_utilisation: float = 0.7) -> tuple[list[StagePlan], float]:
    """Pools per stage and the first-audio p95 they give (endpoint + service + queueing)."""
    turns_per_s = sessions * traffic.turns_per_minute / 60.0
    asr_s = costs.asr_us_per_20ms_speech * traffic.utterance_s / 0.02 / 1e6
    # speculation runs recognition during the endpoint silence: only what is left after it delays the reply
    asr_after_endpoint_ms = max(0.0, asr_s * 1000 - traffic.endpoint_ms)
    llm_busy_s = costs.llm_first_token_ms / 1000 + costs.llm_us_per_token * traffic.reply_tokens / 1e6
    llm_first_clause_ms = costs.llm_first_token_ms + costs.llm_us_per_token * traffic.first_clause_tokens / 1000
    tts_busy_s = costs.tts_us_per_20ms * traffic.reply_audio_s / 0.02 / 1e6
    fixed_ms = traffic.endpoint_ms + asr_after_endpoint_ms + llm_first_clause_ms + costs.tts_first_audio_ms
    budget_ms = max(0.0, p95_first_audio_ms - fixed_ms) / 3  # the queues of ASR, LLM and TTS share what is left
    plans = [
        _continuous("session workers", sessions * costs.session_us_per_20ms / 20_000, max_utilisation),
        _continuous("vad", sessions * costs.vad_us_per_20ms / 20_000, max_utilisation),
        _queued("asr", turns_per_s, asr_s, budget_ms, max_utilisation),
        _queued("llm", turns_per_s, llm_busy_s, budget_ms, max_utilisation),
        _queued("tts", turns_per_s, tts_busy_s, budget_ms, max_utilisation),
    ]
    worst_wait = sum(p.wait_p95_ms for p in plans if p.stage in ("asr", "llm", "tts"))
    return plans, fixed_ms + worst_wait


def _continuous(stage: str, cores: float, max_utilisation: float) -> StagePlan:
    replicas = max(1, math.ceil(cores / max_utilisation))
    return StagePlan(stage, replicas, replicas, cores / replicas, 0.0, 0.0)


def _queued(stage: str, rate: float, service_s: float, budget_ms: float, max_utilisation: float) -> StagePlan:
    offered = rate * service_s
    replicas = max(1, math.ceil(offered / max_utilisation))
    limit = 10 * replicas + 1000
    while _wait_p95_s(replicas, offered, service_s) * 1000 > budget_ms and replicas < limit:
        replicas += max(1, replicas // 50)
    return StagePlan(stage, replicas, float(replicas), offered / replicas,
                     _wait_p95_s(replicas, offered, service_s) * 1000, service_s * 1000)


def _wait_p95_s(servers: int, offered: float, service_s: float) -> float:
    """95th percentile of the M/M/c queueing delay (0 when 95 % of turns do not wait at all)."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return math.inf
    blocking = 1.0  # Erlang B by recursion, stable for thousands of servers
    for count in range(1, servers + 1):
        blocking = offered * blocking / (count + offered * blocking)
    waits = servers * blocking / (servers - offered * (1 - blocking))  # Erlang C: P(a turn waits)
    if waits <= 0.05:
        return 0.0
    return math.log(waits / 0.05) * service_s / (servers - offered)


class CostsFileError(ValueError):
    """A ``--costs`` file that cannot be read, is not JSON, or holds a cost that is not a non-negative number."""


def _read_json(path: str, what: str) -> object:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CostsFileError(f"cannot read the {what} {path}: {error}") from error


def load_ledger(path: str | None, base: StageCosts | None = None) -> StageCosts:
    """``base`` (the constants) with the per-stage costs a ledger export measured (``--ledger``)."""
    base = base or StageCosts()
    if not path:
        return base
    data = _read_json(path, "ledger export")
    try:
        measured = stage_costs(data if isinstance(data, dict) else {})
    except (TypeError, ValueError, AttributeError) as error:
        raise CostsFileError(f"the ledger export {path}: {error}") from error
    return StageCosts(**{**{f.name: getattr(base, f.name) for f in fields(StageCosts)}, **measured})


def load_costs(path: str | None, base: StageCosts | None = None) -> StageCosts:
    """``base`` (the defaults), overridden by a JSON object of :class:`StageCosts` field names (``--costs``)."""
    base = base or StageCosts()
    if not path:
        return base
    data = _read_json(path, "costs file")
    if not isinstance(data, dict):
        raise CostsFileError(f"the costs file {path} must hold a JSON object of StageCosts field names")
    known = {f.name for f in fields(StageCosts)}
    costs: dict[str, float] = {}
    for key, value in data.items():
        if key not in known:
            continue
        # bool is an int to Python, and json accepts NaN and Infinity: none of them is a measured cost
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise CostsFileError(f"the costs file {path}: {key} must be a non-negative number, not {value!r}")
        costs[key] = float(value)
    return StageCosts(**{**{f.name: getattr(base, f.name) for f in fields(StageCosts)}, **costs})


def _number(low: float, high: float = math.inf, *, low_open: bool = False,
            whole: bool = False) -> Callable[[str], float]:
    """An argparse type for a finite number in ``[low, high]`` (``(low, high]`` when ``low_open``): a zero or
    negative count, rate or utilisation would divide by zero or print negative pools instead of a plan."""
    where = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{' whole' if whole else ''} number") from None
        if not math.isfinite(value) or not (low < value if low_open else low <= value) or value > high:
            raise argparse.ArgumentTypeError(f"{text} is outside {where}")
        return value
    return parse


def add_capacity_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bargein capacity`` flags."""
    parser.add_argument("--sessions", type=_number(0, whole=True), required=True, help="concurrent sessions to carry")
    parser.add_argument("--p95-first-audio", type=_number(0, low_open=True), default=1500.0,
                        help="target first audio p95, ms")
    parser.add_argument("--costs", help="JSON of measured stage costs (StageCosts field names)")
    parser.add_argument("--ledger", help="a ledger export of a real run (GET /v1/ledger/export): its measured "
                        "per-stage CPU replaces the constants")
    parser.add_argument("--max-utilisation", type=_number(0, 1, low_open=True), default=0.7)
    parser.add_argument("--cores-per-machine", type=_number(1, whole=True), default=32)
    for spec in fields(Traffic):
        parser.add_argument(f"--{spec.name.replace('_', '-')}", type=_number(0), default=spec.default)


def run_capacity(args: argparse.Namespace) -> int:
    """Print the plan (exit 2 with a message when the ``--costs`` file cannot be used)."""
    traffic = Traffic(**{spec.name: getattr(args, spec.name) for spec in fields(Traffic)})
    try:
        costs = load_costs(args.costs, load_ledger(getattr(args, "ledger", None)))
    except CostsFileError as error:
        print(f"bargein capacity: {error}", file=sys.stderr)
        return 2
    plans, first_audio = plan(args.sessions, args.p95_first_audio, costs, traffic, args.max_utilisation)
    total = sum(p.cores for p in plans)
    print(f"{args.sessions} sessions, {traffic.turns_per_minute:g} turns/min each, target first audio p95 "
          f"{args.p95_first_audio:.0f} ms, utilisation <= {args.max_utilisation:.0%}")
    print(f"{'stage':16s} {'replicas':>9s} {'cores':>8s} {'util':>6s} {'service ms':>11s} {'wait p95 ms':>12s}")
    for stage in plans:
        print(f"{stage.stage:16s} {stage.replicas:9d} {stage.cores:8.0f} {stage.utilisation:6.0%} "
              f"{stage.service_ms:11.0f} {stage.wait_p95_ms:12.0f}")
    machines = math.ceil(total / args.cores_per_machine)
    print(f"total {total:.0f} cores = {machines} machines of {args.cores_per_machine} cores; "
          f"expected first audio p95 {first_audio:.0f} ms")
    if first_audio > args.p95_first_audio:
        print(f"the target cannot be met: endpoint, recognition, the first clause and the first audio alone take "
              f"{first_audio:.0f} ms with these models; use faster ones (or GPUs) for the LLM")
        return 1
    return 0
