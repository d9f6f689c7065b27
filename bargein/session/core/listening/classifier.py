"""The listening classifier: is a segment a *query* addressed to the agent, or *noise*?

VITA's listening states, decided without a new model, from what the pipeline already has: how
long the segment was and how confident the VAD was through it, how loud it was above the session's
noise floor, and what the recogniser made of it (empty text, no-speech probability, average
log-probability, word count, and the small set of phrases Whisper invents for non-speech). While
the agent is speaking, a lone backchannel ("uh-huh", "yeah", "okay") is noise too: it acknowledges,
it does not interrupt. Pure: the features go in, a decision and its reasons come out.

Vocal sounds (a laugh, a sneeze, a throat clearing, a hum, a sigh) are the hard case: the VAD takes
them for speech and the recogniser turns them into a word or two ("Hahaha", "A chew", "Aham",
"Few"). Three rules catch most of them, measured on the listening set (``bench/turn_quality.py``):
text that spells a sound rather than words (laughter, "ahem", words without a vowel), a lone word
that is never a whole utterance ("you", "um"), and a short fragment the recogniser is unsure of
(at most two words, under 700 ms of speech, average log-probability below -0.6; one-word commands
such as "Stop." or "Why?" come out near -0.3, the vocal sounds near -0.8).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from bargein.languages import fold, is_backchannel, is_command, language, text_units
from bargein.session.core.listening.decide import ANNOTATION, decide_over_reply, primed_features, spotted_command
from bargein.session.core.listening.keyword import spoken_command
from bargein.session.core.listening.over_reply import loud_level_db
from bargein.session.core.listening.own_voice import own_voice_fields
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
SHORT_INTERRUPTION_WORDS = 3
SHORT_INTERRUPTION_MS = 600.0
SURE_LOGPROB = -0.3
MAX_WORDS_PER_S = 7.0
"""Fast speech is 4 to 5 words a second; a groan recognised as "I was sick." in 0.26 s is not speech."""
BLIP_MS = 300.0
BLIP_LOGPROB = -0.5
MIN_QUERY_SPEECH_MS = 250.0
MIN_LEVEL_ABOVE_FLOOR_DB = 3.0
"""Speech at 5 dB SNR measures 5-7 dB above the floor; below 3 dB it is no louder than the room."""
FRAGMENT_WORDS = 2
FRAGMENT_SPEECH_MS = 700.0
FRAGMENT_LOGPROB = -0.6
"""A fragment this short and this unsure is a vocal sound or a mumble, not a query."""
KNOWN_FRAGMENT_LOGPROB = -1.0
"""A lone "yeah" or "okay" may answer the agent and comes out near -0.4: it must be very unsure to be noise."""
_WORDS = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
"""Words in any script (a Chinese or Russian query is words too), with inner apostrophes and hyphens."""
_LATIN = re.compile(r"[a-z'’-]+")
_LAUGH = re.compile(r"(?:[a-z]{0,2}-?)?(?:h[aeiou]-?){2,}h?")
_VOWEL = re.compile(r"[aeiouy0-9]")
SILENT_DB = -100.0
"""The level of a frame whose measure is not a finite number (as a frame without energy is reported)."""
MAX_LEVEL_FRAMES = 2000
"""Frame levels kept per segment: 64 s of Silero's 32 ms frames, every frame of the longest turn (``max_turn_ms``,
60 s, committed as it stands), so that no word of a long turn goes unplaced and counts as the room's (1,000
frames left the last 28 s of a 60 s turn to the room)."""


@dataclass
class SegmentStats:
    """Accumulates a segment's VAD frames: duration, speech share, confidence, level."""

    threshold: float = 0.5
    frames: int = 0
    speech_frames: int = 0
    probability_sum: float = 0.0
    peak_probability: float = 0.0
    speech_power_sum: float = 0.0
    speech_ms: float = 0.0
    offset_ms: float = 0.0
    """Where the segment's first frame lies in the clip the recogniser hears (its prefix padding)."""
    frame_ms: float = 0.0
    levels_db: list[float] = field(default_factory=list)
    """Each frame's level, for the level of each recognised word (at most :data:`MAX_LEVEL_FRAMES`)."""
    probabilities: list[float] = field(default_factory=list)
    """Each frame's speech probability, alongside ``levels_db``."""

    def add(self, probability: float, energy_db: float, frame_ms: float) -> None:
        """One VAD frame of the segment (a level or probability that is not a finite number counts as silence:
        one NaN would make the segment's level, the user's reference level and every later comparison NaN)."""
        if not math.isfinite(energy_db):
            energy_db = SILENT_DB
        if not math.isfinite(probability):
            probability = 0.0
        if len(self.levels_db) < MAX_LEVEL_FRAMES:
            self.levels_db.append(energy_db)
            self.probabilities.append(probability)
        self.frame_ms = frame_ms
        self.frames += 1
        self.probability_sum += probability
        self.peak_probability = max(self.peak_probability, probability)
        if probability >= self.threshold:
            self.speech_frames += 1
            self.speech_ms += frame_ms
            self.speech_power_sum += 10 ** (energy_db / 10)

    @property
    def mean_probability(self) -> float:
        """Average speech probability over the segment."""
        return self.probability_sum / self.frames if self.frames else 0.0

    @property
    def speech_level_db(self) -> float:
        """Mean power of the speech frames, in dBFS."""
        if not self.speech_frames:
            return -100.0
        return 10 * math.log10(max(self.speech_power_sum / self.speech_frames, 1e-10))


