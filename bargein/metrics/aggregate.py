"""``/metrics`` over several worker processes: each publishes, whichever is scraped merges.

Every worker writes its own exposition and load snapshot into a directory the parent process made
(``BARGEIN_WORKER_DIR``) once a second; the worker that answers a scrape reads every live worker's
files (its own figures fresh), sums counters, histograms and gauges across workers (the engine-info
gauge takes the maximum, and so do the engine workers' restarts and memory when the engines are shared,
and the LLM worker's memory and fallbacks when the LLM is one of them: each session worker reports the same
engine processes) and adds one ``bargein_worker_*`` series per worker, so a scheduler sees both the server's
total and which worker is loaded. Files of workers that died are skipped (their pid is gone or the file is older than
:data:`STALE_S`), so a restarted worker does not count twice. What a worker counted before it died or was
retired stays counted, though: its counters and histograms are folded into :data:`RETIRED_FILE` (its gauges,
which described a process that is gone, are dropped). Otherwise each restart would make the server's totals
fall, and Prometheus reads a fall as a counter reset: ``rate()`` would count the survivors' whole totals again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

STALE_S = 10.0
RETIRED_FILE = "retired.json"
"""Counters and histograms of the workers that are gone, summed (one file, however many restarts)."""
_CUMULATIVE = frozenset({"counter", "histogram", "summary"})
_MAX_GAUGES = frozenset({"bargein_engine"})
"""Gauges that describe rather than count: the same value in every worker, so not summed."""
SHARED_ENGINE_FAMILIES = frozenset({"bargein_engine_worker_restarts", "bargein_engine_worker_resident_memory_bytes"})
"""With shared engines every session worker reports the same engine worker's figures: the maximum, not the sum."""
SHARED_LLM_FAMILIES = frozenset({"bargein_llm_worker_resident_memory_bytes", "bargein_llm_nonfinite_fallbacks"})
"""The same for the LLM's own figures, when the LLM is one of the shared engines (not in process, not remote)."""


@dataclass(frozen=True)
class WorkerFigures:
    """What one worker published: its exposition text and its load snapshot."""

    pid: int
    exposition: str
    load: dict[str, object]


