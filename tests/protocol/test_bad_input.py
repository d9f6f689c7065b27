"""Bad input never kills a session: each malformed event gets one ``error`` event and the socket lives.

Runs against the real ASGI server over a real WebSocket; the fuzz part sends 2,000+ generated
malformed events on one connection and then proves the session still works.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from tests.support.realtime_client import validate_server_event
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # the real Silero VAD


@pytest.fixture(scope="module")
def connection() -> Iterator[ClientConnection]:
    engines = Engines(SileroVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    # the event-rate limit would (rightly) hold back a client this fast: lift it for the fuzz
    with running_server(engines, Settings(events_per_s=1e6, event_burst=10**6)) as host, \
            connect(f"ws://{host}/v1/realtime?model=fuzz", max_size=None) as ws:
        created = json.loads(ws.recv(timeout=10))
        assert created["type"] == "session.created"
        yield ws


def send_and_expect_error(ws: ClientConnection, message: str | bytes) -> dict[str, Any]:
    ws.send(message)
    reply = json.loads(ws.recv(timeout=10))
    validate_server_event(reply)
    assert reply["type"] == "error", f"expected an error for {message[:200]!r}, got {reply}"
    return reply


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CASES: list[tuple[str, dict[str, Any] | str, str]] = [
    ("malformed json", '{"type": "session.update", ', "invalid_json"),
    ("not an object", "[1, 2, 3]", "invalid_event"),
    ("no type", {"event_id": "e1"}, "invalid_event"),
    ("unknown type", {"type": "input_audio_buffer.explode", "event_id": "e2"}, "invalid_event_type"),
    ("wrong field type", {"type": "conversation.item.truncate", "event_id": "e3", "item_id": "x",
                          "content_index": 0, "audio_end_ms": "soon"}, "invalid_value"),
    ("non-base64 audio", {"type": "input_audio_buffer.append", "event_id": "e4", "audio": "%%%not-b64"},
     "invalid_audio"),
    ("odd-length pcm16", {"type": "input_audio_buffer.append", "event_id": "e5", "audio": b64(b"\x01\x02\x03")},
     "invalid_audio"),
    ("unknown item", {"type": "conversation.item.delete", "event_id": "e6", "item_id": "item_nope"},
     "item_not_found"),
    ("truncate unknown item", {"type": "conversation.item.truncate", "event_id": "e7", "item_id": "nope",
                               "content_index": 0, "audio_end_ms": 10}, "item_not_found"),
    ("commit empty buffer", {"type": "input_audio_buffer.commit", "event_id": "e8"},
     "input_audio_buffer_commit_empty"),
    ("cancel with nothing active", {"type": "response.cancel", "event_id": "e9"}, "response_cancel_not_active"),
    ("bad session value", {"type": "session.update", "event_id": "e10",
                           "session": {"audio": {"input": {"turn_detection": {"type": "server_vad",
                                                                              "threshold": 7}}}}},
     "invalid_value"),
    ("bad audio format", {"type": "session.update", "event_id": "e11",
                          "session": {"audio": {"input": {"format": {"type": "audio/mp3"}}}}}, "invalid_value"),
    ("image that is not a data url", {"type": "conversation.item.create", "event_id": "e12",
                                      "item": {"type": "message", "role": "user",
                                               "content": [{"type": "input_image",
                                                            "image_url": "http://example.invalid/x.png"}]}},
     "invalid_value"),
]


@pytest.mark.parametrize(("name", "message", "code"), CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_bad_input_gets_a_clear_error(connection: ClientConnection, name: str,
                                                    message: dict[str, Any] | str, code: str) -> None:
    raw = message if isinstance(message, str) else json.dumps(message)
    reply = send_and_expect_error(connection, raw)
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["code"] == code
    if isinstance(message, dict) and "event_id" in message:
        assert reply["error"]["event_id"] == message["event_id"]


def test_an_oversized_message_gets_an_error_and_the_session_lives(connection: ClientConnection) -> None:
    huge = json.dumps({"type": "input_audio_buffer.append", "event_id": "big", "audio": "A" * (9 * 1024 * 1024)})
    reply = send_and_expect_error(connection, huge)
    assert reply["error"]["code"] == "message_too_large"
    assert_alive(connection)


def test_the_audio_buffer_cap_refuses_appends_past_15_mib() -> None:
    engines = Engines(SileroVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    unlimited = Settings(events_per_s=1e6, event_burst=10**6)  # 4 MiB appends in a row would be held back
    with running_server(engines, unlimited) as host, connect(f"ws://{host}/v1/realtime", max_size=None) as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.updated"
        chunk = b64(bytes(4 * 1024 * 1024))  # 4 MiB of silence per append
        for _ in range(3):
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        reply = send_and_expect_error(ws, json.dumps({"type": "input_audio_buffer.append", "event_id": "cap",
                                                      "audio": chunk}))
        assert reply["error"]["code"] == "input_audio_buffer_full"
        # the 12 MiB already buffered are kept: a commit succeeds
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "input_audio_buffer.committed"


def assert_alive(ws: ClientConnection) -> None:
    ws.send(json.dumps({"type": "session.update", "event_id": "alive", "session": {"instructions": "be brief"}}))
    reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] == "session.updated"
    assert reply["session"]["instructions"] == "be brief"


# --- fuzzing --------------------------------------------------------------------------------------------

KNOWN_TYPES = ["session.update", "input_audio_buffer.append", "conversation.item.create",
               "conversation.item.truncate", "conversation.item.delete", "response.cancel"]
junk_values = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                        st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                              max_size=2))
malformed_json = st.text(max_size=60).filter(lambda s: not _is_json_object(s))
unknown_type = st.builds(lambda t, eid: {"type": "x." + t, "event_id": eid}, st.text(max_size=20),
                         st.text(max_size=10))
wrong_field = st.builds(
    lambda t, v, eid: {"type": t, "event_id": eid, **_wrong_fields(t, v)},
    st.sampled_from(KNOWN_TYPES), junk_values, st.text(min_size=1, max_size=12))
bad_audio = st.builds(lambda data, eid: {"type": "input_audio_buffer.append", "event_id": eid,
                                         "audio": b64(data)[:-1] + "!"},
                      st.binary(min_size=1, max_size=64), st.text(max_size=10)) | st.builds(
    lambda data, eid: {"type": "input_audio_buffer.append", "event_id": eid, "audio": b64(data + b"\x00")},
    st.binary(max_size=64).map(lambda d: d[: len(d) // 2 * 2]), st.text(max_size=10))
unknown_items = st.builds(lambda item, eid: {"type": "conversation.item.delete", "item_id": "missing_" + item,
                                             "event_id": eid}, st.text(max_size=20), st.text(max_size=10))
malformed = st.one_of(malformed_json, unknown_type, wrong_field, bad_audio, unknown_items)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _wrong_fields(event_type: str, junk: Any) -> dict[str, Any]:
    # a value of the wrong type in a required field of each event type
    fields = {"session.update": {"session": junk if not isinstance(junk, dict) else [junk]},
              "input_audio_buffer.append": {"audio": junk},
              "conversation.item.create": {"item": {"type": "message", "role": junk, "content": []}},
              "conversation.item.truncate": {"item_id": "a", "content_index": "zero", "audio_end_ms": junk},
              "conversation.item.delete": {"item_id": junk},
              "response.cancel": {"response_id": [junk]}}
    return fields[event_type]


def test_fuzz_every_malformed_event_gets_an_error_and_the_session_still_works(connection: ClientConnection) -> None:
    sent = 0

    @settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(message=malformed)
    def one_malformed_event(message: Any) -> None:
        nonlocal sent
        raw = message if isinstance(message, str) else json.dumps(message)
        reply = send_and_expect_error(connection, raw)
        sent += 1
        if isinstance(message, dict) and isinstance(message.get("event_id"), str):
            assert reply["error"]["event_id"] == message["event_id"]

    one_malformed_event()
    assert sent >= 2000
    assert_alive(connection)
