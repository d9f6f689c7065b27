"""The engine-process wire cannot run code, and a shared engine's hub serves only holders of the server's key."""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection
from pathlib import Path

import numpy as np
import pytest

from bargein.config import Settings
from bargein.engines.process import frames, wire
from bargein.engines.process.shared import EngineHub, socket_path
from bargein.engines.process.spawn import Launch, python_worker
from bargein.engines.process.supervisor import EngineProcess
from bargein.engines.process.wire import WorkerDied, WorkerSpec
from bargein.values import ChatMessage, GenerationOptions, SpeechChunk, ToolCall, Transcript, WordTiming

HOSTILE = Path(__file__).resolve().parents[2] / "support" / "hostile_worker.py"
ECHO = WorkerSpec("tests.support.echo_service:EchoService")


def test_a_worker_that_sends_a_code_running_pickle_is_refused_and_the_code_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    launch = Launch((sys.executable, str(HOSTILE), str(marker)), env={"PYTHONPATH": os.getcwd()})
    with pytest.raises(WorkerDied, match="does not parse"):
        EngineProcess(launch, name="hostile", start_timeout_s=20)
    assert not marker.exists(), "the server unpickled what the worker sent: the worker ran code in the server"


def _frames_until_closed(conn: Connection, timeout_s: float) -> list[bytes]:
    received: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not conn.poll(0.1):
                continue
            received.append(conn.recv_bytes())
        except (EOFError, OSError):
            break
    return received


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[EngineHub]:
    process = EngineProcess(python_worker(ECHO, "echo"), name="echo")
    hub = EngineHub(process, socket_path(str(tmp_path), "echo"))
    try:
        yield hub
    finally:
        hub.close()
        process.close()


def test_a_hub_connection_without_the_key_is_refused_before_any_message(hub: EngineHub) -> None:
    conn = Client(hub.path, family="AF_UNIX")
    conn.send(("start", 1, None, ("echo", 3)))  # a request straight away, as before there was a key
    received = _frames_until_closed(conn, timeout_s=10)
    assert received, "the hub sent nothing at all"
    assert all(frame.startswith(b"bargein-hub-challenge:") for frame in received), \
        f"the hub served a connection that holds no key: {received[:2]}"
    assert hub.clients == 0


def test_a_hub_connection_with_a_wrong_key_is_refused(hub: EngineHub) -> None:
    from bargein.engines.process.hub_link import authenticate_hub

    conn = Client(hub.path, family="AF_UNIX")
    with pytest.raises((OSError, EOFError)):
        authenticate_hub(conn, b"not the server's key")
        conn.recv_bytes()  # a hub that let it through would now say ready
    assert hub.clients == 0


def test_the_value_types_cross_and_arrays_arrive_writable() -> None:
    words = (WordTiming("ni", 0.0, 120.5, 0.9),)
    values = [
        ("start", 7, (3, 140), ([ChatMessage("user", "hi", tool_calls=(ToolCall("clock", "c1"),))],
                                GenerationOptions(tools=({"name": "clock", "parameters": {}},)), True)),
        ("item", 1, Transcript("hello", words=words, voiced_encoding=(0.5,))),
        ("item", 2, SpeechChunk(np.arange(6, dtype=np.float32).reshape(2, 3), 24000, words)),
        ("item", 3, {"big": 1 << 70, "neg": -5, "bytes": b"\x00\xff", "nested": [None, True, 1.5, "日本"]}),
    ]
    for value in values:
        decoded = frames.decode(frames.encode(value, wire._describe), wire._construct)
        if isinstance(value[2], SpeechChunk):
            assert np.array_equal(decoded[2].audio, value[2].audio) and decoded[2].words == words
            decoded[2].audio[0, 0] = 1.0  # writable, as an unpickled array was
        else:
            assert decoded == value


def test_settings_cross_to_a_worker_without_their_keys() -> None:
    settings = Settings(api_keys=["sk-server-key"], llm_api_key="sk-llm-key", asr_model="base")
    frame = frames.encode(("spec", WorkerSpec("x:y", {"settings": settings})), wire._describe)
    assert b"sk-server-key" not in frame and b"sk-llm-key" not in frame
    decoded = frames.decode(frame, wire._construct)[1].kwargs["settings"]
    assert decoded.asr_model == "base" and decoded.api_keys == [] and decoded.llm_api_key is None


@pytest.mark.parametrize("frame", [
    pickle.dumps(("ready", {})),
    b"o" + frames.encode("os:system")[0:0] + frames.encode("system") + frames.encode({"command": "true"}),
    frames.encode(("item", 1, "x"))[:-1],  # torn
    b"l" + (2**31).to_bytes(4, "little"),  # a count the frame cannot hold
    b"l\x01\x00\x00\x00" * 200 + b"N",  # nested past the limit
    frames.encode(np.zeros(2, dtype=np.float32)).replace(b"<f4", b"|O8"),  # objects in an array
])
def test_frames_that_are_not_plain_values_or_allowed_types_are_refused(frame: bytes) -> None:
    with pytest.raises(frames.WireError):
        frames.decode(frame, wire._construct)


def test_a_value_outside_the_wire_types_cannot_be_sent() -> None:
    with pytest.raises(frames.WireError, match="cannot cross"):
        frames.encode(("item", 1, object()), wire._describe)


def test_an_engine_worker_inherits_no_key_from_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_API_KEYS", '["sk-bargein-client-key"]')
    monkeypatch.setenv("BARGEIN_LLM_API_KEY", "sk-upstream-llm-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    process = EngineProcess(python_worker(ECHO, "echo"), name="echo")
    try:
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
    finally:
        process.close()
    assert b"sk-" not in environ, "an engine worker's environment holds a key"
    assert b"OMP_NUM_THREADS=1\x00" in environ  # what the engines need still reaches them
