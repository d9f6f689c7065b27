"""Questions and corrections over a reply take the turn by their words (issue 43); backchannels and the
recogniser's inventions do not, and the words must be the user's.

Each English case is a segment the fitted model would cut but the spoken-command model, hearing no command in its
loud stretch, lets go on (``command_probability`` 0.0): without the rules of ``turn_words.py`` the reply talks on.
"""

from __future__ import annotations

from bargein.session.core.listening.classifier import classify
from bargein.session.core.listening.decide import decide_over_reply, primed_features, spotted_command
from bargein.session.core.listening.turn_words import TURN_RULES, takes_the_turn
from bargein.values import Transcript
from tests.listening.test_listening_classifier import speech_stats

QUESTIONS = ("But how does that work?", "Or maybe on Friday?", "For whom?", "How?", "When?", "And then?",
             "Or maybe the blue one.", "But I asked for the red one.", "Really?", "With what?", "Is that safe?",
             "In which city?")
CORRECTIONS = ("Nope.", "Wrong.", "Not that one.", "No, the other one.", "That's not what I meant.", "Nah.")
BACKCHANNELS = ("Uh-huh.", "Yeah.", "Right.", "Okay.", "I see.", "Sure.", "Right?", "Okay?", "Mm-hmm.",
                "Okay, sure.", "Oh, I see.", "Yeah, right?")
INVENTED = ("Thank you.", "Thank you?", "you", "You?", "Thanks for watching!")


def heard(transcript: str, *, logprob: float = -0.45, level_db: float = 20.0, speech_ms: float = 600.0,
          **more: object) -> dict[str, object]:
    """Decision fields of a segment over a reply, the user alone, whose loud stretch the spoken-command model hears
    as no command."""
    return {"transcript": transcript, "avg_logprob": logprob, "no_speech_prob": 0.05, "speech_ms": speech_ms,
            "mean_probability": 0.8, "level_above_floor_db": level_db, "words": len(transcript.split()),
            "room_speech_ms": 0.0, "below_user_db": 0.0, "command_probability": 0.0, **more}


def test_questions_and_corrections_over_a_reply_cut_it_whatever_the_acoustic_models_say() -> None:
    for text in QUESTIONS + CORRECTIONS:
        decision, why = decide_over_reply(heard(text))
        assert decision == "query", (text, why)
        named = why[0].split(":")[0] in {name for name, _ in TURN_RULES}
        assert named or spotted_command(heard(text)) is not None, f"the reason names the rule that decided: {why}"


def test_the_reason_names_the_rule() -> None:
    assert decide_over_reply(heard("For whom?"))[1][0].startswith("wh_question: ")
    assert decide_over_reply(heard("Or maybe on Friday?"))[1][0].startswith("follow_up: ")
    assert decide_over_reply(heard("Really?"))[1][0].startswith("question_mark: ")
    assert decide_over_reply(heard("Not that one."))[1][0].startswith("correction: ")


def test_backchannels_and_the_recognisers_inventions_stay_noise() -> None:
    for text in BACKCHANNELS + INVENTED:
        assert takes_the_turn(text, "en") is None, text
        decision, why = decide_over_reply(heard(text))
        assert decision == "noise", (text, why)
    for text in ("So true.", "And the weather service expects rain.", "No problem.", "Not bad."):
        assert takes_the_turn(text, "en") is None, text


def test_the_words_must_be_the_users() -> None:
    assert decide_over_reply(heard("For whom?", level_db=5.0))[0] == "noise", "no louder than the room"
    quieter = decide_over_reply(heard("For whom?", below_user_db=9.0))
    assert quieter[0] == "noise" and "quieter than the user" in quieter[1][0]
    doubted = heard("For whom?", logprob=-1.1)
    assert "wh_question" not in decide_over_reply(doubted)[1][0], "a guess the recogniser doubts is no question"
    # the loud stretch, primed, is the user's "okay": the question in the whole segment is the room's
    talker = heard("and remember and what way in the third year?", speech_ms=900.0)
    primed = primed_features(heard(""), Transcript("Okay.", avg_logprob=-0.25), 22.0, 1.0)
    assert decide_over_reply(talker, primed)[0] == "noise"
    # mixed with the room: only the loud stretch's words count
    mixed = heard("Why are you going to have money?", room_speech_ms=900.0, speech_ms=1500.0)
    loud = primed_features(mixed, Transcript("For whom?", avg_logprob=-0.3), 20.0, 1.0)
    decision, why = decide_over_reply(mixed, loud)
    assert decision == "query" and why[0].startswith("primed: wh_question")


