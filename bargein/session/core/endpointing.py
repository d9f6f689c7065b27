"""How much silence ends a turn: fixed for ``server_vad``, guided by the words for ``semantic_vad``.

A partial transcript that ends a complete sentence lets the turn end sooner; one that trails off on a
filler or a conjunction ("and", "but", "so", "um") waits longer, since the speaker is likely to go on.
Confirm mode (storm guard) doubles the wait. Pure functions.
"""

from __future__ import annotations

import re

EAGERNESS_SILENCE_MS = {"high": 300, "medium": 500, "auto": 500, "low": 800}
TRAILING_WORDS = frozenset({
    "and", "but", "so", "or", "because", "um", "uh", "er", "erm", "hmm", "like", "then", "if", "with",
    "the", "a", "an", "to", "of", "my", "your", "is", "was", "i", "that", "which", "when", "well",
})
_SENTENCE_END = re.compile(r"[.!?]['\")\]]*$")
_WORD = re.compile(r"[a-z']+")
SHORTEST_MS = 200
LONGEST_MS = 2000
CONFIRM_MS = 1000


def endpoint_silence_ms(base_ms: int, *, eagerness: str | None, partial: str | None, confirm: bool) -> int:
    """The silence that ends the current turn.

    ``base_ms`` is ``silence_duration_ms``; with ``eagerness`` set (semantic VAD) the base comes from
    the eagerness and is scaled by how finished ``partial`` sounds.
    """
    silence = base_ms
    if eagerness is not None:
        silence = EAGERNESS_SILENCE_MS.get(eagerness, 500)
        text = (partial or "").strip().lower()
        words = _WORD.findall(text)
        if words and words[-1] in TRAILING_WORDS and not _SENTENCE_END.search(text):
            silence = min(LONGEST_MS, silence * 2 + 200)
        elif text and _SENTENCE_END.search(text):
            silence = max(SHORTEST_MS, int(silence * 0.6))
    if confirm:
        silence = max(silence * 2, CONFIRM_MS)
    return silence
