"""The engines bargein and the Pipecat pipeline share in ``bench/vs_pipecat.py``, and bargein's launcher.

Both server processes build their engines with :func:`build_engines`, so the speech recogniser and the
synthesiser are the same classes with the same settings on both sides, and the language model is the
same local OpenAI-compatible server. While bargein's factory cannot build its default engines yet (it
raises ``NotImplementedError`` until the models issue wires them), a fallback builds them here from the
same packaged weights: Whisper tiny.en through faster-whisper, Kokoro (hibari-tts), Silero VAD.

    python -m bench.vs_pipecat_engines --port 8001 --llm-url http://127.0.0.1:8080/v1 --llm-model smollm2

runs ``bargein serve`` (the real command-line entry point) with :func:`build_engines` as its loader.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bargein.config import Settings
from bargein.engines.base import Engines, Float32Audio, GenerationOptions, Transcript
from bargein.engines.silero_vad import SILERO_ONNX
from bargein.engines.weights import verify_sha256
from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS

INSTRUCTIONS = DEFAULT_INSTRUCTIONS
"""The system prompt of both systems (bargein's default session instructions)."""
MAX_OUTPUT_TOKENS = 80
"""Reply length cap of both systems: keeps the run short; first audio does not depend on it."""
TEMPERATURE = GenerationOptions().temperature
"""Sampling temperature of both systems: what bargein sends (it is not settable over the protocol)."""
ENDPOINT_SILENCE_MS = 500
"""Silence that ends a user turn, on both sides (bargein's ``server_vad`` default)."""
VAD_THRESHOLD = 0.5
"""Speech probability that counts as speech, on both sides (bargein's ``server_vad`` default)."""


class FasterWhisperRecognizer:
    """Whisper tiny.en on faster-whisper (int8, greedy), one worker thread: the fallback recogniser.

    Used only while bargein's factory has no default engines; its settings are those a latency-minded
    deployment would pick (greedy decoding, no timestamps, no conditioning on earlier text).
    """

    def __init__(self, model_dir: Path, *, threads: int = 2) -> None:
        from faster_whisper import WhisperModel

        self.model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-whisper")
        self._run(np.zeros(16_000, np.float32), "en", None)  # warm-up: the first call allocates

    def _run(self, audio: Float32Audio, language: str | None, prompt: str | None) -> Transcript:
        segments, _info = self.model.transcribe(
            audio, language=language or "en", beam_size=1, best_of=1, temperature=0.0,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False, initial_prompt=prompt)
        parts = list(segments)  # decoding is lazy: consume it here, on the worker thread
        text = " ".join(part.text.strip() for part in parts).strip()
        no_speech = max((part.no_speech_prob for part in parts), default=1.0)
        logprob = float(np.mean([part.avg_logprob for part in parts])) if parts else 0.0
        return Transcript(text, no_speech_prob=no_speech, avg_logprob=logprob)

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Recognise a whole 16 kHz clip on the worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._run, audio, language, prompt)

    async def aclose(self) -> None:
        """Stop the worker thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _fallback_engines(settings: Settings) -> Engines:
    from bargein.engines.asr_models import resolve_model
    from bargein.engines.kokoro_tts import load_kokoro
    from bargein.engines.openai_llm import OpenAICompatibleLanguageModel
    from bargein.engines.silero_vad import SileroVad

    if not settings.llm_url:
        raise SystemExit("the comparison needs --llm-url (the shared OpenAI-compatible server)")
    model_dir = resolve_model(settings.asr_model)
    tts = load_kokoro()
    return Engines(
        SileroVad(), FasterWhisperRecognizer(model_dir.path),
        OpenAICompatibleLanguageModel(settings.llm_url, settings.llm_model, settings.llm_api_key),
        tts,
        description={"vad": f"Silero VAD ({SILERO_ONNX.distribution}, sha256 verified)",
                     "asr": f"faster-whisper {model_dir.origin} (bench fallback: int8, greedy)",
                     "llm": f"{settings.llm_model} at {settings.llm_url}", "tts": tts.description},
    )


def build_engines(settings: Settings) -> Engines:
    """bargein's own default engines when its factory builds them, else the fallback above."""
    from bargein.engines.factory import load_engines

    try:
        engines = load_engines(settings)
        engines.description["origin"] = "bargein's engine factory"
    except NotImplementedError:
        engines = _fallback_engines(settings)
        engines.description["origin"] = "bench fallback (bargein's factory has no default engines yet)"
    return engines


def engine_settings(llm_url: str, llm_model: str) -> Settings:
    """The settings both processes build their engines from."""
    return Settings(engines="default", llm_url=llm_url, llm_model=llm_model, asr_model="tiny.en",
                    tts_engine="kokoro")


def pipecat_silero_path() -> Path:
    """Pipecat's bundled Silero file, checked to be byte-identical to bargein's pinned one."""
    path = Path(str(resources.files("pipecat.audio.vad.data").joinpath("silero_vad.onnx")))
    verify_sha256(path, SILERO_ONNX.sha256, fix="install the pipecat-ai version named in docs/benchmarks.md")
    return path


def _serve_bargein(argv: list[str]) -> None:
    """``bargein serve`` through its real entry point, with :func:`build_engines` as the loader."""
    import bargein.cli

    parser = argparse.ArgumentParser(description="bargein serve for bench/vs_pipecat.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-url", required=True)
    parser.add_argument("--llm-model", required=True)
    args = parser.parse_args(argv)

    def loader(settings: Settings) -> Engines:
        engines = build_engines(settings)
        for stage, origin in engines.description.items():
            print(f"bargein {stage}: {origin}", flush=True)
        return engines

    patched: Any = bargein.cli
    patched.load_engines = loader  # the CLI looks its loader up by this name at call time
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(bargein.cli.main(["serve", "--engines", "default", "--host", "127.0.0.1", "--port", str(args.port),
                               "--llm-url", args.llm_url, "--llm-model", args.llm_model, "--asr-model", "tiny.en",
                               "--tts", "kokoro", "--log-level", "warning"]))


if __name__ == "__main__":
    _serve_bargein(sys.argv[1:])
