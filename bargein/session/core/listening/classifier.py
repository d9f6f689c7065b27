"""The listening classifier: is a segment a *query* addressed to the agent, or *noise*? The one place to read why
a segment cut the reply and why it did not.

VITA's listening states, decided without a new model, from what the pipeline already has: how
long the segment was and how confident the VAD was through it, how loud it was above the session's
noise floor, and what the recogniser made of it (empty text, no-speech probability, average
log-probability, word count, and the small set of phrases Whisper invents for non-speech). While
the agent is speaking, a lone backchannel ("uh-huh", "yeah", "okay") is noise too: it acknowledges,
it does not interrupt. Pure: the features go in, a decision and its reasons come out.

In decision order (:func:`classify`):

1. the segment's features are measured (:func:`measure`), the same fields a ``bargein.listen.segment`` event
   reports;
2. over a reply in English, :mod:`~bargein.session.core.listening.decide` decides alone (its own rules, then the
   fitted interruption model and the spoken-command model), on the plain and the primed recognition;
3. otherwise every rule of :data:`SEGMENT_RULES` and, for a worded transcript that is not a command phrase of the
   language table nor (over a reply) a question or a correction by the named rules of
   :mod:`~bargein.session.core.listening.turn_words` (Mandarin: 多少钱？, 给谁, 不是这个), of :data:`WORD_RULES` is
   asked; each group gives at most its first reason for noise;
4. over a reply in Mandarin, the spoken-command model may overrule those reasons (a bare 停 the transcript lost);
5. any reason makes the segment noise; none makes it a query (the reason names the question or correction rule
   when one decided).

Vocal sounds (a laugh, a sneeze, a throat clearing, a hum, a sigh) are the hard case: the VAD takes
them for speech and the recogniser turns them into a word or two ("Hahaha", "A chew", "Aham",
"Few"). Three rules catch most of them, measured on the listening set (``bench/quality/turn_quality.py``):
text that spells a sound rather than words (laughter, "ahem", words without a vowel), a lone word
that is never a whole utterance ("you", "um"), and a short fragment the recogniser is unsure of
(:func:`unsure_fragment`). Every number the rules compare with is named in
:mod:`~bargein.session.core.listening.thresholds`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from bargein.languages import fold, is_backchannel, is_command, language, text_units
from bargein.session.core.listening import thresholds as th
from bargein.session.core.listening.decide import ANNOTATION, decide_over_reply, primed_features, spotted_command
from bargein.session.core.listening.keyword import spoken_command
from bargein.session.core.listening.over_reply import loud_level_db
from bargein.session.core.listening.own_voice import own_voice_fields
from bargein.session.core.listening.segment_stats import SegmentStats
from bargein.session.core.listening.turn_words import takes_the_turn
from bargein.session.core.listening.user_words import user_words
from bargein.values import Transcript

BACKCHANNELS = frozenset({
    "uh-huh", "uh huh", "uhhuh", "mhm", "mm-hmm", "mm hmm", "mmhmm", "mm", "hmm", "hm", "mmm", "yeah", "yep",
    "yes", "okay", "ok", "right", "sure", "uh", "um", "ah", "oh", "aha", "i see", "got it", "alright", "cool",
})
HALLUCINATIONS = frozenset({
    "you", "thank you", "thanks", "thank you for watching", "thanks for watching", "bye", "so", "the",
    "please subscribe", "subtitles by the amara.org community", "i'm sorry", "huh", "okay",
})
VOCAL_SOUNDS = frozenset({
    "ha", "hah", "heh", "ahem", "achoo", "atchoo", "ugh", "argh", "phew", "whew", "pfft", "psst", "tsk", "hmm",
    "hmmm", "hm", "mm", "mmm", "shh", "sh", "ow", "ahh", "aah", "ooh",
})
"""Words that spell a vocal sound, not speech; a segment made only of these (or of laughter) is noise."""
YES_SOUNDS = frozenset({"mhm", "mm-hmm", "mm hmm", "mmhmm"})
"""Sounds without a vowel that still say something (yes): a backchannel, not a vocal noise."""
NEVER_ALONE = frozenset({"you", "the", "a", "an", "uh", "um", "er", "erm", "and"})
"""Words that are never a whole utterance; alone they are a recogniser's guess at a sound."""
INTERRUPTIONS = frozenset({
    "stop", "wait", "hold", "pause", "next", "skip", "louder", "quieter", "softer", "slower", "faster", "repeat",
    "again", "cancel", "enough", "no", "nope", "quiet", "shh", "hush", "sorry", "excuse", "pardon", "what", "why",
    "how", "who", "where", "when", "which", "hey", "help", "listen", "actually", "but", "back", "continue", "go",
})
"""Words that can cut the agent short on their own (LiveKit asks for a minimum word count instead)."""
_WORDS = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
"""Words in any script (a Chinese or Russian query is words too), with inner apostrophes and hyphens."""
_LATIN = re.compile(r"[a-z'’-]+")
_LAUGH = re.compile(r"(?:[a-z]{0,2}-?)?(?:h[aeiou]-?){2,}h?")
_VOWEL = re.compile(r"[aeiouy0-9]")


