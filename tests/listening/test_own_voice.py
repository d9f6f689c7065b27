"""The user's own voice, not the room's, decides: segments mixed with a background talker, and loud stretches
that are no voice (issue 10's telephone-with-a-talker targets)."""

from __future__ import annotations

from typing import Any

from bargein.session import core as dx
from bargein.session.core.listening.decide import decide_over_reply, primed_features, spotted_command
from bargein.session.core.listening.own_voice import (
    loud_speech_probability,
    mixed_with_room,
    own_voice_fields,
    room_speech_ms,
    spoke_at_length,
)
from bargein.session.core.listening.thresholds import ALONE_ROOM_MS, MIXED_ROOM_MS
from bargein.values import Transcript
from tests.listening.test_over_reply import _over_a_talker
from tests.support.timelines import of

FRAME_MS = 32.0


def test_room_speech_is_speech_well_under_the_user_s_level() -> None:
    # a talker at -40 dBFS for 20 frames, the user's "Okay." at -25 for 10, a pause the VAD calls silence
    levels = [-40.0] * 20 + [-25.0] * 10 + [-70.0] * 15
    speech = [0.9] * 30 + [0.05] * 15
    assert room_speech_ms(levels, speech, FRAME_MS, 0.5, user_level_db=-26.0) == 20 * FRAME_MS
    # the user alone: their soft onset is a frame or two, no room
    assert room_speech_ms([-33.0, -25.0, -24.0, -26.0], [0.6, 0.9, 0.9, 0.9], FRAME_MS, 0.5, -26.0) == 32.0
    fields = own_voice_fields(levels, speech, FRAME_MS, 0.5, user_level_db=-26.0)
    assert fields["room_speech_ms"] == 640.0 and mixed_with_room(fields)
    assert "room_speech_ms" not in own_voice_fields(levels, speech, FRAME_MS, 0.5, user_level_db=None)
    assert not mixed_with_room({"room_speech_ms": MIXED_ROOM_MS - 1})


def test_the_loud_stretch_s_speech_probability_tells_a_tone_from_a_voice() -> None:
    # a tone at the user's level over a talker: the VAD holds the segment on the talker, not on the tone
    levels = [-40.0] * 20 + [-25.0] * 15 + [-40.0] * 20
    probabilities = [0.95] * 20 + [0.3] * 15 + [0.95] * 20
    loud = loud_speech_probability(levels, probabilities, FRAME_MS)
    assert loud is not None and loud < 0.5
    voice = [0.95] * 20 + [0.99] * 15 + [0.95] * 20
    assert (loud_speech_probability(levels, voice, FRAME_MS) or 0.0) > 0.9
    assert loud_speech_probability([], [], FRAME_MS) is None


def _recorded(**fields: Any) -> dict[str, Any]:
    """Decision fields recorded on the training families (``bench.quality.turn_quality --split train --dump``)."""
    return {"no_speech_prob": 0.3, "mean_probability": 0.8, **fields}


def _primed(features: dict[str, Any], text: str, logprob: float, loud_above_floor_db: float) -> dict[str, Any]:
    return primed_features(features, Transcript(text, avg_logprob=logprob), loud_above_floor_db, 0.3)


def test_recorded_phone_and_talker_the_user_s_okay_is_not_cut_by_the_talker_s_why() -> None:
    # flite-rms "Okay." over a talker through a telephone channel: the whole segment is the talker's words
    heard = _recorded(transcript="Why London are you going to have money?", avg_logprob=-1.214, speech_ms=3008.0,
                      level_above_floor_db=19.9, user_transcript="Why London are going money?", room_words=3,
                      user_level_above_floor_db=19.7, below_user_db=4.5, loud_probability=0.989,
                      room_speech_ms=2048.0)
    decision, why = decide_over_reply(heard, _primed(heard, "Okay.", -0.3, 24.0))
    assert decision == "noise" and why[0].startswith("primed: backchannel") and "loud stretch decides" in why[-1]
    # the same recognitions without the room's speech measured: the talker's "why" cuts, as it did before
    unmixed = {k: v for k, v in heard.items() if k != "room_speech_ms"}
    assert decide_over_reply(unmixed, _primed(unmixed, "Okay.", -0.3, 24.0))[0] == "query"


def test_a_long_sentence_whose_loud_stretch_sounds_like_okay_is_not_an_aside() -> None:
    # LibriVox 0920 read over a reply in bench.latency.first_audio (5.6 s; the event reported 1,376 ms of the room's
    # speech and a primed "okay"; the other fields are typical of that clip): the loud stretch was a
    # part of the sentence, and its primed recognition must not throw the sentence away
    heard = _recorded(transcript="Had he married a more amiable woman, he might have been made still more "
                                 "respectable than he was.", avg_logprob=-0.25, no_speech_prob=0.02,
                      speech_ms=5120.0, level_above_floor_db=38.0, room_words=0, user_level_above_floor_db=38.0,
                      below_user_db=3.0, loud_probability=0.99, room_speech_ms=1376.0)
    decision, why = decide_over_reply(heard, _primed(heard, "Okay.", -0.3, 42.0))
    assert decision == "query", why
    # the same segment with only as much speech at the user's level as the longest recorded aside (an
    # "okay" joined to a talker's phrase, 1,568 ms): its loud stretch decides, as before
    aside = {**heard, "speech_ms": 1376.0 + 1568.0}
    decision, why = decide_over_reply(aside, _primed(aside, "Okay.", -0.3, 42.0))
    assert decision == "noise" and "loud stretch decides" in why[-1]
    # a primed command still cuts a long segment, by its rule
    decision, why = decide_over_reply(heard, _primed(heard, "Stop.", -0.3, 42.0))
    assert decision == "query" and why[0].startswith("primed: 'stop'")
    # before the user's level is known the room's speech is not measured: the loud stretch's keep stands
    unmeasured = {k: v for k, v in heard.items() if k != "room_speech_ms"}
    assert not spoke_at_length(unmeasured) and spoke_at_length(heard)


