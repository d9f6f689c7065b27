"""Does a segment heard while the agent speaks cut the agent short? Rules first, then the fitted model.

Reads only the decision's ``features`` (the body of a ``bargein.listen.segment`` event), so a benchmark
dump can be re-judged without audio. In order:

1. **nothing to go on** is noise: recognition failed, no words, a description in brackets
   ("(laughs)"), a short segment the recogniser doubts is speech (no-speech probability over 0.6 with
   average log-probability under -0.7), under 150 ms of speech, or under 3 dB above the floor;
   The same for speech more than 6 dB **quieter than the user's own turns** (the session learns how loud
   the user is from the turns it answered while the agent was silent): another voice in the room; and a
   segment mixed with the room whose loudest stretch the VAD scores under 0.8 (a tone or a burst at the
   user's level, over a talker the VAD heard): see :mod:`bargein.session.core.listening.own_voice`;
2. **a sound, not words** is noise: the user's words spell a laugh, "ahem", a hum (no vowel), or a word
   that is never a whole utterance ("you", "um");
3. **a backchannel** is noise: the user's words are only "uh-huh", "okay", "sure", "I see" ..., or a few of
   them in a row ("okay, sure", "oh, I see": :func:`~bargein.session.core.listening.lexicon.only_acknowledgements`);
4. **a command or a question word, clearly louder than the room** interrupts, whatever the
   recogniser's confidence: "Stop." at average log-probability -0.8 is still "stop" (issue 10);
4b. **a question or a correction** by the named rules of :mod:`~bargein.session.core.listening.turn_words`
   ("but how does that work?", "for whom?", "nope", "not that one"), clearly louder than the room and said with
   some confidence (average log-probability -1.0 or more), interrupts whatever the fitted model or the
   spoken-command model would say of its acoustics (issue 43); it comes after a keep by either recognition (a
   loud stretch that is an "okay" makes the question in the whole segment the room's, :func:`by_words`);
5. otherwise the **interruption model** (:mod:`bargein.session.core.listening.model`) decides; it cuts nearly
   every worded segment left to it (recall first), so a cut of a short segment also needs the
   **spoken-command model** (:mod:`bargein.session.core.listening.keyword`) not to say "no command": it reads
   the encoder's view of the segment's loud stretch (``command_probability``, from the primed
   recognition), and a groan or an "uh-huh" that the transcript turned into near words ("It hurts.",
   "I'm tired.") lets the reply go on.

Over a reply the shell also recognises the segment's loud stretch a second time, primed with the
vocabulary of commands and acknowledgements (:mod:`bargein.session.core.listening.over_reply`); steps 1-4 run on
both recognitions, and a cut by either wins over a keep by either, which wins over the model. A segment
*mixed with the room* (:func:`~bargein.session.core.listening.own_voice.mixed_with_room`: over 500 ms of speech well
under the user's level) is the exception: its whole recognition holds the room's words, so a rule on the
primed one (its loud stretch, the user's) decides first. A keep by the primed recognition does not count
when the user spoke at length (:func:`~bargein.session.core.listening.own_voice.spoke_at_length`: 2.5 s of speech
at the user's own level): the loud stretch was then only part of what they said.

"The user's words" are the loud words of the segment (:mod:`bargein.session.core.listening.user_words`) when
the recogniser gave word timings, unless the segment is the user alone (at most 300 ms of the room's speech
in it, :func:`~bargein.session.core.listening.own_voice.user_alone`): then the whole transcript, the quiet onset of
"Hold on." too. (The interruption model's features, :mod:`bargein.session.core.listening.features`, keep the loud
words, as they were fitted.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from bargein.languages import fold
from bargein.session.core.listening import keyword
from bargein.session.core.listening.features import finite, words_of
from bargein.session.core.listening.lexicon import (
    BACKCHANNELS,
    COMMAND_WORDS,
    QUESTION_WORDS,
    only_acknowledgements,
    spells_a_sound,
)
from bargein.session.core.listening.model import load
from bargein.session.core.listening.own_voice import (
    loud_stretch_not_speech,
    mixed_with_room,
    spoke_at_length,
    user_alone,
)
from bargein.session.core.listening.thresholds import (
    COMMAND_LEVEL_DB,
    COMMAND_MAX_WORDS,
    COMMAND_WITHIN_WORDS,
    OVER_REPLY_MIN_LEVEL_DB,
    OVER_REPLY_MIN_SPEECH_MS,
    QUIETER_THAN_USER_DB,
    TURN_WORDS_LEVEL_DB,
    TURN_WORDS_MIN_LOGPROB,
    UNSURE_LOGPROB,
    UNSURE_MAX_MS,
    UNSURE_NO_SPEECH_PROB,
)
from bargein.session.core.listening.turn_words import takes_the_turn
from bargein.values import Transcript

ANNOTATION = re.compile(r"^\s*(?:(?:\([^)]*\)|\[[^\]]*\]|\*[^*]*\*|♪)[\s.,!?]*)+$")
"""A transcript that only describes sounds: "(laughs)", "[Music]", "*coughs*", "♪♪". Each step of the repeat
can be read one way only (a note is one note, space only after a mark): a nested repeat ("♪+" in a repeat,
space on both sides of a mark) backtracked exponentially on "♪ ♪ ♪ ... la", and 40 notes hung the session."""
NEVER_ALONE = frozenset({"you", "the", "a", "an", "uh", "um", "er", "erm", "and", "so", "i"})

Decision = Literal["query", "noise"]


def user_text(features: Mapping[str, Any]) -> str:
    """The user's words: the whole transcript when the segment is the user alone
    (:func:`~bargein.session.core.listening.own_voice.user_alone`) or no word timings placed the loud words; else the
    loud words (a segment with some of the room's speech in it, or one heard before the user's level is known)."""
    # a user alone says every word: the quiet onset of their own speech is still theirs
    placed = None if user_alone(features) else features.get("user_transcript")
    return str(placed if placed is not None else features.get("transcript") or "")


def level_of(features: Mapping[str, Any]) -> float:
    """The level of the user's words above the floor (the whole segment's without placed words); 0 dB when
    missing or not a number (NaN passes no comparison: a command would cut on it, a faint sound would not be)."""
    return finite(features.get("user_level_above_floor_db", features.get("level_above_floor_db"))) or 0.0


def spotted_command(features: Mapping[str, Any]) -> str | None:
    """The command or question word of step 4, if the segment interrupts by it."""
    words = words_of(user_text(features))
    level_db = level_of(features)
    if len(words) > COMMAND_MAX_WORDS or level_db < COMMAND_LEVEL_DB or " ".join(words) in BACKCHANNELS:
        return None
    return next((w for w in words[:COMMAND_WITHIN_WORDS] if w in COMMAND_WORDS or w in QUESTION_WORDS), None)


def primed_features(features: Mapping[str, Any], primed: Transcript, level_above_floor_db: float,
                    below_user_db: float | None) -> dict[str, Any]:
    """The decision fields of a segment as its primed recognition heard it: the same segment (duration, VAD),
    the primed transcript and its confidences, all its words the user's (it heard only the loud stretch), at
    the loud stretch's level (above the floor, and under the user's own turns)."""
    text = primed.text.strip()
    second = {key: value for key, value in features.items() if key not in ("room_words", "below_user_db")}
    second.update(transcript=text, user_transcript=text, words=len(words_of(text)),
                  no_speech_prob=round(primed.no_speech_prob, 3), avg_logprob=round(primed.avg_logprob, 3),
                  user_level_above_floor_db=round(level_above_floor_db, 1))
    if below_user_db is not None:
        second["below_user_db"] = round(below_user_db, 1)
    return second


def decide_over_reply(features: Mapping[str, Any],
                      primed: Mapping[str, Any] | None = None) -> tuple[Decision, tuple[str, ...]]:
    """Query (cut the reply) or noise (let it go on), and why; see the module docstring.

    With ``primed`` (:func:`primed_features`): a rule that cuts on either recognition cuts, else a rule that
    keeps the reply on either keeps it, else a question or a correction in either (step 4b) cuts, else the model
    judges the plain recognition. In a segment mixed with the room a rule on the primed recognition decides first,
    and without one a question or a correction in it cuts before a keep of the plain recognition's.
    """
    ruled = by_rule(features)
    second = None
    if primed is not None:
        second = by_rule(primed)
        if second is not None and second[0] == "noise" and spoke_at_length(features):
            second = None  # the loud stretch was an "okay" within a longer utterance, not all of it
        if second is not None:
            second = second[0], tuple(f"primed: {why}" for why in second[1])
            if mixed_with_room(features):  # the whole recognition holds the room's words; the loud stretch is the user
                return second[0], (*second[1], f"{float(features['room_speech_ms']):.0f} ms of the room's speech "
                                               "in the segment: its loud stretch decides")
        elif mixed_with_room(features) and (asked := by_words(features, primed)) is not None:
            # the plain recognition's keep (the room's words, its level pulled down by the room) does not outrank
            # the user's own question or correction in the loud stretch ("That's not it." over a talker)
            return asked
        for wanted in ("query", "noise"):
            chosen = next((r for r in (ruled, second) if r is not None and r[0] == wanted), None)
            if chosen is not None:
                return chosen
    if ruled is not None:
        return ruled
    asked = by_words(features, primed)
    if asked is not None:
        return asked
    return by_model(features)


def by_words(features: Mapping[str, Any],
             primed: Mapping[str, Any] | None) -> tuple[Decision, tuple[str, ...]] | None:
    """Step 4b on recognitions no rule of steps 1-4 decided: a question or a correction cuts the reply. After the
    keeps of both recognitions: when the user's loud stretch, primed, says "okay", a question in the whole segment
    is the room's ("and what way in the third year"). In a segment mixed with the room, only the primed one's
    words count."""
    whole = None if mixed_with_room(features) else turn_taken(features)
    if whole is not None:
        return "query", (f"{whole[0]}: {whole[1]}, {level_of(features):.0f} dB above the room: an interruption",)
    loud = turn_taken(primed) if primed is not None else None
    if loud is not None:
        return "query", (f"primed: {loud[0]}: {loud[1]}, {level_of(primed or {}):.0f} dB above the room: "
                         "an interruption",)
    return None


def by_model(features: Mapping[str, Any]) -> tuple[Decision, tuple[str, ...]]:
    """Step 5: the interruption model, whose cut of a short segment stands only if the spoken-command model does
    not say "no command"."""
    model = load()
    probability = model.probability(features)
    why = f"the interruption model says {probability:.2f} (threshold {model.threshold:.2f})"
    if probability < model.threshold:
        return "noise", (why,)
    if command_model_keeps(features):
        threshold = keyword.load("en").threshold  # type: ignore[union-attr]
        return "noise", (f"{why}, but the spoken-command model hears no command in its loud stretch "
                         f"({float(features['command_probability']):.2f}, threshold {threshold:.2f})",)
    return "query", (why,)


def command_model_keeps(features: Mapping[str, Any]) -> bool:
    """Does the English spoken-command model score the segment's loud stretch under its threshold (step 5)?"""
    spoken, command_model = features.get("command_probability"), keyword.load("en")
    return spoken is not None and command_model is not None and float(spoken) < command_model.threshold