@dataclass
class NoiseFloor:
    """A slow estimate of the background level from frames the VAD calls silence.

    It starts as the running mean of the first background frames (a floor that crept up from -70 dBFS at
    the slow rate would take seconds, and meanwhile every sound would look loud), then follows slowly.
    """

    level_db: float = -70.0
    rate: float = 0.05
    observed: int = 0

    def observe(self, probability: float, energy_db: float) -> None:
        """Track background frames only; a floor that followed speech would hide it."""
        if probability < 0.2 and -100 < energy_db < math.inf:  # an infinite frame would hold the floor there
            self.observed += 1
            self.level_db += max(self.rate, 1 / self.observed) * (energy_db - self.level_db)


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


def classify(stats: SegmentStats, transcript: Transcript | None, *, during_reply: bool,
             noise_floor_db: float, user_level_db: float | None = None,
             user_loud_level_db: float | None = None, primed: Transcript | None = None) -> ListenDecision:
    """Query or noise, and why. ``transcript`` is ``None`` when recognition failed.

    ``user_level_db``: the level of the user's own answered turns so far (``None`` before the first);
    ``user_loud_level_db``: their loud stretches' level, which the primed recognition's loud stretch is held
    against.
    ``primed``: over a reply, the user's loud stretch recognised with the listening vocabulary.
    """
    text = normalise(transcript.text) if transcript else ""
    words = text.split()
    spoken_in = transcript.language if transcript else None
    if transcript is not None and not language(spoken_in).spaced:
        words = text_units(text)  # Chinese: a character is a word
    # the language table's phrases: a command cuts the agent short even when the recogniser is unsure
    # of it (a one-syllable 停 comes out near -1.1), within its floor; a backchannel never does
    command = (transcript is not None and is_command(transcript.text, spoken_in)
               and transcript.avg_logprob >= language(spoken_in).command_min_logprob)
    level_above_floor = stats.speech_level_db - noise_floor_db
    features: dict[str, Any] = {
        "speech_ms": round(stats.speech_ms, 1), "mean_probability": round(stats.mean_probability, 3),
        "peak_probability": round(stats.peak_probability, 3), "level_above_floor_db": round(level_above_floor, 1),
        "transcript": transcript.text.strip() if transcript else None, "words": len(words),
        "no_speech_prob": round(transcript.no_speech_prob, 3) if transcript else None,
        "avg_logprob": round(transcript.avg_logprob, 3) if transcript else None, "during_reply": during_reply,
    }
    if transcript is not None and transcript.words and stats.levels_db:
        mine = user_words(stats.levels_db, stats.frame_ms, stats.offset_ms, transcript.words)
        if mine is not None:
            features.update(user_transcript=mine.text, room_words=mine.room_words,
                            user_level_above_floor_db=round(mine.level_db - noise_floor_db, 1))
    loud = loud_level_db(stats.levels_db)  # the loud stretch's level: what the primed recognition heard
    if stats.speech_frames:
        features["user_level_db"] = round(features.get("user_level_above_floor_db", level_above_floor)
                                          + noise_floor_db, 1)
        features["loud_level_db"] = round(loud, 1)
        if user_level_db is not None:
            features["below_user_db"] = round(user_level_db - features["user_level_db"], 1)
        if user_loud_level_db is not None:
            features["loud_below_user_db"] = round(user_loud_level_db - loud, 1)
        features.update(own_voice_fields(stats.levels_db, stats.probabilities, stats.frame_ms, stats.threshold,
                                         user_level_db))
    if during_reply and spoken_in in (None, "en"):  # the listening model is English; others keep the rules
        second = None
        if primed is not None:  # its level is the loud stretch's: the user's own (the plain one may have failed)
            second = primed_features(features, primed, loud - noise_floor_db, features.get("loud_below_user_db"))
            if (spoken := spoken_command(primed, second, "keeps_reply")) is not None:
                features["command_probability"] = round(spoken[0], 3)  # the loud stretch, as the encoder heard it
        decision, why = decide_over_reply(features, second)
        if second is not None:
            features.update(primed_transcript=second["transcript"], primed_avg_logprob=second["avg_logprob"],
                            primed_no_speech_prob=second["no_speech_prob"])
        if decision == "query" and (spotted := spotted_command(second or {}) or spotted_command(features)):
            features["command"] = spotted
        return ListenDecision(decision, why, features)
    reasons: list[str] = []
    if transcript is None and during_reply:
        reasons.append("recognition failed: nothing to cut the reply for")
    elif transcript is not None and not words:
        reasons.append("no words recognised")
    if stats.speech_ms < MIN_QUERY_SPEECH_MS:
        reasons.append(f"too short ({stats.speech_ms:.0f} ms of speech)")
    if level_above_floor < MIN_LEVEL_ABOVE_FLOOR_DB and stats.speech_frames:
        reasons.append(f"too faint ({level_above_floor:.1f} dB above the noise floor)")
    if transcript is not None and words and not command:
        unsure = transcript.no_speech_prob > 0.6 and transcript.avg_logprob < -0.7
        if unsure:
            reasons.append(f"recogniser unsure it was speech (no_speech {transcript.no_speech_prob:.2f})")
        elif text in HALLUCINATIONS and (transcript.no_speech_prob > 0.3 or transcript.avg_logprob < -0.8):
            reasons.append(f"a phrase the recogniser invents for non-speech ({text!r})")
        if during_reply and ((len(words) <= 3 and text in BACKCHANNELS) or is_backchannel(transcript.text, spoken_in)):
            reasons.append(f"backchannel while the agent speaks ({text!r})")
        elif (sound := sound_not_words(transcript.text, words)) is not None:
            reasons.append(sound)
        elif (len(words) <= FRAGMENT_WORDS and stats.speech_ms < FRAGMENT_SPEECH_MS
              and transcript.avg_logprob < (KNOWN_FRAGMENT_LOGPROB if text in BACKCHANNELS else FRAGMENT_LOGPROB)):
            reasons.append(f"a short fragment the recogniser is unsure of (avg_logprob {transcript.avg_logprob:.2f})")
        elif 0 < stats.speech_ms < 600 and len(words) / (stats.speech_ms / 1000) > MAX_WORDS_PER_S:
            reasons.append(f"more words than the sound can hold ({len(words)} in {stats.speech_ms:.0f} ms)")
        elif stats.speech_ms < BLIP_MS and transcript.avg_logprob < BLIP_LOGPROB:
            reasons.append(f"a blip the recogniser is unsure of ({stats.speech_ms:.0f} ms, "
                           f"avg_logprob {transcript.avg_logprob:.2f})")
        elif (during_reply and len(words) <= SHORT_INTERRUPTION_WORDS and stats.speech_ms < SHORT_INTERRUPTION_MS
              and not INTERRUPTIONS.intersection(words) and transcript.avg_logprob < SURE_LOGPROB):
            # cutting the agent short takes a command ("stop", "wait", "louder") or a question word; a
            # short sound that became some other word with middling confidence is a groan, not a turn
            reasons.append(f"a short sound over the reply that is no command ({text!r})")
    if during_reply and (spoken := spoken_command(transcript, features)) is not None:
        features["command_probability"] = round(spoken[0], 3)  # Mandarin: the encoder hears 停 the text lost
        if reasons and spoken[0] >= spoken[1]:
            return ListenDecision("query", (f"the spoken-command model says {spoken[0]:.2f} (threshold "
                                            f"{spoken[1]:.2f}) over: {'; '.join(reasons)}",), features)
    if reasons:
        return ListenDecision("noise", tuple(reasons), features)
    if transcript is None:  # speech by every other measure: the user is told the words were lost
        return ListenDecision("query", ("speech the recogniser failed on",), features)
    return ListenDecision("query", (f"{len(words)} words of speech",), features)


def segment_event_fields(item_id: str, decision: ListenDecision, action: str) -> dict[str, Any]:
    """The body of a ``bargein.listen.segment`` event."""
    return {"item_id": item_id, "decision": decision.decision, "reasons": list(decision.reasons),
            "action": action, **{key: value for key, value in decision.features.items()}}
