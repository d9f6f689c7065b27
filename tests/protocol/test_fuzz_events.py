"""10,000 generated bad events, covering every client event type and every field, on one live connection.

Each event is a valid event of one type with one thing broken: a field of the wrong type, out of its
range, too long or too deep, an unknown field, an id nobody has, or a valid event the session's state
refuses (a commit with nothing buffered, a cancel with no reply). Every one must be answered with exactly
one ``error`` event that validates against the OpenAI schema, and the session must still work after.
Events are sent in pipelined batches, so the run takes seconds, not minutes.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.realtime_client import validate_server_event
from tests.support.server import running_server

EVENTS = 10_000
BATCH = 100
Mutation = Callable[[random.Random], dict[str, Any] | str]


def junk(rng: random.Random) -> Any:
    """A value of a type no field expects where it is put (never a string)."""
    return rng.choice([rng.randint(-10**9, 10**9), rng.random() * 1e6, True, False, [1, "x"], {"k": [None]}])


def deep(levels: int) -> dict[str, Any]:
    """An object nested ``levels`` deep."""
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def text(rng: random.Random, size: int = 12) -> str:
    """Random text, including characters JSON must escape."""
    return "".join(rng.choice("abcxyz \"\\\u00e9\u4e2d\n\t{}[]") for _ in range(rng.randint(0, size)))


def b64(data: bytes) -> str:
    """Base64 text of ``data``."""
    return base64.b64encode(data).decode()


def session(patch: dict[str, Any]) -> dict[str, Any]:
    """A ``session.update`` with ``patch``."""
    return {"type": "session.update", "session": patch}


def turn(patch: dict[str, Any]) -> dict[str, Any]:
    """A ``session.update`` of the input turn detection."""
    return session({"audio": {"input": {"turn_detection": {"type": "server_vad", **patch}}}})


def item(content: list[Any], **fields: Any) -> dict[str, Any]:
    """A ``conversation.item.create`` of a user message."""
    return {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content,
                                                          **fields}}


MUTATIONS: dict[str, Mutation] = {
    # not an event at all
    "malformed json": lambda r: '{"type": "session.update", ' + text(r),
    "json that is not an object": lambda r: json.dumps(r.choice([[1, 2], "text", 3, None])),
    "no type": lambda r: {"event_id": text(r)},
    "type of the wrong type": lambda r: {"type": junk(r)},
    "unknown type": lambda r: {"type": "x." + text(r)},
    "nested 100 deep": lambda r: {"type": r.choice(["session.update", "response.create"]), **deep(100)},
    "event_id too long": lambda r: {"type": "input_audio_buffer.clear", "event_id": "e" * r.randint(513, 70_000)},
    "event_id not a string": lambda r: {"type": "input_audio_buffer.clear", "event_id": junk(r)},
    "unknown top-level field": lambda r: {"type": r.choice(["input_audio_buffer.clear", "response.cancel",
                                                            "input_audio_buffer.commit"]), "x" + text(r): 1},
    # session.update, field by field
    "session not an object": lambda r: {"type": "session.update", "session": junk(r) if r.random() < .5 else text(r)},
    "session unknown field": lambda r: session({"zz_" + text(r, 5): 1}),
    "session.type": lambda r: session({"type": text(r) + "!"}),
    "session.model": lambda r: session({"model": junk(r)}),
    "session.instructions": lambda r: session({"instructions": junk(r)}),
    "session.instructions too long": lambda r: session({"instructions": "i" * (256 * 1024 + r.randint(1, 99))}),
    "session.output_modalities": lambda r: session({"output_modalities": r.choice([["video"], [], "audio", [1]])}),
    "session.max_output_tokens": lambda r: session({"max_output_tokens": r.choice(["many", [1], {"n": 1}])}),
    "session.tools too deep": lambda r: session({"tools": [deep(r.randint(40, 300))]}),
    "session.tools too many": lambda r: session({"tools": [{}] * r.randint(129, 300)}),
    "session.include": lambda r: session({"include": junk(r)}),
    "audio not an object": lambda r: session({"audio": junk(r)}),
    "audio unknown field": lambda r: session({"audio": {"sideways": {}}}),
    "audio.input.format.type": lambda r: session({"audio": {"input": {"format": {"type": "audio/" + text(r)}}}}),
    "audio.input.format.rate": lambda r: session({"audio": {"input": {"format": {"type": "audio/pcm",
                                                                                 "rate": r.randint(1, 23_999)}}}}),
    "audio.output.format.type": lambda r: session({"audio": {"output": {"format": {"type": junk(r)}}}}),
    "audio.output.voice": lambda r: session({"audio": {"output": {"voice": junk(r)}}}),
    "audio.output.speed": lambda r: session({"audio": {"output": {"speed": r.choice([0.0, 9.0, -1.0, "fast"])}}}),
    "audio.input.noise_reduction": lambda r: session({"audio": {"input": {"noise_reduction": {"type": text(r)}}}}),
    "audio.input.transcription": lambda r: session({"audio": {"input": {"transcription": r.choice(
        [{"model": junk(r)}, {"language": [text(r)]}, {"prompt": junk(r)}, 5, "whisper", [1]])}}}),
    "turn_detection.type": lambda r: session({"audio": {"input": {"turn_detection": {"type": text(r) + "_vad"}}}}),
    "turn_detection.threshold": lambda r: turn({"threshold": r.choice([1.5, -0.1, "high", [0.5]])}),
    "turn_detection.prefix_padding_ms": lambda r: turn({"prefix_padding_ms": r.choice([-1, 99_999, "x"])}),
    "turn_detection.silence_duration_ms": lambda r: turn({"silence_duration_ms": r.choice([-5, 10**6, None])}),
    "turn_detection.create_response": lambda r: turn({"create_response": r.choice(["maybe", [True], {"a": 1}, 2])}),
    "turn_detection.interrupt_response": lambda r: turn({"interrupt_response": r.choice(["perhaps", [False], 7])}),
    "turn_detection.idle_timeout_ms": lambda r: turn({"idle_timeout_ms": r.choice([10, 10**7, "soon"])}),
    "semantic_vad.eagerness": lambda r: session({"audio": {"input": {"turn_detection": {
        "type": "semantic_vad", "eagerness": text(r) + "!"}}}}),
    # the input audio buffer
    "append audio not a string": lambda r: {"type": "input_audio_buffer.append", "audio": junk(r)},
    "append audio not base64": lambda r: {"type": "input_audio_buffer.append", "audio": "%" + text(r)},
    "append odd-length pcm16": lambda r: {"type": "input_audio_buffer.append",
                                          "audio": b64(r.randbytes(2 * r.randint(0, 40) + 1))},
    "append without audio": lambda r: {"type": "input_audio_buffer.append"},
    "commit with nothing buffered": lambda r: {"type": "input_audio_buffer.commit", "event_id": text(r)},
    "clear with a stray field": lambda r: {"type": "input_audio_buffer.clear", "audio": text(r)},
    # conversation items
    "item missing": lambda r: {"type": "conversation.item.create"},
    "item.type": lambda r: {"type": "conversation.item.create", "item": {
        "type": text(r) + "?", "role": "user", "content": [{"type": "input_text", "text": ""}]}},
    "item.role": lambda r: {"type": "conversation.item.create", "item": {
        "type": "message", "role": r.choice(["robot", "", junk(r)]),
        "content": [{"type": "input_text", "text": "x"}]}},
    "item.id too long": lambda r: item([{"type": "input_text", "text": "x"}], id="i" * r.randint(65, 500)),
    "item.status": lambda r: item([{"type": "input_text", "text": "x"}], status=text(r) + "?"),
    "item.content empty": lambda r: item([]),
    "item.content too many parts": lambda r: item([{"type": "input_text", "text": "x"}] * r.randint(65, 90)),
    "content part type": lambda r: item([{"type": "input_" + text(r) + "?", "text": "x"}]),
    "input_text.text": lambda r: item([{"type": "input_text", "text": junk(r)}]),
    "input_audio.audio": lambda r: item([{"type": "input_audio", "audio": "%%" + text(r)}]),
    "input_audio.transcript": lambda r: item([{"type": "input_audio", "transcript": junk(r)}]),
    "input_image.image_url": lambda r: item([{"type": "input_image", "image_url": "http://x/" + text(r)}]),
    "input_image.detail": lambda r: item([{"type": "input_image", "image_url": "data:image/png;base64,AA",
                                           "detail": text(r) + "!"}]),
    "previous_item_id unknown": lambda r: {**item([{"type": "input_text", "text": "x"}]),
                                           "previous_item_id": "nope_" + text(r)},
    "previous_item_id too long": lambda r: {**item([{"type": "input_text", "text": "x"}]),
                                            "previous_item_id": "p" * r.randint(129, 4000)},
    "truncate unknown item": lambda r: {"type": "conversation.item.truncate", "item_id": "nope" + text(r),
                                        "content_index": 0, "audio_end_ms": r.randint(0, 9999)},
    "truncate content_index": lambda r: {"type": "conversation.item.truncate", "item_id": "x",
                                         "content_index": r.choice([-1, "0", None]), "audio_end_ms": 1},
    "truncate audio_end_ms": lambda r: {"type": "conversation.item.truncate", "item_id": "x",
                                        "content_index": 0, "audio_end_ms": r.choice([-3, "end", [1]])},
    "truncate item_id too long": lambda r: {"type": "conversation.item.truncate", "item_id": "t" * 200,
                                            "content_index": 0, "audio_end_ms": 0},
    "delete unknown item": lambda r: {"type": "conversation.item.delete", "item_id": "gone_" + text(r)},
    "delete item_id": lambda r: {"type": "conversation.item.delete", "item_id": junk(r)},
    # responses
    "response.output_modalities": lambda r: {"type": "response.create", "response": {
        "output_modalities": r.choice([["audio", "text"], ["smell"], []])}},
    "response.conversation": lambda r: {"type": "response.create", "response": {"conversation": text(r) + "!"}},
    "response.max_output_tokens": lambda r: {"type": "response.create", "response": {"max_output_tokens": "lots"}},
    "response.metadata": lambda r: {"type": "response.create", "response": {"metadata": {"k": junk(r)}}},
    "response.instructions": lambda r: {"type": "response.create", "response": {"instructions": junk(r)}},
    "response not an object": lambda r: {"type": "response.create", "response": r.choice([5, "x", [1], True])},
    "cancel with no reply": lambda r: {"type": "response.cancel", "event_id": text(r)},
    "cancel response_id": lambda r: {"type": "response.cancel", "response_id": junk(r)},
}


def generated(count: int, seed: int = 12) -> Iterator[tuple[str, str]]:
    """``count`` (mutation name, raw message) pairs, every mutation in turn, then at random."""
    rng = random.Random(seed)
    names = list(MUTATIONS)
    for i in range(count):
        name = names[i] if i < len(names) else rng.choice(names)
        message = MUTATIONS[name](rng)
        yield name, message if isinstance(message, str) else json.dumps(message)


@pytest.fixture(scope="module")
def connection() -> Iterator[ClientConnection]:
    engines = Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer())
    # the event-rate limit would (rightly) hold this client back: lift it for the fuzz
    with running_server(engines, Settings(events_per_s=1e6, event_burst=10**6)) as host, \
            connect(f"ws://{host}/v1/realtime?model=fuzz", max_size=None) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        yield ws


def test_ten_thousand_generated_bad_events_each_get_one_valid_error(connection: ClientConnection) -> None:
    batch: list[tuple[str, str]] = []
    answered: dict[str, int] = {}
    for pair in generated(EVENTS):
        batch.append(pair)
        if len(batch) == BATCH:
            _send_batch(connection, batch, answered)
            batch = []
    if batch:
        _send_batch(connection, batch, answered)
    assert sum(answered.values()) == EVENTS
    assert set(answered) == set(MUTATIONS)
    connection.send(json.dumps(session({"instructions": "still here"})))
    reply = json.loads(connection.recv(timeout=10))
    assert reply["type"] == "session.updated" and reply["session"]["instructions"] == "still here"


def _send_batch(ws: ClientConnection, batch: list[tuple[str, str]], answered: dict[str, int]) -> None:
    for _, raw in batch:
        ws.send(raw)
    for name, raw in batch:
        reply = json.loads(ws.recv(timeout=30))
        assert reply["type"] == "error", f"{name}: expected an error for {raw[:150]!r}, got {str(reply)[:300]}"
        validate_server_event(reply)
        assert len(json.dumps(reply)) < 2_000, f"{name}: an error event of {len(json.dumps(reply))} bytes"
        answered[name] = answered.get(name, 0) + 1
