"""Build the engine set the settings ask for."""

from __future__ import annotations

import logging
import shutil
import time

from bargein.config import Settings
from bargein.engines.base import Engines, LanguageModel, SpeechSynthesizer
from bargein.engines.listen.silero_vad import SILERO_ONNX, SileroVad
from bargein.engines.resilience import make_resilient

log = logging.getLogger(__name__)


def load_engines(settings: Settings) -> Engines:
    """Load (and warm up) every engine behind deadlines and health tracking; blocking (run it off the loop)."""
    engines = _load_raw(settings)
    fallback: SpeechSynthesizer | None = None
    if settings.engines == "default" and settings.tts_engine != "flite" and shutil.which("flite"):
        from bargein.engines.speak.flite_tts import FliteSynthesizer

        fallback = FliteSynthesizer()
        engines.description["tts"] += "; flite if it fails"
    return make_resilient(engines, fallback_tts=fallback)


def _load_raw(settings: Settings) -> Engines:
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
    asr = load_whisper(settings.asr_model)
    _timed(description, "asr", f"Whisper {settings.asr_model}: {asr.description}", started)

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
        if settings.llm_process:
            from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerSpec

            llm = ProcessLanguageModel(WorkerSpec("bargein.engines.think.llama_llm:load_llama", {"name": name}),
                                       name=name)
            _timed(description, "llm", f"{describe(name)} on llama.cpp, in a supervised worker process", started)
        else:
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
    return Engines(vad, asr, llm, tts, description=description)
