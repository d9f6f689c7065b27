"""One voice per language: each clause goes to the synthesiser for the script it is written in."""

from __future__ import annotations

from collections.abc import AsyncIterator

from bargein.engines.base import SpeechSynthesizer, TTSCapabilities
from bargein.languages import han_share
from bargein.values import CancelToken, SpeechChunk

MANDARIN_SHARE = 0.3
"""A clause with at least this share of Han characters among its words is Chinese (an English name
inside a Chinese sentence does not make it English)."""


class LanguageRouter(SpeechSynthesizer):
    """A :class:`~bargein.engines.base.SpeechSynthesizer` that speaks Chinese clauses with the Mandarin
    voice and everything else with the default one (so a Mandarin session can still say an English
    sentence, and an English session is unchanged).

    The voice name goes to the default voice only (the Mandarin voice has one speaker, and speaks every
    session's Chinese clauses in it), so the names a session may ask for, in any language, are the default
    voice's: ``capabilities`` and ``resolve_voice`` are its (no voices when it lists none, and then any name
    is taken). A union with the Mandarin voice's names would take a name nothing speaks.
    """

    def __init__(self, default: SpeechSynthesizer, mandarin: SpeechSynthesizer, *,
                 description: str | None = None, mandarin_description: str | None = None) -> None:
        self.default = default
        self.mandarin = mandarin
        self.sample_rate = default.sample_rate
        self._description = description or type(default).__name__
        self.mandarin_description = mandarin_description or type(mandarin).__name__

    @property
    def description(self) -> str:
        """Both voices, for the start-up banner."""
        return f"{self._description}; Mandarin: {self.mandarin_description}"

    @property
    def queue_depth(self) -> int:
        """Syntheses waiting in either voice."""
        return (self.default.queue_depth or 0) + (self.mandarin.queue_depth or 0)

    @property
    def capabilities(self) -> TTSCapabilities:
        """The default voice's names, its fallback for a name it does not know and its other spellings (so a
        listing made of the router, a Ray replica's with Mandarin on, resolves them as the router does)."""
        return self.default.capabilities

    def resolve_voice(self, voice: str | None) -> str | None:
        """The voice the default voice speaks for ``voice`` (None where it cannot say)."""
        resolved = self.default.resolve_voice(voice)
        return None if resolved is None else str(resolved)

    def voice_for(self, text: str) -> SpeechSynthesizer:
        """The synthesiser that speaks ``text``."""
        return self.mandarin if han_share(text) >= MANDARIN_SHARE else self.default

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` with the voice for its script, at ``speed`` times its pace."""
        engine = self.voice_for(text)
        async for chunk in engine.synthesize(text, voice=voice if engine is self.default else None, cancel=cancel,
                                             speed=speed):
            yield chunk

    async def aclose(self) -> None:
        """Close both voices."""
        for engine in (self.default, self.mandarin):
            await engine.aclose()
