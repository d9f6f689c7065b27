"""Which voice names a session or a response may ask for: those the server's synthesiser can speak.

Every synthesiser here maps the OpenAI Realtime voice names to voices of its own, and takes its own names
(Kokoro's ``heart``, ``af_heart``; flite's ``slt``). Any other name used to fall back to the default voice
without a word; now it is refused with an ``error`` naming the field and the voices there are.
"""

from __future__ import annotations

from collections.abc import Callable

from bargein.protocol.errors import ProtocolError

REALTIME_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin",
                             "cedar"})
"""The OpenAI Realtime voice names, which every synthesiser here maps to one of its own voices."""


def unknown_voice(voice: str, synthesiser: object) -> str | None:
    """Why ``synthesiser`` cannot speak in ``voice`` (``None`` when it can, or when it cannot tell).

    A synthesiser tells its voices by a ``voices`` tuple (and, where it takes other spellings of them,
    such as Kokoro's ids, by ``resolve_voice`` and ``default_voice``); so does the client of one in a worker
    process or on a Ray replica (from what it said when ready: :mod:`bargein.engines.speak.voice_list`), and
    the by-language router (its default voice's). One without it (a fake) takes any name, as before.
    """
    key = voice.strip().lower()
    own = getattr(synthesiser, "voices", None)
    if key in REALTIME_VOICES or not isinstance(own, tuple | frozenset):
        return None
    names = {str(name).lower() for name in own}
    if key in names:
        return None
    resolve: Callable[[str], str] | None = getattr(synthesiser, "resolve_voice", None)
    default = getattr(synthesiser, "default_voice", None)
    if resolve is not None and default is not None:
        resolved = resolve(voice)
        # another spelling of one of its voices; one that resolves to the default is told from an unknown name
        # (which falls back to the default too) by ending in the voice's name, as Kokoro's ids do (af_heart)
        if resolved != default or key.rpartition("_")[2] == str(resolved).lower():
            return None
    return (f"unknown voice {voice!r}: this server speaks {', '.join(sorted(REALTIME_VOICES))} "
            f"(OpenAI names) and {', '.join(sorted(names)) or 'no voices of its own'}")


def check_voice(voice: str | None, synthesiser: object, *, param: str, event_id: str | None) -> None:
    """Refuse ``voice`` (the field ``param``) with an ``invalid_value`` :class:`ProtocolError` when
    :func:`unknown_voice` says the synthesiser cannot speak in it."""
    if voice is None:
        return
    why = unknown_voice(voice, synthesiser)
    if why is not None:
        raise ProtocolError(why, code="invalid_value", param=param, event_id=event_id)