class WorkerBoard:
    """The shared directory the workers publish into (``None``: a single process, nothing shared)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = Path(directory) if directory else None

    def publish(self, figures: WorkerFigures) -> None:
        """Write this worker's figures atomically (readers never see half a file)."""
        if self.directory is None:
            return
        target = self.directory / f"worker-{figures.pid}.json"
        scratch = self.directory / f".worker-{figures.pid}.tmp"
        scratch.write_text(json.dumps({"pid": figures.pid, "exposition": figures.exposition, "load": figures.load}))
        os.replace(scratch, target)

    def withdraw(self, pid: int, maxima: frozenset[str] = frozenset()) -> None:
        """A worker stops: its counters join the retired ones and its file goes (``maxima``: see :func:`maxima`)."""
        if self.directory is not None:
            with contextlib.suppress(OSError):
                self._retire(self.directory / f"worker-{pid}.json", maxima)

    def retired(self) -> str:
        """The summed counters and histograms of the workers that are gone (exposition text; empty: none)."""
        if self.directory is None:
            return ""
        try:
            return (self.directory / RETIRED_FILE).read_text()
        except OSError:
            return ""

    def _retire(self, path: Path, maxima: frozenset[str]) -> None:
        assert self.directory is not None
        # one worker at a time: two scrapes must not both fold the same dead worker's file in
        with open(self.directory / f"{RETIRED_FILE}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = json.loads(path.read_text())
            except FileNotFoundError:
                return  # folded already by another worker
            except ValueError:
                path.unlink(missing_ok=True)
                return
            gone = WorkerFigures(0, _cumulative_only(str(data.get("exposition", ""))), {})
            tally = WorkerFigures(0, self.retired(), {})
            scratch = self.directory / f".{RETIRED_FILE}.tmp"
            scratch.write_bytes(_merge([tally, gone], maxima, per_worker=False))
            os.replace(scratch, self.directory / RETIRED_FILE)
            path.unlink(missing_ok=True)

    def gather(self, own: WorkerFigures, maxima: frozenset[str] = frozenset()) -> list[WorkerFigures]:
        """Every live worker's latest figures, ``own`` (fresh) in place of this worker's file; the files of
        workers that died are retired (their counters kept, see :meth:`retired`)."""
        found = [own]
        if self.directory is None:
            return found
        now = time.time()
        for path in sorted(self.directory.glob("worker-*.json")):
            try:
                pid = int(path.stem.removeprefix("worker-"))
            except ValueError:
                continue
            if pid == own.pid:
                continue
            if not _alive(pid):
                with contextlib.suppress(OSError):
                    self._retire(path, maxima)
                continue
            try:
                if now - path.stat().st_mtime > STALE_S:
                    continue  # alive but not publishing (hung, or its pid reused): not counted meanwhile
                data = json.loads(path.read_text())
                found.append(WorkerFigures(pid, str(data["exposition"]), dict(data["load"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a worker replacing its file right now, or one that just died
        return found


def maxima(*, shared_engines: bool = False, shared_llm: bool = False) -> frozenset[str]:
    """The families merged by their maximum rather than summed (see :func:`merged_exposition`)."""
    return _MAX_GAUGES | (SHARED_ENGINE_FAMILIES if shared_engines else frozenset()) \
        | (SHARED_LLM_FAMILIES if shared_llm else frozenset())


def merged_exposition(workers: Sequence[WorkerFigures], *, shared_engines: bool = False,
                      shared_llm: bool = False, retired: str = "") -> bytes:
    """One exposition for the whole server: sums across workers plus per-worker load series
    (``shared_engines``: the engine workers' figures are each worker's view of the same processes;
    ``shared_llm``: so are the LLM's; ``retired``: :meth:`WorkerBoard.retired`, added to the sums only)."""
    families = maxima(shared_engines=shared_engines, shared_llm=shared_llm)
    gone = [WorkerFigures(0, retired, {})] if retired else []
    return _merge([*workers, *gone], families, per_worker=True, listed=workers)


def _merge(figures: Sequence[WorkerFigures], maxima: frozenset[str], *, per_worker: bool,
           listed: Sequence[WorkerFigures] = ()) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(figures, maxima, listed if per_worker else None))
    return generate_latest(registry)


def _cumulative_only(exposition: str) -> str:
    """Only the counters and histograms of ``exposition`` (what stays counted once its worker is gone)."""
    kept = [family for family in text_string_to_metric_families(exposition) if family.type in _CUMULATIVE]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(kept))
    return generate_latest(registry).decode()


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class _Merged(Collector):
    def __init__(self, workers: Sequence[WorkerFigures], maxima: frozenset[str],
                 listed: Sequence[WorkerFigures] | None) -> None:
        self.workers = workers
        self.maxima = maxima
        self.listed = listed

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for worker in self.workers:
            for family in text_string_to_metric_families(worker.exposition):
                families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                sums = values.setdefault(family.name, {})
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    if key not in sums:
                        sums[key] = sample.value
                    elif sample.name.endswith("_created"):
                        sums[key] = min(sums[key], sample.value)
                    elif family.name in self.maxima:
                        sums[key] = max(sums[key], sample.value)
                    else:
                        sums[key] += sample.value
        for name, family in families.items():
            for (sample_name, labels), value in values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family
        if self.listed is not None:
            yield from _per_worker(self.listed)


def _per_worker(workers: Sequence[WorkerFigures]) -> Iterable[Metric]:
    count = GaugeMetricFamily("bargein_workers", "Worker processes serving sessions")
    count.add_metric([], float(len(workers)))
    sessions = GaugeMetricFamily("bargein_worker_sessions", "Live sessions per worker", labels=["worker"])
    lag = GaugeMetricFamily("bargein_worker_loop_lag_p99_seconds", "Event-loop lag p99 over the last 5 s, "
                            "per worker", labels=["worker"])
    queues = GaugeMetricFamily("bargein_worker_queue_depth", "Work waiting in each stage's queue, per worker",
                               labels=["worker", "stage"])
    for worker in workers:
        label = str(worker.pid)
        sessions.add_metric([label], _number(worker.load.get("sessions")))
        lag.add_metric([label], _number(worker.load.get("loop_lag_p99_ms")) / 1000.0)
        depths = worker.load.get("queue_depths")
        if isinstance(depths, dict):
            for stage, depth in depths.items():
                queues.add_metric([label, str(stage)], _number(depth))
    yield from (count, sessions, lag, queues)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
