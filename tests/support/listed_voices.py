"""A fake voice that lists its voices as Kokoro does (own names, Kokoro-style ids, Realtime names), to build
in a worker process or a replica: what its clients learn of its voices is checked against what it says."""

from __future__ import annotations

from bargein.engines.base import TTSCapabilities
from bargein.engines.fakes import FakeSynthesizer

IDS = {"af_heart": "heart", "af_kore": "kore", "am_fenrir": "fenrir"}


class ListingFakeVoice(FakeSynthesizer):
    """The fake tone, with two voices of its own (``heart``, the default, and ``kore``); ``am_fenrir`` is a
    spelling it knows of a voice it does not have, so it falls back to the default, as Kokoro's ids of voices
    not downloaded do."""

    voices = ("heart", "kore")
    default_voice = "heart"
    voice_spellings = (*IDS, "alloy", "fable")
    capabilities = TTSCapabilities(voices=voices, default_voice=default_voice, voice_spellings=voice_spellings)

    def resolve_voice(self, voice: str | None) -> str:
        """Its own names, its ids, ``fable`` (-> kore); anything else is the default."""
        key = (voice or "").strip().lower()
        if key in self.voices:
            return key
        named = IDS.get(key) or {"fable": "kore"}.get(key)
        return named if named in self.voices else self.default_voice