def by_rule(features: Mapping[str, Any]) -> tuple[Decision, tuple[str, ...]] | None:
    """Steps 1-4 of the module docstring; ``None`` leaves the segment to the model."""
    if features.get("transcript") is None:
        return "noise", ("recognition failed",)
    words = words_of(user_text(features))
    joined = " ".join(words)
    speech_ms = finite(features.get("speech_ms")) or 0.0
    level_db = level_of(features)
    if not words:
        return "noise", ("no words recognised",)
    if ANNOTATION.match(fold(str(features.get("transcript")))):
        return "noise", (f"the recogniser describes a sound ({features.get('transcript')!r})",)
    no_speech, logprob = features.get("no_speech_prob"), features.get("avg_logprob")
    if (no_speech is not None and logprob is not None and no_speech > UNSURE_NO_SPEECH_PROB
            and logprob < UNSURE_LOGPROB and speech_ms < UNSURE_MAX_MS):
        return "noise", (f"recogniser unsure it was speech (no_speech {no_speech:.2f})",)
    if speech_ms < OVER_REPLY_MIN_SPEECH_MS:
        return "noise", (f"too short ({speech_ms:.0f} ms of speech)",)
    if level_db < OVER_REPLY_MIN_LEVEL_DB:
        return "noise", (f"too faint ({level_db:.1f} dB above the noise floor)",)
    below_user = features.get("below_user_db")
    if below_user is not None and float(below_user) > QUIETER_THAN_USER_DB:
        return "noise", (f"{float(below_user):.0f} dB quieter than the user's own turns: the room's",)
    if loud_stretch_not_speech(features):
        return "noise", (f"its loudest stretch is no voice (speech probability {features['loud_probability']:.2f})",)
    if spells_a_sound(words) and joined not in BACKCHANNELS:
        return "noise", (f"a vocal sound, not words ({joined!r})",)
    whole = words_of(str(features.get("transcript")))
    if len(whole) == 1 and whole[0] in NEVER_ALONE:
        return "noise", (f"a word that is never a whole utterance ({whole[0]!r})",)
    if only_acknowledgements(words):  # "okay", or a few in a row: "okay, sure", "oh, I see"
        return "noise", (f"backchannel while the agent speaks ({joined!r})",)
    command = spotted_command(features)
    if command is not None:
        return "query", (f"{command!r}, {level_db:.0f} dB above the room: an interruption",)
    return None


def turn_taken(features: Mapping[str, Any]) -> tuple[str, str] | None:
    """Step 4b: the user's words are a question or a correction (:mod:`~bargein.session.core.listening.turn_words`:
    the rule's name and why), clearly above the room (:data:`TURN_WORDS_LEVEL_DB`) and not a guess the recogniser
    doubts (:data:`TURN_WORDS_MIN_LOGPROB`)."""
    logprob = finite(features.get("avg_logprob"))
    if level_of(features) < TURN_WORDS_LEVEL_DB or logprob is None or logprob < TURN_WORDS_MIN_LOGPROB:
        return None
    return takes_the_turn(user_text(features), "en")
