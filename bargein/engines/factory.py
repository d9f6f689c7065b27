"""Build the engine set the settings ask for."""

from __future__ import annotations

import logging

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.silero_vad import SILERO_ONNX, SileroVad

log = logging.getLogger(__name__)


def load_engines(settings: Settings) -> Engines:
    """Load (and warm up) every engine; blocking, so the server runs it off the event loop."""
    vad = SileroVad()
    vad_origin = f"Silero VAD v5 ({SILERO_ONNX.distribution}, sha256 verified)"
    if settings.engines in ("fake", "instant"):
        from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer

        delay = 0.0 if settings.engines == "instant" else 0.01
        return Engines(
            vad, FakeRecognizer(delay_s=delay), FakeLanguageModel(token_delay_s=delay),
            FakeSynthesizer(delay_s=delay),
            description={"vad": vad_origin, "asr": "fake", "llm": "fake", "tts": "fake"},
        )
    return _load_default(settings, vad, vad_origin)


def _load_default(settings: Settings, vad: SileroVad, vad_origin: str) -> Engines:
    raise NotImplementedError("the embedded default models are wired in with the models issue")
