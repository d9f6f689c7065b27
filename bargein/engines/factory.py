"""Build the engine set the settings ask for: every stage loaded here or connected to its remote deployment."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import TypeVar

from bargein.config import Settings
from bargein.engines.base import Engines, SpeechSynthesizer, VoiceActivityDetector
from bargein.engines.listen.silero_vad import SILERO_ONNX, SileroVad
from bargein.engines.listen.smart_turn import SmartTurn
from bargein.engines.listen.smart_turn_file import SMART_TURN_DISTRIBUTION, SMART_TURN_FILENAME
from bargein.engines.loaders import load_asr, load_llm, load_tts
from bargein.engines.remote.connect import RemoteStages, connect_remote_stages
from bargein.engines.resilience import make_resilient
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
VAD_ORIGIN = f"Silero VAD v5 ({SILERO_ONNX.distribution}, sha256 verified)"
TURN_ORIGIN = f"Smart Turn v3.2 ({SMART_TURN_FILENAME} from {SMART_TURN_DISTRIBUTION}, sha256 verified)"


def load_engines(settings: Settings) -> Engines:
    """Load (and warm up) every engine behind deadlines and health tracking; blocking (run it off the loop).

    Stages named in ``settings.ray_stages`` are not loaded here: they are Ray Serve deployments, and
    the engine for such a stage is a client of its deployment (checked at start-up).
    """
    engines = _load_raw(settings)
    fallback: SpeechSynthesizer | None = None
    if settings.engines == "default" and settings.tts_engine != "flite" and "tts" not in settings.ray_stages \
            and shutil.which("flite"):
        from bargein.engines.speak.flite_tts import FliteSynthesizer

        fallback = FliteSynthesizer()
        engines.description["tts"] += "; flite if it fails"
    return make_resilient(engines, fallback_tts=fallback)


def _load_raw(settings: Settings) -> Engines:
    description: dict[str, str] = {}
    remote = RemoteStages()
    if settings.ray_stages:
        remote = connect_remote_stages(settings, description)
    vad: VoiceActivityDetector = remote.vad or _timed_load(description, "vad", lambda: (SileroVad(), VAD_ORIGIN))
    asr = remote.asr or _timed_load(description, "asr", lambda: load_asr(settings, worker_process=settings.asr_process))
    llm = remote.llm or _timed_load(description, "llm",
                                    lambda: load_llm(settings, worker_process=settings.llm_process))
    tts = remote.tts or _timed_load(description, "tts", lambda: load_tts(settings, worker_process=settings.tts_process))
    # the end-of-turn model is small and always local; a missing or altered file stops start-up here
    turn = _timed_load(description, "turn", lambda: (SmartTurn(cpu_share=settings.turn_model_cpu_share), TURN_ORIGIN))
    vision = VisionSettings.resolve(settings.vision, remote_llm=settings.llm_url is not None,
                                    family=settings.vision_family, budget=settings.image_token_budget)
    see = Seeing.offline(vision) if settings.engines == "default" else Seeing(vision)  # fakes: no scene notes
    return Engines(vad, asr, llm, tts, turn, description=description, see=see)


def _timed_load(description: dict[str, str], stage: str, load: Callable[[], tuple[T, str]]) -> T:
    started = time.perf_counter()
    engine, what = load()
    fake = what == "fake"
    timed = not fake and stage not in ("vad", "turn")
    description[stage] = f"{what} (ready in {time.perf_counter() - started:.1f} s)" if timed else what
    if not fake:
        log.info("%s: %s", stage, description[stage])
    return engine
