"""One voice per language: each clause goes to the synthesiser for the script it is written in."""

from __future__ import annotations

from collections.abc import AsyncIterator

from bargein.engines.base import SpeechSynthesizer
from bargein.languages import han_share
from bargein.values import CancelToken, SpeechChunk

MANDARIN_SHARE = 0.3
"""A clause with at least this share of Han characters among its words is Chinese (an English name
inside a Chinese sentence does not make it English)."""


class LanguageRouter:
    """A :class:`~bargein.engines.base.SpeechSynthesizer` that speaks Chinese clauses with the Mandarin
    voice and everything else with the default one (so a Mandarin session can still say an English
    sentence, and an English session is unchanged).

    The voice name goes to the default voice only (the Mandarin voice has one speaker, and speaks every
    session's Chinese clauses in it), so the names a session may ask for, in any language, are the default
    voice's: ``voices``, ``default_voice`` and ``resolve_voice`` are its (None when it lists none, and then
    any name is taken). A union with the Mandarin voice's names would take a name nothing speaks.
    """

    def __init__(self, default: SpeechSynthesizer, mandarin: SpeechSynthesizer) -> None:
        self.default = default
        self.mandarin = mandarin
        self.sample_rate = default.sample_rate

    @property
    def description(self) -> str:
        """Both voices, for the start-up banner."""
        names = (getattr(engine, "description", type(engine).__name__) for engine in (self.default, self.mandarin))
        return "; Mandarin: ".join(names)

    @property
    def queue_depth(self) -> int:
        """Syntheses waiting in either voice."""
        return sum(int(getattr(engine, "queue_depth", 0)) for engine in (self.default, self.mandarin))

    @property
    def voices(self) -> tuple[str, ...] | None:
        """The default voice's names (None: it lists none)."""
        own = getattr(self.default, "voices", None)
        return None if own is None else tuple(own)

    @property
    def voice_spellings(self) -> tuple[str, ...]:
        """The other names the default voice maps (Kokoro's ids, the OpenAI names), so a listing made of the
        router (a Ray replica's, with Mandarin on) resolves them as the router does."""
        return tuple(getattr(self.default, "voice_spellings", ()))

    @property
    def default_voice(self) -> str | None:
        """The default voice's fallback for a name it does not know (None where it has no ``resolve_voice``:
        then it takes its own names only, and so does :func:`~bargein.protocol.voices.unknown_voice`)."""
        default = getattr(self.default, "default_voice", None)
        return None if default is None or not hasattr(self.default, "resolve_voice") else str(default)

    def resolve_voice(self, voice: str | None) -> str | None:
        """The voice the default voice speaks for ``voice`` (None where it cannot say)."""
        resolve = getattr(self.default, "resolve_voice", None)
        return None if resolve is None else str(resolve(voice))

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
            closer = getattr(engine, "aclose", None)
            if closer is not None:
                await closer()