def test_recorded_a_command_over_a_talker_still_cuts_on_the_loud_stretch() -> None:
    # festival-kal "Stop." over a talker, phone: only the primed stretch heard it
    heard = _recorded(transcript="Why don't you have to make money?", avg_logprob=-1.047, speech_ms=2816.0,
                      level_above_floor_db=18.5, user_transcript="Why you money?", room_words=4,
                      user_level_above_floor_db=20.6, below_user_db=3.4, loud_probability=1.0, room_speech_ms=2400.0)
    decision, why = decide_over_reply(heard, _primed(heard, "Stop.", -0.5, 24.0))
    assert decision == "query" and why[0] == "primed: 'stop', 24 dB above the room: an interruption"


def test_recorded_stop_at_minus_0_8_alone_still_interrupts() -> None:
    heard = _recorded(transcript="Stop.", avg_logprob=-0.8, speech_ms=320.0, level_above_floor_db=30.0,
                      no_speech_prob=0.2, loud_probability=0.96, room_speech_ms=64.0)
    assert decide_over_reply(heard)[0] == "query"
    assert decide_over_reply(heard, _primed(heard, "Okay.", -0.3, 30.0))[0] == "query"  # not mixed: either cuts


def test_recorded_a_user_alone_keeps_the_quiet_first_word_of_their_command() -> None:
    # festival-kal "Hold on." in a room (training families' live dump): the word timings put "Hold" on the
    # command's quiet onset, so the loud words were "on.", and the 64 ms loud stretch, primed, came back "Okay."
    heard = _recorded(transcript="Hold on.", avg_logprob=-0.203, no_speech_prob=0.126, speech_ms=192.0,
                      mean_probability=0.29, level_above_floor_db=35.7, user_transcript="on.", room_words=1,
                      user_level_above_floor_db=37.4, below_user_db=-0.5, loud_probability=0.785,
                      room_speech_ms=96.0)
    decision, why = decide_over_reply(heard, _primed(heard, "Okay.", -1.103, 36.9))
    assert decision == "query" and why[0].startswith("'hold'"), why
    # with some of the room's speech in it the loud words stay the user's: a talker's quiet "hold" is not
    assert spotted_command(heard) == "hold"
    for room_ms in (ALONE_ROOM_MS + 32, MIXED_ROOM_MS + 400):
        with_room = {**heard, "transcript": "Hold the line, the council said.", "user_transcript": "the council said.",
                     "room_words": 3, "speech_ms": 1800.0, "room_speech_ms": room_ms}
        assert spotted_command(with_room) is None
    assert spotted_command({**heard, "room_speech_ms": None}) is None  # before the user's level is known


def test_recorded_a_tone_at_the_user_s_level_over_a_talker_is_no_voice() -> None:
    # noise-tones1 over a talker: the VAD held the segment open on the talker; the tone is its loudest part
    heard = _recorded(transcript="We'll be okay, play next week. Meanwhile the win.", avg_logprob=-0.881,
                      no_speech_prob=0.343, speech_ms=2848.0, mean_probability=0.737, level_above_floor_db=10.9,
                      user_transcript="week. Meanwhile", room_words=7, user_level_above_floor_db=16.0,
                      below_user_db=5.8, loud_probability=0.493, room_speech_ms=2720.0)
    decision, why = decide_over_reply(heard)
    assert decision == "noise" and "no voice" in why[0]
    assert decide_over_reply({k: v for k, v in heard.items() if k != "loud_probability"})[0] == "query"  # the model
    # a clean, short command scores low too (Silero lags its onset), but it is not mixed with the room
    why_alone = _recorded(transcript="Why?", avg_logprob=-0.4, speech_ms=320.0, level_above_floor_db=30.0,
                          loud_probability=0.561, room_speech_ms=128.0)
    assert decide_over_reply(why_alone)[0] == "query"


TALKER_DB = -36.0
"""11 dB under the user's -25 dBFS: the segment as a whole is then under 6 dB below the user, so the
"quieter than the user" rule does not see it; its frames do."""


def test_a_plain_command_in_a_segment_mixed_with_the_room_waits_for_the_loud_stretch() -> None:
    t, item_id = _over_a_talker(talker_ms=800, talker_db=TALKER_DB)
    plain = Transcript("What? The council met on Tuesday.", avg_logprob=-0.9)
    assert t.feed(dx.SegmentTranscribed(item_id, plain, primed_pending=True)) == []  # no cut on the room's word
    decided = t.feed(dx.SegmentTranscribed(item_id, plain, primed=Transcript("Okay.", avg_logprob=-0.3)))
    assert of(decided, dx.ResumeReply) and not of(decided, dx.CancelReply)
    features = of(decided, dx.ReportSegment)[0].verdict.features
    assert features["room_speech_ms"] >= 768 and features["loud_probability"] > 0.8


def test_the_speculative_transcript_of_a_mixed_segment_spots_no_command() -> None:
    guess = Transcript("Stop. The council met.", avg_logprob=-0.5)
    t, item_id = _over_a_talker(talker_ms=800, talker_db=TALKER_DB, commit=False)
    assert not t.machine.segments.spots_command(item_id, guess)
    # under 500 ms of the room's speech: spotted at once
    t, item_id = _over_a_talker(talker_ms=320, talker_db=TALKER_DB, commit=False)
    assert t.machine.segments.spots_command(item_id, guess)
