"""The engines and server processes of ``bench/latency/vs_pipecat.py``: bargein and Pipecat on the same engines.

bargein runs as ``python -m bargein serve`` with the flags of :func:`engine_flags`; the Pipecat server
builds its engines with :func:`build_engines`, which is bargein's own engine factory with the same
settings. So the speech recogniser (Whisper tiny.en on faster-whisper, ``bargein.engines.transcribe.whisper_asr``)
and the synthesiser (Kokoro, ``bargein.engines.speak.kokoro_tts``) are the same classes with the same settings
on both sides, and the language model is the same local OpenAI-compatible server (``llama_cpp.server``).
:func:`services` starts the three processes on loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.listen.silero_vad import SILERO_ONNX
from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS
from bargein.values import GenerationOptions
from bargein.weights import verify_sha256

ROOT = Path(__file__).resolve().parents[2]
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


def engine_flags(llm_url: str, llm_model: str) -> list[str]:
    """The ``bargein serve`` flags that choose the engines; the Pipecat server builds from the same."""
    return ["--engines", "default", "--llm-url", llm_url, "--llm-model", llm_model, "--asr-model", "tiny.en",
            "--tts", "kokoro"]


def build_engines(llm_url: str, llm_model: str) -> Engines:
    """bargein's own engine factory, with the settings ``bargein serve`` gets from :func:`engine_flags`."""
    return load_engines(Settings(engines="default", llm_url=llm_url, llm_model=llm_model, asr_model="tiny.en",
                                 tts_engine="kokoro"))


def pipecat_silero_path() -> Path:
    """Pipecat's bundled Silero file, checked to be byte-identical to bargein's pinned one."""
    path = Path(str(resources.files("pipecat.audio.vad.data").joinpath("silero_vad.onnx")))
    verify_sha256(path, SILERO_ONNX.sha256, fix="install the pipecat-ai version named in bench/latency/vs_pipecat.py")
    return path


class Service:
    """A loopback server subprocess, ready when ``ready_url`` answers 200, stopped on exit."""

    def __init__(self, name: str, argv: Sequence[str], ready_url: str, timeout_s: float = 600.0) -> None:
        self.name, self.argv, self.ready_url, self.timeout_s = name, list(argv), ready_url, timeout_s
        self.log = Path(tempfile.mkstemp(prefix=f"vs-pipecat-{name}-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Service:
        import httpx

        with self.log.open("wb") as log:  # a file, not a pipe: a full pipe would block the server
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.ready_url, timeout=2).status_code == 200:
                    return self
            time.sleep(0.3)
        self.__exit__()
        sys.exit(f"{self.name} did not start; its log ({self.log}) ends with:\n"
                 f"{self.log.read_text(errors='replace')[-3000:]}")

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def services(args: argparse.Namespace) -> Iterator[dict[str, int]]:
    """The shared LLM server, bargein and the Pipecat pipeline; yields each system's port."""
    from bargein.engines.think.llama_llm import default_threads
    from bargein.engines.think.llm_models import resolve_gguf
    from bench.harness.realtime_harness import free_port

    llm_port, ports = free_port(), {"bargein": free_port(), "pipecat": free_port()}
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    bargein = [sys.executable, "-m", "bargein", "serve", *engine_flags(llm_url, args.llm), "--host", "127.0.0.1",
               "--port", str(ports["bargein"]), "--log-level", "warning"]
    threads = str(default_threads())  # bargein's own llama.cpp policy: OpenMP threads must not spin on 2 cores
    llm = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve_gguf(args.llm)), "--host",
           "127.0.0.1", "--port", str(llm_port), "--n_ctx", "2048", "--n_threads", threads,
           "--n_threads_batch", threads, "--model_alias", args.llm]
    with Service("llm", llm, f"{llm_url}/models") as llm_server, \
            Service("bargein", bargein, f"http://127.0.0.1:{ports['bargein']}/healthz"), \
            Service("pipecat", [sys.executable, "-m", "bench.latency.pipecat_server", "--port", str(ports["pipecat"]),
                                "--stop-secs", str(args.pipecat_stop_secs), "--llm-url", llm_url,
                                "--llm-model", args.llm, *(["--smart-turn"] if args.pipecat_smart_turn else [])],
                    f"http://127.0.0.1:{ports['pipecat']}/healthz") as pipecat:
        print(f"llm: {args.llm} on llama_cpp.server ({llm_server.log}); pipecat log {pipecat.log}", flush=True)
        yield ports
