"""The session configuration the client shapes with ``session.update`` (OpenAI Realtime GA names).

Defaults are the OpenAI ones: pcm16 at 24 kHz both ways, ``server_vad`` 0.5 / 300 ms / 500 ms, audio out.
Fields we accept but do not act on (tracing, ...) are kept so the session echoes them back. Tools and
``tool_choice`` are checked here (see :mod:`bargein.protocol.tool_items`), so a malformed tool definition
is refused by ``session.update`` with an error naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bargein.audio.codecs import AudioFormat
from bargein.languages import ENGLISH, LANGUAGES, language, language_code
from bargein.protocol.client_events import OutputTokens
from bargein.protocol.errors import ProtocolError
from bargein.protocol.tool_items import validate_tool_choice, validate_tools
from bargein.protocol.wire_formats import PcmFormat, WireFormat, to_audio_format


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerVad(_Strict):
    """Turn detection from voice activity: a threshold, padding before onset, silence that ends a turn."""

    type: Literal["server_vad"] = "server_vad"
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=5_000)
    silence_duration_ms: int = Field(500, ge=0, le=10_000)
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = Field(None, ge=5_000, le=30_000)


class SemanticVad(_Strict):
    """Turn detection that waits longer after an incomplete sentence (eagerness sets how long)."""

    type: Literal["semantic_vad"] = "semantic_vad"
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    create_response: bool = True
    interrupt_response: bool = True


TurnDetection = Annotated[ServerVad | SemanticVad, Field(discriminator="type")]


class InputTranscription(BaseModel):
    """Which recogniser transcribes the input; our engine is fixed, the fields are echoed."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class NoiseReduction(BaseModel):
    """Input noise suppression (RNNoise) before the VAD and the transcriber; null turns it off.

    Both types run the same RNNoise model, which is trained on close and distant talkers alike.
    ``strength`` is accepted and echoed, but RNNoise always suppresses at full strength.
    """

    model_config = ConfigDict(extra="ignore")
    type: Literal["near_field", "far_field"] | None = None
    strength: float | None = Field(default=None, ge=0.0)


class AudioInput(_Strict):
    """Input audio: wire format, transcription, turn detection."""

    format: WireFormat = Field(default_factory=PcmFormat)
    transcription: InputTranscription | None = Field(default_factory=InputTranscription)
    noise_reduction: NoiseReduction | None = None
    turn_detection: TurnDetection | None = Field(default_factory=lambda: ServerVad())


class AudioOutput(_Strict):
    """Output audio: wire format, voice, speed."""

    format: WireFormat = Field(default_factory=PcmFormat)
    voice: str = "alloy"
    speed: float = Field(1.0, ge=0.25, le=1.5)


class AudioConfig(_Strict):
    """Both directions of audio."""

    input: AudioInput = Field(default_factory=AudioInput)
    output: AudioOutput = Field(default_factory=lambda: AudioOutput())


DEFAULT_INSTRUCTIONS = ENGLISH.instructions
_DEFAULT_INSTRUCTIONS = frozenset(row.instructions for row in LANGUAGES.values())