@dataclass(frozen=True)
class ListenDecision:
    """The classifier's verdict on one segment, with the evidence behind it."""

    decision: Literal["query", "noise"]
    reasons: tuple[str, ...]
    features: dict[str, Any] = field(default_factory=dict)


def normalise(text: str) -> str:
    """Lower case, punctuation gone, spaces single, Unicode forms folded (``fold``: "I’m" is "I'm"): for
    lexicon look-ups."""
    return " ".join(_WORDS.findall(fold(text).lower()))


def sound_not_words(text: str, words: list[str]) -> str | None:
    """Why a transcript spells a sound rather than speech (``None`` if it reads as words)."""
    if ANNOTATION.match(fold(text)):
        return f"the recogniser describes a sound ({text.strip()!r})"
    if not words:
        return None
    if all(w in VOCAL_SOUNDS or _LAUGH.fullmatch(w) for w in words):
        return f"a vocal sound, not words ({' '.join(words)!r})"
    latin = all(_LATIN.fullmatch(w) for w in words)  # the vowel test means nothing in other scripts
    if latin and not any(_VOWEL.search(w) for w in words) and " ".join(words) not in YES_SOUNDS:
        return f"no vowel in it, so not words ({' '.join(words)!r})"
    if len(words) == 1 and words[0] in NEVER_ALONE:
        return f"a word that is never a whole utterance ({words[0]!r})"
    return None


@dataclass(frozen=True)
class Heard:
    """One segment as the rules read it: its frames, its transcript normalised into words, and where it was said."""

    stats: SegmentStats
    transcript: Transcript | None
    """``None`` when recognition failed."""
    text: str
    """The transcript normalised (:func:`normalise`)."""
    words: list[str]
    """Its words (in an unspaced language, its characters)."""
    during_reply: bool
    spoken_in: str | None
    """The recogniser's language."""
    command: bool
    """A command phrase of the language table, within the language's confidence floor: it cuts the agent short
    even when the recogniser is unsure of it (a one-syllable 停 comes out near -1.1); a backchannel never does."""
    level_above_floor_db: float
    turn: tuple[str, str] | None
    """Over a reply, outside English: a question or a correction by the named rules of
    :mod:`~bargein.session.core.listening.turn_words` (the rule, why), clearly above the room and within the
    language's confidence floor; it is exempt from :data:`WORD_RULES`, as a command phrase is."""
    loud_db: float
    """The loud stretch's level (:func:`~bargein.session.core.listening.over_reply.loud_level_db`): what the primed
    recognition heard."""


def hear(stats: SegmentStats, transcript: Transcript | None, *, during_reply: bool,
         noise_floor_db: float) -> Heard:
    """The segment as the rules read it."""
    text = normalise(transcript.text) if transcript else ""
    words = text.split()
    spoken_in = transcript.language if transcript else None
    if transcript is not None and not language(spoken_in).spaced:
        words = text_units(text)  # Chinese: a character is a word
    command = (transcript is not None and is_command(transcript.text, spoken_in)
               and transcript.avg_logprob >= language(spoken_in).command_min_logprob)
    level = stats.speech_level_db - noise_floor_db
    turn = None
    if (during_reply and transcript is not None and not command and not is_backchannel(transcript.text, spoken_in)
            and level >= th.TURN_WORDS_LEVEL_DB
            and transcript.avg_logprob >= language(spoken_in).command_min_logprob):
        turn = takes_the_turn(transcript.text, spoken_in)
    return Heard(stats, transcript, text, words, during_reply, spoken_in, command, level, turn,
                 loud_level_db(stats.levels_db))


