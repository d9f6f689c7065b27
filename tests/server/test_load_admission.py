"""Admission by load, per-worker load reporting, and ``/metrics`` merged over worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.metrics.aggregate import WorkerBoard, WorkerFigures, merged_exposition
from bargein.metrics.prometheus import ServerMetrics
from bargein.server.load import LoadLimits, LoadMonitor
from tests.support.server import free_port, running_server


class _Queue:
    def __init__(self, depth: int) -> None:
        self.queue_depth = depth


def test_a_worker_refuses_above_each_limit_and_says_which() -> None:
    sessions = [0]
    queue = _Queue(0)
    monitor = LoadMonitor(LoadLimits(max_sessions=2, max_loop_lag_ms=50, max_queue_depth=10),
                          lambda: sessions[0], lambda: {"vad": queue, "asr": FakeRecognizer()})  # no queue of its own
    assert monitor.refusal() is None
    sessions[0] = 2
    assert "max_sessions 2" in (monitor.refusal() or "")
    sessions[0] = 0
    for _ in range(100):
        monitor.observe_lag(0.2)
    # an idle worker has no audio to be late on: the lag was start-up's (model loads, warm-up) or another
    # process's, and refusing would turn away the first user of a server that has just started
    assert monitor.refusal() is None
    sessions[0] = 1
    assert "behind its audio" in (monitor.refusal() or "")
    for _ in range(100):
        monitor.observe_lag(0.001)
    sessions[0] = 0
    queue.queue_depth = 11
    assert "vad queue holds 11" in (monitor.refusal() or "")
    snapshot = monitor.snapshot()
    assert snapshot.queue_depths == {"vad": 11.0} and snapshot.pid == os.getpid()
    assert monitor.refused == 3


def test_a_refused_session_gets_an_error_and_close_code_1013_before_any_audio() -> None:
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    with running_server(engines, Settings(port=free_port(), max_sessions=1, max_loop_lag_ms=60_000)) as host, \
            connect(f"ws://{host}/v1/realtime") as first:
        assert json.loads(first.recv(timeout=5))["type"] == "session.created"
        with connect(f"ws://{host}/v1/realtime") as second:
            refused = json.loads(second.recv(timeout=5))
            with pytest.raises(ConnectionClosed) as closed:
                second.recv(timeout=5)
        metrics = httpx.get(f"http://{host}/metrics").text
    assert refused["type"] == "error" and refused["error"]["code"] == "server_unavailable"
    assert "max_sessions 1" in refused["error"]["message"] and "retry" in refused["error"]["message"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    assert 'bargein_sessions_refused_total{reason="load"} 1.0' in metrics


def test_one_client_that_stops_reading_does_not_turn_new_sessions_away() -> None:
    from tests.server.test_hostile_connections import _raw_websocket

    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    settings = Settings(port=free_port(), events_per_s=100_000, event_burst=100_000, max_queue_depth=64,
                        max_loop_lag_ms=60_000)
    with running_server(engines, settings) as host:
        hog = _raw_websocket(host)
        hog.settimeout(30)
        hog.sendall((bytes([0x81, 0x80 | 4]) + b"\0\0\0\0" + b"nope") * 60_000)  # 60 000 errors it never reads
        depth = 0.0
        for _ in range(300):
            depth = httpx.get(f"http://{host}/healthz").json()["load"]["queue_depths"].get("outbound", 0.0)
            if depth > 64:
                break
            time.sleep(0.1)
        with connect(f"ws://{host}/v1/realtime") as other:
            first = json.loads(other.recv(timeout=5))
        hog.close()
    assert depth > 64  # its unread events are still reported...
    assert first["type"] == "session.created", first  # ...but they are not this worker's load


def _exposition(sessions: float, turns: float) -> str:
    metrics = ServerMetrics()
    metrics.sessions.set(sessions)
    metrics.turns.labels("completed").inc(turns)
    metrics.loop_lag.observe(0.002)
    metrics.describe_engines({"vad": "silero"})
    return metrics.exposition().decode()


def test_metrics_sum_over_workers_and_list_each_worker() -> None:
    workers = [WorkerFigures(11, _exposition(3, 2), {"sessions": 3, "loop_lag_p99_ms": 4.0,
                                                      "queue_depths": {"vad": 1.0}}),
               WorkerFigures(12, _exposition(5, 1), {"sessions": 5, "loop_lag_p99_ms": 40.0, "queue_depths": {}})]
    text = merged_exposition(workers).decode()
    assert "bargein_sessions 8.0" in text
    assert 'bargein_turns_total{status="completed"} 3.0' in text
    assert "bargein_event_loop_lag_seconds_count 2.0" in text
    assert 'bargein_engine{engine="silero",stage="vad"} 1.0' in text  # described, not counted twice
    assert "bargein_workers 2.0" in text
    assert 'bargein_worker_sessions{worker="12"} 5.0' in text
    assert 'bargein_worker_loop_lag_p99_seconds{worker="12"} 0.04' in text
    assert 'bargein_worker_queue_depth{stage="vad",worker="11"} 1.0' in text


def test_the_board_skips_dead_and_stale_workers(tmp_path: Path) -> None:
    board = WorkerBoard(str(tmp_path))
    me = WorkerFigures(os.getpid(), "", {"sessions": 1})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for pid in (dead.pid, alive.pid):
            board.publish(WorkerFigures(pid, "", {"sessions": 2}))
        assert sorted(w.pid for w in board.gather(me)) == sorted([os.getpid(), alive.pid])
        stale = tmp_path / f"worker-{alive.pid}.json"
        os.utime(stale, (time.time() - 60, time.time() - 60))
        assert [w.pid for w in board.gather(me)] == [os.getpid()]
    finally:
        alive.kill()
        alive.wait()


def _serve_two_workers(port: int, *flags: str) -> subprocess.Popen[bytes]:
    """``bargein serve`` with instant engines and two worker processes on ``port``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "bargein", "serve", "--engines", "instant", "--workers", "2",
                             "--port", str(port), "--log-level", "warning", *flags], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_two_worker_processes_share_the_port_and_one_metrics() -> None:
    port = free_port()
    server = _serve_two_workers(port)
    try:
        _wait_for_workers(port, 2)
        sockets = [connect(f"ws://127.0.0.1:{port}/v1/realtime") for _ in range(6)]
        for ws in sockets:
            assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        deadline = time.monotonic() + 15
        text = ""
        while time.monotonic() < deadline:  # the other worker publishes once a second
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            if "bargein_sessions 6.0" in text:
                break
            time.sleep(0.3)
        for ws in sockets:
            ws.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "bargein_sessions 6.0" in text, text[-2000:]
    assert "bargein_workers 2.0" in text
    per_worker = [line for line in text.splitlines() if line.startswith("bargein_worker_sessions{")]
    assert len(per_worker) == 2 and sum(float(line.split()[-1]) for line in per_worker) == 6


