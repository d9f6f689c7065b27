"""Everything a test server exchanges with its clients, recorded in process and checked against the GA types."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
from pydantic import TypeAdapter
from starlette.websockets import WebSocket

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer
from bargein.engines.listen.silero_vad import SileroVad
from bargein.session.realtime_session import RealtimeSession
from testdata.speech import librivox_clip, pcm16_24k

CLIENT_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeClientEvent)
SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


@dataclass
class Traffic:
    """The events sent by clients and by the server, in order."""

    client: list[dict[str, Any]] = field(default_factory=list)
    server: list[dict[str, Any]] = field(default_factory=list)

    def validate(self) -> None:
        """Every client event must be a ``RealtimeClientEvent``, every server event a ``RealtimeServerEvent``."""
        for event in self.client:
            CLIENT_EVENT.validate_python(event)
        for event in self.server:
            SERVER_EVENT.validate_python(event)

    def types(self, side: str = "server") -> list[str]:
        """The event types one side sent."""
        return [event["type"] for event in (self.server if side == "server" else self.client)]


def record_traffic(monkeypatch: pytest.MonkeyPatch) -> Traffic:
    """Record what every session of this process receives and what every WebSocket sends."""
    traffic = Traffic()
    send_text, handle_message = WebSocket.send_text, RealtimeSession.handle_message

    async def recorded_send(self: WebSocket, data: str) -> None:
        traffic.server.append(json.loads(data))
        await send_text(self, data)

    async def recorded_handle(self: RealtimeSession, raw: str | bytes) -> None:
        traffic.client.append(json.loads(raw))
        await handle_message(self, raw)

    monkeypatch.setattr(WebSocket, "send_text", recorded_send)
    monkeypatch.setattr(RealtimeSession, "handle_message", recorded_handle)
    return traffic


def weather_turn(tmp_path: Path) -> tuple[Engines, FakeLanguageModel, Path]:
    """Engines for a third-party client's spoken turn that calls ``get_weather`` for Paris, and the turn's
    audio (pcm16 24 kHz) in a file the client streams: real Silero VAD, named fakes for the rest."""
    llm = FakeLanguageModel(token_delay_s=0.005, calls={"young": ("get_weather", '{"city": "Paris"}')})
    engines = Engines(SileroVad(), FakeRecognizer(("he was not an ill disposed young man",)), llm,
                      FakeSynthesizer(ms_per_char=20, chunk_ms=100),
                      FakeEndOfTurn((0.99,)))  # the clients ask for semantic_vad: the server needs the model
    pcm_file = tmp_path / "turn.pcm"
    pcm_file.write_bytes(pcm16_24k(librivox_clip("0880"), silence_after_s=1.5))
    return engines, llm, pcm_file