def measure(h: Heard, *, noise_floor_db: float, user_level_db: float | None,
            user_loud_level_db: float | None) -> dict[str, Any]:
    """The segment's decision fields (the body of its ``bargein.listen.segment`` event, and what
    :mod:`~bargein.session.core.listening.decide` reads)."""
    stats, transcript = h.stats, h.transcript
    features: dict[str, Any] = {
        "speech_ms": round(stats.speech_ms, 1), "mean_probability": round(stats.mean_probability, 3),
        "peak_probability": round(stats.peak_probability, 3), "level_above_floor_db": round(h.level_above_floor_db, 1),
        "transcript": transcript.text.strip() if transcript else None, "words": len(h.words),
        "no_speech_prob": round(transcript.no_speech_prob, 3) if transcript else None,
        "avg_logprob": round(transcript.avg_logprob, 3) if transcript else None, "during_reply": h.during_reply,
    }
    if transcript is not None and transcript.words and stats.levels_db:
        mine = user_words(stats.levels_db, stats.frame_ms, stats.offset_ms, transcript.words)
        if mine is not None:
            features.update(user_transcript=mine.text, room_words=mine.room_words,
                            user_level_above_floor_db=round(mine.level_db - noise_floor_db, 1))
    if stats.speech_frames:
        features["user_level_db"] = round(features.get("user_level_above_floor_db", h.level_above_floor_db)
                                          + noise_floor_db, 1)
        features["loud_level_db"] = round(h.loud_db, 1)
        if user_level_db is not None:
            features["below_user_db"] = round(user_level_db - features["user_level_db"], 1)
        if user_loud_level_db is not None:
            features["loud_below_user_db"] = round(user_loud_level_db - h.loud_db, 1)
        features.update(own_voice_fields(stats.levels_db, stats.probabilities, stats.frame_ms, stats.threshold,
                                         user_level_db))
    return features


# -- the rules on any segment ---------------------------------------------------------------------------------


def recognition_failed_over_reply(h: Heard) -> str | None:
    """Over a reply, a segment the recogniser failed on gives nothing to cut the reply for."""
    return "recognition failed: nothing to cut the reply for" if h.transcript is None and h.during_reply else None


def no_words(h: Heard) -> str | None:
    """A transcript without words (only punctuation, or empty)."""
    return "no words recognised" if h.transcript is not None and not h.words else None


def too_short(h: Heard) -> str | None:
    """Less speech than :data:`~.thresholds.MIN_QUERY_SPEECH_MS`."""
    speech_ms = h.stats.speech_ms
    return f"too short ({speech_ms:.0f} ms of speech)" if speech_ms < th.MIN_QUERY_SPEECH_MS else None


def too_faint(h: Heard) -> str | None:
    """Speech no louder than the room (:data:`~.thresholds.MIN_LEVEL_ABOVE_FLOOR_DB`)."""
    if h.level_above_floor_db < th.MIN_LEVEL_ABOVE_FLOOR_DB and h.stats.speech_frames:
        return f"too faint ({h.level_above_floor_db:.1f} dB above the noise floor)"
    return None


Rule = Callable[[Heard], str | None]
SEGMENT_RULES: tuple[tuple[Rule, ...], ...] = (
    (recognition_failed_over_reply, no_words),
    (too_short,),
    (too_faint,),
)
"""The rules on any segment, in decision order; each group gives at most its first reason."""

# -- the rules on a worded transcript that is not a command phrase --------------------------------------------