def _wait_for_workers(port: int, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if f"bargein_workers {count}.0" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{count} workers did not come up")


def test_collector_pauses_are_timed_by_generation() -> None:
    import gc

    from bargein.metrics.gc_pauses import GcPauseWatch

    metrics = ServerMetrics()
    watch = GcPauseWatch(metrics.gc_pause)
    watch.install()
    try:
        gc.collect()
    finally:
        watch.remove()
    gc.collect()  # not timed any more
    text = metrics.exposition().decode()
    assert 'bargein_gc_pause_seconds_count{generation="2"} 1.0' in text


def test_a_killed_worker_is_replaced_and_counted_once() -> None:
    import signal

    port = free_port()
    server = _serve_two_workers(port)
    try:
        _wait_for_workers(port, 2)
        survivor, killed = sorted(_worker_pids(port))
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 90
        after: set[int] = set()
        while time.monotonic() < deadline:
            after = _worker_pids(port)
            if len(after) == 2 and killed not in after:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert survivor in after and killed not in after and len(after) == 2, (survivor, killed, after)


def _worker_pids(port: int) -> set[int]:
    while True:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    return {int(line.split('worker="')[1].split('"')[0]) for line in text.splitlines()
            if line.startswith("bargein_worker_sessions{")}


def test_the_per_client_session_cap_holds_across_workers() -> None:
    """``--workers 2``: one address gets ``--max-connections-per-client`` sessions from the server, not that many
    from each worker (the workers share the counts)."""
    port = free_port()
    server = _serve_two_workers(port, "--max-connections-per-client", "3")
    sockets = []
    try:
        _wait_for_workers(port, 2)
        first_events = []
        for _ in range(12):
            ws = connect(f"ws://127.0.0.1:{port}/v1/realtime")
            sockets.append(ws)
            first_events.append(json.loads(ws.recv(timeout=10)))
        created = [event for event in first_events if event["type"] == "session.created"]
        refused = [event["error"]["code"] for event in first_events if event["type"] == "error"]
        per_worker: list[float] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # each worker publishes its figures once a second
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            per_worker = [float(line.split()[-1]) for line in text.splitlines()
                          if line.startswith("bargein_worker_sessions{")]
            if len(per_worker) == 2 and sum(per_worker) == len(created):
                break
            time.sleep(0.3)
        assert len(created) == 3 and refused == ["too_many_sessions"] * 9, (len(created), refused, per_worker)
        for ws in sockets:
            ws.close()
        sockets.clear()
        time.sleep(1.0)  # the closed sessions are counted out on whichever worker held them
        again = connect(f"ws://127.0.0.1:{port}/v1/realtime")
        sockets.append(again)
        assert json.loads(again.recv(timeout=10))["type"] == "session.created"
    finally:
        for ws in sockets:
            ws.close()
        server.terminate()
        server.wait(timeout=30)


def test_one_host_counts_as_one_client_whichever_of_its_addresses_it_uses() -> None:
    """An IPv6 host holds a whole /64 (privacy addresses, or any it binds): a cap per exact address would let it
    open ``max_connections_per_client`` sessions from each. An IPv4 address mapped into IPv6 is that address."""
    from bargein.server.auth import client_address
    from bargein.server.client_counts import LocalSessionCounts

    def key(host: str) -> str | None:
        return client_address({"type": "websocket", "client": (host, 50_000)})

    one_host = ["2001:db8:1:2::1", "2001:db8:1:2:a:b:c:d", "2001:DB8:1:2:ffff:ffff:ffff:fffe"]
    assert len({key(host) for host in one_host}) == 1
    assert key("2001:db8:1:2::1") != key("2001:db8:1:3::1")
    assert key("::ffff:203.0.113.7") == key("203.0.113.7") != key("203.0.113.8")
    assert key("::1") == "::1" and key("127.0.0.1") == "127.0.0.1"
    counts = LocalSessionCounts(per_address=2)
    admitted = [asyncio.run(counts.acquire(key(host) or "unknown")) for host in one_host]
    assert admitted == [True, True, False]