def test_thanks_and_agreement_over_a_reply_say_go_on() -> None:
    # recognised right on the training split (Festival kal in a room) and cut by the fitted model before
    for text in ("Got it, thanks.", "Sure thing.", "Okay, thanks.", "Fair enough."):
        decision, why = decide_over_reply(heard(text, command_probability=0.9))
        assert decision == "noise" and why[0].startswith("backchannel"), (text, why)
    for text in ("Thanks, but how long does it take?", "Sure thing, but why?"):
        assert decide_over_reply(heard(text))[0] == "query", text
    # what Whisper writes for speech it did not make out decides nothing by rule: the model judges it
    assert not decide_over_reply(heard("Thank you.", command_probability=0.9))[1][0].startswith("backchannel")


def test_in_a_segment_mixed_with_the_room_the_users_correction_outranks_the_rooms_level() -> None:
    # "That's not it." over a phone line (training split): the whole segment is the talker's phrase, quieter than
    # the user; the loud stretch, primed, is the user's correction
    mixed = heard("We'll take place next week.", room_speech_ms=2208.0, speech_ms=2912.0, below_user_db=10.0)
    assert decide_over_reply(mixed)[0] == "noise", "alone, the room's level keeps the reply"
    loud = primed_features(mixed, Transcript("That's not it.", avg_logprob=-0.44), 28.0, 1.0)
    decision, why = decide_over_reply(mixed, loud)
    assert decision == "query" and why[0].startswith("primed: correction"), why
    ack = primed_features(mixed, Transcript("Okay.", avg_logprob=-0.2), 28.0, 1.0)
    assert decide_over_reply(mixed, ack)[0] == "noise"
    unclear = primed_features(mixed, Transcript("That's loud.", avg_logprob=-0.38), 28.0, 1.0)
    assert decide_over_reply(mixed, unclear)[0] == "noise", "no question, no correction: the room's level stands"


def test_mandarin_questions_and_corrections_over_a_reply() -> None:
    def over_reply(text: str, logprob: float = -0.5) -> tuple[str, tuple[str, ...]]:
        verdict = classify(speech_stats(450), Transcript(text, avg_logprob=logprob, language="zh"),
                           during_reply=True, noise_floor_db=-60)
        return verdict.decision, verdict.reasons

    for text in ("多少钱？", "给谁？", "搞错了。", "那明天呢？", "另一个。"):
        decision, why = over_reply(text)
        assert decision == "query" and why[0].split(":")[0] in {n for n, _ in TURN_RULES}, (text, why)
    for text in ("嗯。", "好的。", "对对。", "谢谢观看", "不错。"):
        assert over_reply(text)[0] == "noise", text
    assert over_reply("多少钱？", logprob=-1.6)[0] == "noise", "under the language's confidence floor"
    assert takes_the_turn("谢谢观看？", "zh") is None


def test_a_fragment_led_by_a_preposition_adds_to_the_request_even_without_its_question_mark() -> None:
    # the training split's "With milk?" over a phone line: the loud stretch, primed, came back "With milk." (the
    # question mark lost) and the plain recognition was the talker's, 13 dB under the user
    for text in ("With milk.", "For two people.", "About the second one.", "Without onions", "To the station."):
        decision, why = decide_over_reply(heard(text))
        assert decision == "query" and why[0].startswith("follow_up: "), (text, why)
    mixed = heard("with military", room_speech_ms=2112.0, speech_ms=2464.0, below_user_db=12.7, logprob=-1.77)
    loud = primed_features(mixed, Transcript("With milk.", avg_logprob=-0.33), 19.0, 1.0)
    decision, why = decide_over_reply(mixed, loud)
    assert decision == "query" and why[0].startswith("primed: follow_up"), why
    # set phrases of agreement open with a preposition but add nothing; a bare lead is no fragment
    # nor does a preposition with only a pronoun: "At you." is what Whisper wrote for a sneeze (a vocal-sound case)
    for text in ("For sure.", "With pleasure.", "At last.", "By all means.", "With.", "And so on.", "At you.",
                 "For me."):
        assert takes_the_turn(text, "en") is None, text
    for text in ("Except the blue one.", "Although not today."):
        assert takes_the_turn(text, "en") == ("follow_up", f"a follow-up led by {text.split()[0].lower()!r} "
                                              f"({text.lower().rstrip('.')!r})"), text
    assert takes_the_turn("给我妈妈。", "zh") is not None
    assert takes_the_turn("给。", "zh") is None and takes_the_turn("给你。", "zh") is None