def unsure_it_was_speech(h: Heard, t: Transcript) -> str | None:
    """The recogniser doubts it was speech (:data:`~.thresholds.UNSURE_NO_SPEECH_PROB`)."""
    if t.no_speech_prob > th.UNSURE_NO_SPEECH_PROB and t.avg_logprob < th.UNSURE_LOGPROB:
        return f"recogniser unsure it was speech (no_speech {t.no_speech_prob:.2f})"
    return None


def invented_phrase(h: Heard, t: Transcript) -> str | None:
    """A phrase the recogniser invents for non-speech (:data:`HALLUCINATIONS`), said without confidence."""
    if h.text in HALLUCINATIONS and (t.no_speech_prob > th.INVENTED_NO_SPEECH_PROB
                                     or t.avg_logprob < th.INVENTED_LOGPROB):
        return f"a phrase the recogniser invents for non-speech ({h.text!r})"
    return None


def backchannel_over_reply(h: Heard, t: Transcript) -> str | None:
    """Over a reply, an acknowledgement (:data:`BACKCHANNELS`, or the language table's) says "go on"."""
    if h.during_reply and ((len(h.words) <= th.BACKCHANNEL_MAX_WORDS and h.text in BACKCHANNELS)
                           or is_backchannel(t.text, h.spoken_in)):
        return f"backchannel while the agent speaks ({h.text!r})"
    return None


def sound_not_speech(h: Heard, t: Transcript) -> str | None:
    """The words spell a sound (:func:`sound_not_words`)."""
    return sound_not_words(t.text, h.words)


def unsure_fragment(h: Heard, t: Transcript) -> str | None:
    """A short fragment the recogniser is unsure of (:data:`~.thresholds.FRAGMENT_LOGPROB`; a known
    acknowledgement must be very unsure, :data:`~.thresholds.KNOWN_FRAGMENT_LOGPROB`)."""
    floor = th.KNOWN_FRAGMENT_LOGPROB if h.text in BACKCHANNELS else th.FRAGMENT_LOGPROB
    if len(h.words) <= th.FRAGMENT_WORDS and h.stats.speech_ms < th.FRAGMENT_SPEECH_MS and t.avg_logprob < floor:
        return f"a short fragment the recogniser is unsure of (avg_logprob {t.avg_logprob:.2f})"
    return None


def too_many_words(h: Heard, t: Transcript) -> str | None:
    """More words than a short sound can hold (:data:`~.thresholds.MAX_WORDS_PER_S`)."""
    speech_ms = h.stats.speech_ms
    if 0 < speech_ms < th.FAST_SPEECH_MAX_MS and len(h.words) / (speech_ms / 1000) > th.MAX_WORDS_PER_S:
        return f"more words than the sound can hold ({len(h.words)} in {speech_ms:.0f} ms)"
    return None


def unsure_blip(h: Heard, t: Transcript) -> str | None:
    """A blip the recogniser is unsure of (:data:`~.thresholds.BLIP_MS`, :data:`~.thresholds.BLIP_LOGPROB`)."""
    if h.stats.speech_ms < th.BLIP_MS and t.avg_logprob < th.BLIP_LOGPROB:
        return f"a blip the recogniser is unsure of ({h.stats.speech_ms:.0f} ms, avg_logprob {t.avg_logprob:.2f})"
    return None


def no_command_over_reply(h: Heard, t: Transcript) -> str | None:
    """Over a reply, cutting the agent short takes a command ("stop", "wait", "louder") or a question word
    (:data:`INTERRUPTIONS`): a short sound that became some other word with middling confidence is a groan, not a
    turn (:data:`~.thresholds.SURE_LOGPROB`)."""
    if (h.during_reply and len(h.words) <= th.SHORT_INTERRUPTION_WORDS and h.stats.speech_ms < th.SHORT_INTERRUPTION_MS
            and not INTERRUPTIONS.intersection(h.words) and t.avg_logprob < th.SURE_LOGPROB):
        return f"a short sound over the reply that is no command ({h.text!r})"
    return None


WordRule = Callable[[Heard, Transcript], str | None]
WORD_RULES: tuple[tuple[WordRule, ...], ...] = (
    (unsure_it_was_speech, invented_phrase),
    (backchannel_over_reply, sound_not_speech, unsure_fragment, too_many_words, unsure_blip, no_command_over_reply),
)
"""The rules on a worded transcript that is not a command phrase, in decision order; each group gives at most its
first reason."""