class RetentionRatio(BaseModel):
    """Truncate a history that does not fit by keeping only this fraction of it (fewer, larger cuts)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["retention_ratio"]
    retention_ratio: float = Field(ge=0.0, le=1.0)
    token_limits: dict[str, int] | None = None
    """Accepted and echoed."""


Truncation = Literal["auto", "disabled"] | RetentionRatio


def _audio_only() -> list[Literal["audio", "text"]]:
    return ["audio"]


class SessionConfig(BaseModel):
    """The whole session, as sent in ``session.created`` / ``session.updated``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["realtime", "transcription"] = "realtime"
    """``transcription``: a transcription-only session (turns are transcribed, never answered)."""
    model: str = "bargein"
    instructions: str = Field(DEFAULT_INSTRUCTIONS, max_length=256 * 1024)
    output_modalities: list[Literal["audio", "text"]] = Field(default_factory=_audio_only, min_length=1, max_length=1)
    audio: AudioConfig = Field(default_factory=AudioConfig)
    max_output_tokens: OutputTokens = "inf"
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=128)
    tracing: Any = None
    truncation: Truncation = "auto"
    """How a history longer than the model's context is cut (the embedded model honours it)."""
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = None
    prompt: Any = None
    parallel_tool_calls: bool | None = None
    """Accepted and echoed: the embedded model makes one call per turn anyway."""
    reasoning: Any = None
    image_token_budget: int | None = Field(None, ge=0, le=1_000_000)
    """bargein's own: the image tokens one turn may spend on a vision model (None: the server's
    ``--image-token-budget``); see docs/seeing.md."""
    memory: bool | None = None
    """bargein's own: ``false`` turns long-term memory off for this session (None: on where the server has it);
    see docs/memory.md."""

    @field_validator("tools", mode="before")
    @classmethod
    def _checked_tools(cls, value: Any) -> list[dict[str, Any]]:
        try:
            return validate_tools(value)
        except ProtocolError as error:
            raise ValueError(error.message) from None

    @model_validator(mode="after")
    def _checked_tool_choice(self) -> SessionConfig:
        try:
            self.tool_choice = validate_tool_choice(self.tool_choice, self.tools)
        except ProtocolError as error:
            raise ValueError(error.message) from None
        return self

    @classmethod
    def for_language(cls, code: str | None, **fields: Any) -> SessionConfig:
        """A new session's config speaking ``code`` (the server's ``--language``): its transcription
        language and that language's default instructions; English is the plain default."""
        config = cls(**fields)
        if language_code(code) in (None, "en"):
            return config
        return config.updated({"audio": {"input": {"transcription": {"language": code}}}})

    @property
    def language(self) -> str | None:
        """The session's language code (``zh`` for ``zh-CN``), or None when the recogniser detects it."""
        transcription = self.audio.input.transcription
        return language_code(transcription.language) if transcription is not None else None

    def updated(self, patch: dict[str, Any]) -> SessionConfig:
        """A new config with ``patch`` merged in depth (nested objects merge, lists and scalars replace).

        A change of language brings that language's default instructions, unless the client has set
        instructions of its own (now or before).
        """
        merged = _deep_merge(self.model_dump(mode="json"), patch)
        config = SessionConfig.model_validate(merged)
        if (config.language != self.language and "instructions" not in patch
                and config.instructions in _DEFAULT_INSTRUCTIONS):
            config = config.model_copy(update={"instructions": language(config.language).instructions})
        return config

    def truncation_options(self) -> dict[str, Any]:
        """The ``truncate`` and ``retention_ratio`` fields of this session's generation options."""
        if isinstance(self.truncation, RetentionRatio):
            return {"truncate": True, "retention_ratio": self.truncation.retention_ratio}
        return {"truncate": self.truncation != "disabled", "retention_ratio": None}

    @property
    def input_format(self) -> AudioFormat:
        """Codec of client audio."""
        return to_audio_format(self.audio.input.format)

    @property
    def output_format(self) -> AudioFormat:
        """Codec of agent audio."""
        return to_audio_format(self.audio.output.format)

    def wire(self) -> dict[str, Any]:
        """The JSON object of ``session.created`` / ``session.updated``.

        A transcription session shows only the fields of the GA transcription session object.
        """
        body = self.model_dump(mode="json", exclude_none=True)
        if self.type == "transcription":
            audio_input = {key: value for key, value in body["audio"]["input"].items()}
            return {key: value for key, value in (("type", "transcription"), ("audio", {"input": audio_input}),
                                                  ("include", body.get("include"))) if value is not None}
        return body


def _deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in patch.items():
        if (isinstance(value, dict) and isinstance(result.get(key), dict)
                and value.get("type", result[key].get("type")) != result[key].get("type")):
            # a new type (format, turn detection) starts from its own defaults, not the old type's fields
            result[key] = value
            continue
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = value
    return result
