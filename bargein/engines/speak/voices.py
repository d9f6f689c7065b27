"""Which voice names a session or a response may ask for: those the server's synthesiser can speak.

Every synthesiser here maps the OpenAI Realtime voice names to voices of its own, and takes its own names
(Kokoro's ``heart``, ``af_heart``; flite's ``slt``). Any other name used to fall back to the default voice
without a word; now it is refused with an ``error`` naming the field and the voices there are.
"""

from __future__ import annotations

from bargein.engines.base import SpeechSynthesizer
from bargein.protocol.errors import ProtocolError

REALTIME_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin",
                             "cedar"})
"""The OpenAI Realtime voice names, which every synthesiser here maps to one of its own voices."""


def unknown_voice(voice: str, synthesiser: SpeechSynthesizer) -> str | None:
    """Why ``synthesiser`` cannot speak in ``voice`` (``None`` when it can, or when it cannot tell).

    A synthesiser declares its voices in ``capabilities.voices`` (and, where it takes other spellings of them,
    such as Kokoro's ids, a ``default_voice`` there and ``resolve_voice``); so does the client of one in a worker
    process or on a Ray replica (from what it said when ready: :mod:`bargein.engines.speak.voice_list`), and
    the by-language router (its default voice's). One without it (a fake) takes any name, as before.
    """
    key = voice.strip().lower()
    declared = synthesiser.capabilities
    own = declared.voices
    if key in REALTIME_VOICES or own is None:
        return None
    names = {str(name).lower() for name in own}
    if key in names:
        return None
    default = declared.default_voice
    if default is not None:
        resolved = synthesiser.resolve_voice(voice)
        # another spelling of one of its voices; one that resolves to the default is told from an unknown name
        # (which falls back to the default too) by ending in the voice's name, as Kokoro's ids do (af_heart)
        if resolved != default or key.rpartition("_")[2] == str(resolved).lower():
            return None
    return (f"unknown voice {voice!r}: this server speaks {', '.join(sorted(REALTIME_VOICES))} "
            f"(OpenAI names) and {', '.join(sorted(names)) or 'no voices of its own'}")


def check_voice(voice: str | None, synthesiser: SpeechSynthesizer, *, param: str, event_id: str | None) -> None:
    """Refuse ``voice`` (the field ``param``) with an ``invalid_value`` :class:`ProtocolError` when
    :func:`unknown_voice` says the synthesiser cannot speak in it."""
    if voice is None:
        return
    why = unknown_voice(voice, synthesiser)
    if why is not None:
        raise ProtocolError(why, code="invalid_value", param=param, event_id=event_id)