def noise_reasons(h: Heard) -> list[str]:
    """Every reason the rules find for noise (:data:`SEGMENT_RULES`, then :data:`WORD_RULES`)."""
    reasons = [why for group in SEGMENT_RULES if (why := next(filter(None, (rule(h) for rule in group)), None))]
    if h.transcript is not None and h.words and not h.command and h.turn is None:
        t = h.transcript
        reasons += [why for group in WORD_RULES if (why := next(filter(None, (rule(h, t) for rule in group)), None))]
    return reasons


# -- the decision ---------------------------------------------------------------------------------------------


def classify(stats: SegmentStats, transcript: Transcript | None, *, during_reply: bool,
             noise_floor_db: float, user_level_db: float | None = None,
             user_loud_level_db: float | None = None, primed: Transcript | None = None) -> ListenDecision:
    """Query or noise, and why (the module docstring's steps). ``transcript`` is ``None`` when recognition failed.

    ``user_level_db``: the level of the user's own answered turns so far (``None`` before the first);
    ``user_loud_level_db``: their loud stretches' level, which the primed recognition's loud stretch is held
    against.
    ``primed``: over a reply, the user's loud stretch recognised with the listening vocabulary.
    """
    h = hear(stats, transcript, during_reply=during_reply, noise_floor_db=noise_floor_db)
    features = measure(h, noise_floor_db=noise_floor_db, user_level_db=user_level_db,
                       user_loud_level_db=user_loud_level_db)
    if during_reply and h.spoken_in in (None, "en"):  # the listening model is English; others keep the rules
        return over_english_reply(h, features, primed, noise_floor_db)
    reasons = noise_reasons(h)
    if during_reply and (spoken := spoken_command(transcript, features)) is not None:
        features["command_probability"] = round(spoken[0], 3)  # Mandarin: the encoder hears 停 the text lost
        if reasons and spoken[0] >= spoken[1]:
            return ListenDecision("query", (f"the spoken-command model says {spoken[0]:.2f} (threshold "
                                            f"{spoken[1]:.2f}) over: {'; '.join(reasons)}",), features)
    if reasons:
        return ListenDecision("noise", tuple(reasons), features)
    if transcript is None:  # speech by every other measure: the user is told the words were lost
        return ListenDecision("query", ("speech the recogniser failed on",), features)
    if h.turn is not None:
        return ListenDecision("query", (f"{h.turn[0]}: {h.turn[1]}, {h.level_above_floor_db:.0f} dB above the room: "
                                        "an interruption",), features)
    return ListenDecision("query", (f"{len(h.words)} words of speech",), features)


def over_english_reply(h: Heard, features: dict[str, Any], primed: Transcript | None,
                       noise_floor_db: float) -> ListenDecision:
    """Step 2: :func:`~bargein.session.core.listening.decide.decide_over_reply` on the plain recognition and, with
    ``primed``, on the loud stretch's (its level the loud stretch's: the user's own, where the plain one may have
    failed)."""
    second = None
    if primed is not None:
        second = primed_features(features, primed, h.loud_db - noise_floor_db, features.get("loud_below_user_db"))
        if (spoken := spoken_command(primed, second, "keeps_reply")) is not None:
            features["command_probability"] = round(spoken[0], 3)  # the loud stretch, as the encoder heard it
    decision, why = decide_over_reply(features, second)
    if second is not None:
        features.update(primed_transcript=second["transcript"], primed_avg_logprob=second["avg_logprob"],
                        primed_no_speech_prob=second["no_speech_prob"])
    if decision == "query" and (spotted := spotted_command(second or {}) or spotted_command(features)):
        features["command"] = spotted
    return ListenDecision(decision, why, features)


def segment_event_fields(item_id: str, decision: ListenDecision, action: str) -> dict[str, Any]:
    """The body of a ``bargein.listen.segment`` event."""
    return {"item_id": item_id, "decision": decision.decision, "reasons": list(decision.reasons),
            "action": action, **{key: value for key, value in decision.features.items()}}
