"""A synthesiser's voices, told to the clients of one that runs elsewhere (a worker process, a Ray replica).

The session refuses a voice name its synthesiser cannot speak (:func:`bargein.engines.speak.voices.check_voice`)
by reading the synthesiser's ``voices``, ``default_voice`` and ``resolve_voice``. A synthesiser in another
process has them only where it runs, and the check must answer at once, so the voice says them when it is
ready (:func:`voice_listing`: its names, its default, and what each spelling it knows resolves to), and
its client answers from that (:class:`ListedVoices`) exactly as the voice itself would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bargein.engines.base import SpeechSynthesizer, TTSCapabilities


def voice_listing(engine: SpeechSynthesizer) -> dict[str, Any]:
    """What a synthesiser served elsewhere tells its clients of its voices; ``{}`` when it lists none (a
    client then takes any name, as the synthesiser does).

    The spellings are its own names and those it declares in ``capabilities.voice_spellings`` (Kokoro's ids,
    the Realtime names it maps): each with the voice ``resolve_voice`` gives it, so the client resolves a name
    as the synthesiser would without asking it. A name in neither resolves to the default, as it does in
    the synthesiser. One without a ``default_voice`` takes its own names only, and is listed without a
    default, so :func:`~bargein.engines.speak.voices.unknown_voice` takes only those from its client too.
    """
    declared = engine.capabilities
    if declared.voices is None:
        return {}
    names = [str(name) for name in declared.voices]
    default = declared.default_voice
    spellings = dict.fromkeys([*names, *(str(name) for name in declared.voice_spellings)])
    if default is None:  # it takes its own names only: so must its clients
        return {"voices": names, "default_voice": None, "voice_names": {}}
    resolved = {name.strip().lower(): str(engine.resolve_voice(name)) for name in spellings}
    return {"voices": names, "default_voice": str(default), "voice_names": resolved}


class ListedVoices(SpeechSynthesizer):
    """The ``capabilities`` and ``resolve_voice`` of a synthesiser that runs elsewhere, read from the
    :func:`voice_listing` it sent (:meth:`_voice_listing`; None and empty: it lists none). A client lists it
    after the base that carries its work (so that base's ``queue_depth`` and ``worker`` are the ones read)."""

    def _voice_listing(self) -> Mapping[str, Any] | None:
        """The listing the synthesiser sent (a subclass reads it from where its client keeps it)."""
        raise NotImplementedError

    @property
    def voices(self) -> tuple[str, ...] | None:
        """The synthesiser's own voice names (None: it lists none, and any name is taken)."""
        names = (self._voice_listing() or {}).get("voices")
        return None if names is None else tuple(names)

    @property
    def default_voice(self) -> str | None:
        """The voice an unknown name falls back to."""
        default = (self._voice_listing() or {}).get("default_voice")
        return None if default is None else str(default)

    @property
    def capabilities(self) -> TTSCapabilities:
        """The voices and the default the synthesiser said it has."""
        return TTSCapabilities(voices=self.voices, default_voice=self.default_voice)

    def resolve_voice(self, voice: str | None) -> str | None:
        """The voice the synthesiser speaks for ``voice``, as its own ``resolve_voice`` says."""
        listing = self._voice_listing() or {}
        resolved: Mapping[str, str] = listing.get("voice_names") or {}
        key = (voice or "").strip().lower()
        return resolved.get(key, self.default_voice)
