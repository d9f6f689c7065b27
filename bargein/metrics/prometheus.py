"""Prometheus metrics: per-stage latency histograms, turn outcomes, and the gauges a scheduler sizes pools by.

Queue depths are read from the engines at scrape time (every engine declares a ``queue_depth``; one that
keeps no queue says None and is left out), so the figures are never stale and the hot path pays nothing for them.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bargein.metrics.cost_meter import STAGE_CPU, STAGES
from bargein.values import WorkerProcess

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.032, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0,
                   1.5, 2.0, 3.0, 5.0, 10.0)
STAGE_FIELDS = {
    "endpoint": "endpoint_ms", "asr_final": "asr_final_ms", "llm_first_token": "llm_first_token_ms",
    "tts_first_audio": "tts_first_audio_ms", "first_delta_sent": "first_delta_sent_ms",
    "first_audio": "first_audio_ms", "barge_in_detect": "barge_in_detect_ms",
}


class StageSource(Protocol):
    """What the gauges read of one stage (an engine, or the sessions' outbound queues)."""

    @property
    def queue_depth(self) -> int | None:
        """Work waiting; None: it keeps no queue of its own."""

    @property
    def worker(self) -> WorkerProcess | None:
        """The worker process it runs in; None: it runs in this process."""


class LlmSource(StageSource, Protocol):
    """What the LLM gauges read of the language model."""

    @property
    def nonfinite_fallbacks(self) -> int:
        """Samplings that fell back to greedy."""


class ScoredTurnModel(Protocol):
    """What the end-of-turn gauges read of the end-of-turn model."""

    @property
    def score_counts(self) -> tuple[int, int] | None:
        """Scores run and shed; None: it does not count them."""


class _QueueDepths(Collector):
    def __init__(self, sources: Callable[[], Mapping[str, StageSource]]) -> None:
        self.sources = sources

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        sources = self.sources()
        family = GaugeMetricFamily("bargein_queue_depth", "Work waiting in each stage's queue", labels=["stage"])
        for stage, depth in queue_depths(sources).items():
            family.add_metric([stage], depth)
        yield family
        restarts = CounterMetricFamily("bargein_engine_worker_restarts", "Engine worker processes started again "
                                       "after one died (stages that run in a worker process)", labels=["stage"])
        memory = GaugeMetricFamily("bargein_engine_worker_resident_memory_bytes", "Resident memory of each "
                                   "stage's engine worker process", labels=["stage"])
        for stage, source in sources.items():
            worker = source.worker
            if worker is not None:
                restarts.add_metric([stage], float(worker.restarts))
                memory.add_metric([stage], _resident_bytes(worker.pid))
        yield restarts
        yield memory


class _StageCpu(Collector):
    """``bargein_cpu_seconds_total{stage}``: the CPU the engines' calls were charged since these metrics began,
    their workers' background included (:mod:`bargein.metrics.cost_meter`); a stage not charged yet is left out."""

    def __init__(self) -> None:
        self.baseline = {stage: STAGE_CPU.total(stage) for stage in STAGES}

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily("bargein_cpu_seconds", "CPU seconds spent per stage, measured per request by "
                                     "the worker processes and on the calling thread in process; session: each "
                                     "session's own steps on the event loop", labels=["stage"])
        for stage in STAGES:
            spent = STAGE_CPU.total(stage) - self.baseline[stage]
            if spent > 0:
                family.add_metric([stage], spent)
        yield family


class _StageStates(Collector):
    def __init__(self, health: Any) -> None:
        self.health = health

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        family = GaugeMetricFamily("bargein_stage_state", "Each engine stage's state (1 for the current one)",
                                   labels=["stage", "state"])
        failures = CounterMetricFamily("bargein_stage_failures", "Engine calls that failed, or missed their "
                                       "deadline while the engine delivered nothing", labels=["stage"])
        queue_misses = CounterMetricFamily("bargein_stage_queue_misses", "Engine calls that missed their deadline "
                                           "waiting in a busy engine's queue (not held against the engine)",
                                           labels=["stage"])
        refusals = CounterMetricFamily("bargein_stage_refusals", "Engine calls refused because a queue was full "
                                       "(not held against the engine)", labels=["stage"])
        for name, stage in self.health.stages.items():
            for state in ("ok", "degraded", "down"):
                family.add_metric([name, state], 1.0 if stage.state == state else 0.0)
            failures.add_metric([name], float(stage.failures))
            queue_misses.add_metric([name], float(stage.queue_misses))
            refusals.add_metric([name], float(stage.refusals))
        yield from (family, failures, queue_misses, refusals)


class _TurnModelScores(Collector):
    def __init__(self, turn_model: ScoredTurnModel) -> None:
        self.turn_model = turn_model

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily("bargein_turn_end_scores", "End-of-turn model scores: run, or shed because "
                                     "the model had spent its CPU share (that pause waited plain silence)",
                                     labels=["outcome"])
        counts = self.turn_model.score_counts
        if counts is not None:
            for outcome, count in zip(("run", "shed"), counts, strict=True):
                family.add_metric([outcome], float(count))
        yield family


def queue_depths(sources: Mapping[str, StageSource]) -> dict[str, float]:
    """Each source's ``queue_depth``; sources that keep no queue (None) are left out."""
    return {stage: float(depth) for stage, source in sources.items() if (depth := source.queue_depth) is not None}


class ServerMetrics:
    """All metrics of one server, in their own registry (several servers can share a process in tests)."""

    def __init__(self, queue_sources: Callable[[], Mapping[str, StageSource]] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.stage_latency = Histogram("bargein_stage_latency_seconds", "Latency of each stage of a turn",
                                       ["stage"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.turns = Counter("bargein_turns", "Replies by outcome", ["status"], registry=self.registry)
        self.tokens = Counter("bargein_llm_tokens", "Tokens generated", registry=self.registry)
        self.image_tokens = Counter("bargein_image_tokens", "Image tokens sent to vision models (by the token math)",
                                    registry=self.registry)
        self.onset_holds = Counter("bargein_onset_holds", "Replies' audio held by a half-hop onset (WebRTC), by "
                                   "whether a barge-in confirmed the hold or it was released (a hiccup)", ["outcome"],
                                   registry=self.registry)
        self.audio_seconds = Counter("bargein_audio_seconds", "Agent audio sent and heard", ["kind"],
                                     registry=self.registry)
        self.sessions = Gauge("bargein_sessions", "Live sessions", registry=self.registry)
        self._add_cost_metrics()
        self.refused = Counter("bargein_sessions_refused", "Sessions refused before any audio (loading, load)",
                               ["reason"], registry=self.registry)
        self.errors = Counter("bargein_client_errors", "Error events sent to clients", ["code"],
                              registry=self.registry)
        self.loop_lag = Histogram("bargein_event_loop_lag_seconds", "How late the event loop woke for a timer: "
                                  "every session's audio waits this long", buckets=LATENCY_BUCKETS,
                                  registry=self.registry)
        self.gc_pause = Histogram("bargein_gc_pause_seconds", "Garbage-collector pauses by generation: each "
                                  "stops every session of the worker", ["generation"],
                                  buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2),
                                  registry=self.registry)
        self.engine_info = Gauge("bargein_engine", "The engine serving each stage (value 1)", ["stage", "engine"],
                                 registry=self.registry)
        self.llm_nonfinite = Gauge("bargein_llm_nonfinite_fallbacks", "Samplings that fell back to greedy "
                                   "because the distribution was not finite", registry=self.registry)
        self.asyncio_tasks = Gauge("bargein_asyncio_tasks", "Tasks alive on the server's event loop (a leak grows "
                                   "this)", registry=self.registry)
        self.asyncio_tasks.set_function(_task_count)
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, process_open_fds, cpu
        self._add_memory_gauges()
        self._llm: LlmSource | None = None
        if queue_sources is not None:
            self.registry.register(_QueueDepths(queue_sources))

    def _add_memory_gauges(self) -> None:
        """The memory the soak and the operators watch: the LLM worker's, and what is left after each upkeep pass."""
        self.llm_worker_rss = Gauge("bargein_llm_worker_resident_memory_bytes", "Resident memory of the LLM's "
                                    "worker process (0 when the LLM runs in this process)", registry=self.registry)
        self.settled_rss = Gauge("bargein_resident_memory_after_upkeep_bytes", "Resident memory right after "
                                 "the last memory upkeep pass (collection and trim): a leak raises this floor, "
                                 "garbage between passes does not", registry=self.registry)
        self.settled_anonymous = Gauge("bargein_anonymous_memory_after_upkeep_bytes", "Anonymous resident memory "
                                       "(the heaps, arenas and buffers: RssAnon) right after the last upkeep pass: "
                                       "what a leak raises; mapped files' pages, which the kernel maps in and "
                                       "reclaims as other processes use the same files, are left out",
                                       registry=self.registry)
        self.settled_heap_blocks = Gauge("bargein_python_heap_blocks_after_upkeep", "Memory blocks the Python "
                                         "allocator holds right after the last upkeep pass: objects left behind "
                                         "raise it, native memory (models, the C allocator's heaps) does not",
                                         registry=self.registry)

    def _add_cost_metrics(self) -> None:
        """The cost ledger's figures (:mod:`bargein.metrics.cost_meter`): CPU per stage, waste, KV cache reuse."""
        self.wasted_tokens = Counter("bargein_wasted_tokens", "Generated tokens nobody heard because of a "
                                     "barge-in (by the unheard share of the reply's audio)", registry=self.registry)
        self.wasted_audio = Counter("bargein_wasted_audio_seconds", "Agent audio sent but never heard because of a "
                                    "barge-in", registry=self.registry)
        self.wasted_speculation = Counter("bargein_wasted_speculative_cpu_seconds", "CPU of guessed recognitions "
                                          "and prefetched replies that were thrown away", registry=self.registry)
        self.prompt_tokens = Counter("bargein_llm_prompt_tokens", "Prompt tokens of replies, by whether their KV "
                                     "cache was reused", ["kind"], registry=self.registry)
        self.kv_cache_hit_ratio = Gauge("bargein_llm_kv_cache_hit_ratio", "Share of prompt tokens whose KV cache "
                                        "was reused, since the start", registry=self.registry)
        self._prompt_counts = [0.0, 0.0]
        """Cached and evaluated prompt tokens, for the ratio."""
        self.kv_cache_hit_ratio.set_function(self._hit_ratio)
        self.registry.register(_StageCpu())

    def describe_engines(self, description: dict[str, str]) -> None:
        """``bargein_engine{stage, engine} 1`` for each loaded engine, so dashboards can tell runs apart."""
        for stage, engine in description.items():
            self.engine_info.labels(stage, engine[:200]).set(1)

    def watch_health(self, health: Any) -> None:
        """Export each stage's state (ok, degraded, down) and its failures, queue misses and refusals from a
        ``Health``."""
        self.registry.register(_StageStates(health))

    def watch_llm(self, llm: LlmSource) -> None:
        """Export the LLM's non-finite sampling fallback count, and its worker process's memory if it has one."""
        self._llm = llm
        self.llm_nonfinite.set_function(lambda: float(llm.nonfinite_fallbacks))
        self.llm_worker_rss.set_function(lambda: _resident_bytes(None if llm.worker is None else llm.worker.pid))

    def watch_turn_model(self, turn_model: ScoredTurnModel) -> None:
        """Export how many end-of-turn scores ran and how many were shed for want of CPU."""
        self.registry.register(_TurnModelScores(turn_model))

    def note_settled_memory(self) -> None:
        """Read this process's resident and anonymous memory and Python heap blocks into the after-upkeep gauges
        (call after an upkeep pass)."""
        self.settled_rss.set(_resident_bytes(os.getpid()))
        self.settled_anonymous.set(_anonymous_bytes(os.getpid()))
        self.settled_heap_blocks.set(sys.getallocatedblocks())

    def observe_turn(self, status: str, summary: dict[str, Any], *, heard: bool = True) -> None:
        """Record a finished reply's ledger; ``heard`` False: its heard audio is not known yet (the client still
        plays it), and :meth:`observe_heard` counts it later."""
        self.turns.labels(status).inc()
        for stage, field in STAGE_FIELDS.items():
            value = summary.get(field)
            if isinstance(value, int | float) and value >= 0:
                self.stage_latency.labels(stage).observe(value / 1000.0)
        self.tokens.inc(float(summary.get("tokens", 0) or 0))
        prompt, cached = float(summary.get("prompt_tokens", 0) or 0), float(summary.get("cached_tokens", 0) or 0)
        self.prompt_tokens.labels("cached").inc(cached)
        self.prompt_tokens.labels("evaluated").inc(max(0.0, prompt - cached))
        self._prompt_counts[0] += cached
        self._prompt_counts[1] += max(0.0, prompt - cached)
        self.image_tokens.inc(float(summary.get("image_tokens", 0) or 0))
        holds, released = float(summary.get("onset_holds", 0) or 0), float(summary.get("onset_holds_released", 0) or 0)
        self.onset_holds.labels("confirmed").inc(max(0.0, holds - released))
        self.onset_holds.labels("released").inc(released)
        self.audio_seconds.labels("sent").inc(float(summary.get("audio_sent_s", 0) or 0))
        if heard:
            self.observe_heard(float(summary.get("audio_heard_s", 0) or 0))

    def observe_waste(self, waste: dict[str, float]) -> None:
        """A reply's tokens and audio nobody heard (:func:`bargein.metrics.turn_cost.waste`)."""
        self.wasted_tokens.inc(max(0.0, waste["tokens"]))
        self.wasted_audio.inc(max(0.0, waste["audio_s"]))
        self.wasted_speculation.inc(max(0.0, waste.get("speculative_cpu_s", 0.0)))

    def _hit_ratio(self) -> float:
        cached, evaluated = self._prompt_counts
        return cached / (cached + evaluated) if cached + evaluated > 0 else 0.0

    def observe_heard(self, seconds: float) -> None:
        """Agent audio the client played."""
        self.audio_seconds.labels("heard").inc(max(0.0, seconds))

    def exposition(self) -> bytes:
        """The text format served at ``/metrics``."""
        return generate_latest(self.registry)


def _resident_bytes(pid: object) -> float:
    """Resident memory of process ``pid`` from /proc (0 if there is none to read)."""
    if not isinstance(pid, int):
        return 0.0
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return float(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _anonymous_bytes(pid: int) -> float:
    """Anonymous resident memory of process ``pid`` (``RssAnon`` in /proc; 0 if there is none to read)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return float(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped outside the event loop
        return 0.0


async def watch_event_loop(metrics: ServerMetrics, interval_s: float = 0.05,
                           on_sample: Callable[[float], None] | None = None) -> None:
    """Sample the event loop's lateness forever (cancel to stop); ``on_sample`` gets each sample too."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        late = max(0.0, loop.time() - due)
        metrics.loop_lag.observe(late)
        if on_sample is not None:
            on_sample(late)
