"""Server settings, from command-line flags or ``BARGEIN_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EngineSet = Literal["default", "fake", "instant"]


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
    tts_engine: Literal["kokoro", "flite"] = "kokoro"
    max_message_bytes: int = 8 * 1024 * 1024
    """Client messages above this get an error event (the socket itself refuses 8x more)."""
    max_sessions: int = 256
    builtin_tools: bool = True
    """Offer bargein's own tools (clock, calendar, calculator, units) to sessions that bring no tools."""
    listen: bool = True
    """Classify every segment (query or noise) before answering or cutting a reply; off, any speech
    onset cancels the reply at once, as the OpenAI Realtime API does."""

    @property
    def local_only(self) -> bool:
        """True when no API key is configured."""
        return not self.api_keys
